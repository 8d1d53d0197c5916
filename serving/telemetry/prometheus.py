"""The ``prometheus`` telemetry source: scrapes a DCGM-exporter ``/metrics`` endpoint.

The exposition text is parsed with prometheus-client's parser. Series are grouped into GPUs by
``(Hostname, gpu)`` (``instance`` stands in for a missing ``Hostname``), and into clusters by a
``cluster`` label (added by Prometheus relabelling or a federating exporter) or the configured default.

Fields used (DCGM field ids as exported by dcgm-exporter's default counter set):

| metric | unit | becomes |
| --- | --- | --- |
| ``DCGM_FI_DEV_GPU_UTIL`` | % | ``util_pct`` |
| ``DCGM_FI_DEV_FB_USED`` / ``DCGM_FI_DEV_FB_FREE`` | MiB | ``mem_used_mib``, ``mem_total_mib`` |
| ``DCGM_FI_DEV_XID_ERRORS`` | last XID code | ``xid_errors``; non-zero marks the GPU unhealthy |
| ``modelName`` / ``UUID`` labels | - | ``model``, ``uuid`` |
| ``pod`` label (Kubernetes mapping) | - | a GPU bound to a pod has no free share |

A GPU is free (``free_milli`` = 1000) when no pod holds it and under 5 % of its framebuffer is used;
otherwise its free share is the free framebuffer fraction.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

from fleetmind.data.errors import DataError, NotAvailableError
from fleetmind.serving.telemetry.base import FleetSnapshot, GpuState, NodeState, TelemetrySource

IDLE_MEMORY_FRACTION = 0.05
_FIELDS = {
    "DCGM_FI_DEV_GPU_UTIL": "util",
    "DCGM_FI_DEV_FB_USED": "used",
    "DCGM_FI_DEV_FB_FREE": "free",
    "DCGM_FI_DEV_XID_ERRORS": "xid",
}


class PrometheusSource(TelemetrySource):
    """Scrape ``url`` (a DCGM exporter, or anything serving the same series) on each snapshot."""

    name = "prometheus"

    def __init__(
        self, url: str, default_cluster: str = "local", timeout_s: float = 2.0, ttl_s: float = 5.0
    ) -> None:
        super().__init__(ttl_s)
        import httpx

        self.url = url
        self.default_cluster = default_cluster
        self._client = httpx.Client(timeout=timeout_s)

    def collect(self) -> FleetSnapshot:
        import httpx

        try:
            resp = self._client.get(self.url)
            resp.raise_for_status()
        except httpx.HTTPError as err:
            raise NotAvailableError(f"cannot scrape DCGM exporter at {self.url}: {err}") from None
        return FleetSnapshot("prometheus", parse_dcgm(resp.text, self.default_cluster), time.time())

    def close(self) -> None:
        self._client.close()


def parse_dcgm(text: str, default_cluster: str = "local") -> list[NodeState]:
    """Parse DCGM-exporter exposition text into nodes with GPUs.

    Raises:
        DataError: the text is not Prometheus exposition format.
    """
    from prometheus_client.parser import text_string_to_metric_families

    gpus: dict[tuple[str, str, int], dict[str, Any]] = defaultdict(dict)
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                field = _FIELDS.get(s.name)
                if field is None:
                    continue
                lab = s.labels
                host = lab.get("Hostname") or lab.get("instance", "unknown").rsplit(":", 1)[0]
                try:
                    idx = int(lab.get("gpu", "0"))
                except ValueError:
                    continue
                g = gpus[(lab.get("cluster") or default_cluster, host, idx)]
                g[field] = float(s.value)
                g.setdefault("model", lab.get("modelName") or "unknown")
                g.setdefault("uuid", lab.get("UUID"))
                if lab.get("pod"):
                    g["pod"] = lab["pod"]
    except ValueError as err:
        raise DataError(
            f"DCGM exporter answered text that is not Prometheus format: {err}"
        ) from None

    nodes: dict[tuple[str, str], NodeState] = {}
    for (cluster, host, idx), g in sorted(gpus.items()):
        node = nodes.setdefault((cluster, host), NodeState(name=host, cluster=cluster))
        used, free = g.get("used"), g.get("free")
        total = used + free if used is not None and free is not None else None
        xid = g.get("xid")
        healthy = not xid
        if not healthy or g.get("pod"):
            free_milli = 0
        elif total and used is not None:
            free_milli = 1000 if used / total < IDLE_MEMORY_FRACTION else int(1000 * free / total)
        else:
            free_milli = 0
        node.gpus.append(
            GpuState(
                index=idx,
                model=str(g.get("model", "unknown")),
                uuid=g.get("uuid"),
                util_pct=g.get("util"),
                mem_used_mib=used,
                mem_total_mib=total,
                xid_errors=xid,
                free_milli=free_milli,
                healthy=healthy,
            )
        )
    return list(nodes.values())
