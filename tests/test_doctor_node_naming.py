"""``fleetmind doctor``'s layout check names what actually named each GPU node in the snapshot the
service serves, not merely the first naming label the series carry.

dcgm-exporter in a DaemonSet pod without ``hostNetwork`` reports the pod's own name as
``Hostname`` (NVIDIA/dcgm-exporter ``internal/pkg/hostname/hostname.go``: ``NODE_NAME`` where set,
else ``os.Hostname()``, the pod's name); ``--no-hostname`` (``-n``) leaves the label out. FleetMind
then names the node after the exporter pod's node in ``kube_pod_info``, else after the scrape
target's address (``instance``, which Prometheus attaches to every scraped series).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from k8s_helpers import (
    DCGM_CHART_SCRAPE,
    KSM,
    KSM_SCRAPE,
    ExporterServer,
    Prometheus,
    dcgm_text,
    exporter_target,
)
from k8s_helpers import prometheus_binary as _prometheus_binary

from fleetmind.serving.telemetry.base import FleetSnapshot, GpuState, NodeState
from fleetmind.serving.telemetry.doctor import NAMING, _naming, diagnose
from fleetmind.serving.telemetry.prometheus import fresh

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")


class _Src:
    """A stand-in for the Prometheus source: :data:`NAMING`'s answer (two series per label set),
    and no kube-state-metrics series."""

    default_cluster = "local"
    ksm_query = "ksm"
    max_age_s = 120.0

    def __init__(self, rows: list[dict[str, str]]) -> None:
        self.rows = rows

    def query(
        self, promql: str, name: str | None = None
    ) -> list[tuple[str, dict[str, str], float]]:
        if promql == self.ksm_query:
            return []
        # the series the service reads: within its staleness bound
        assert promql == NAMING.format(series=fresh("DCGM_FI_DEV_FB_USED", self.max_age_s))
        return [("", lab, 2.0) for lab in self.rows]


def _snap(*names: str, known: tuple[str, ...] = ()) -> FleetSnapshot:
    nodes = [
        NodeState(name=n, cluster="local", gpus=[GpuState(index=0, model="H100")],
                  cpu_milli=1000 if n in known else 0)
        for n in names
    ]  # fmt: skip
    return FleetSnapshot("prometheus", nodes, 0.0)


def _levels(findings: list[Any]) -> list[tuple[str, str]]:
    return [(f.level, f.message) for f in findings]


def test_a_real_hostname_is_the_naming_label() -> None:
    got = _levels(
        _naming(_Src([{"Hostname": "gpu-a", "instance": "10.0.0.5:9400"}]), _snap("gpu-a"))
    )
    assert got == [("ok", "GPU nodes named by the 'Hostname' label (2 series)")]


def test_no_hostname_at_all_is_the_address_and_a_warning() -> None:
    """dcgm-exporter ``-n``: no Hostname, no node label; the node is the target's address."""
    got = _levels(_naming(_Src([{"instance": "10.0.0.5:9400"}]), _snap("10.0.0.5")))
    assert len(got) == 1 and got[0][0] == "warn", got
    assert "'instance': 10.0.0.5" in got[0][1] and "no Hostname" in got[0][1]


def test_a_node_label_wins_whatever_hostname_says() -> None:
    rows = [{"node": "gpu-a", "Hostname": "dcgm-exporter-x7k2p", "instance": "10.0.0.5:9400"}]
    got = _levels(_naming(_Src(rows), _snap("gpu-a", known=("gpu-a",))))
    assert got == [("ok", "GPU nodes named by the 'node' label (2 series)")]


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Two exporters whose ``Hostname`` is their pod's name: ``dcgm-exporter-a1b2c``, which
    kube-state-metrics places on ``gpu-a``, and ``dcgm-exporter-x7k2p``, which it does not list."""
    if _prometheus_binary() is None:
        pytest.skip("Prometheus not installed (Debian package prometheus)")
    exporter = ExporterServer({
        "/placed": dcgm_text("Hostname", "dcgm-exporter-a1b2c", [{"used": 500}]),
        "/unplaced": dcgm_text("Hostname", "dcgm-exporter-x7k2p", [{"used": 500}]),
        "/ksm": KSM,
    })  # fmt: skip
    p = Prometheus(
        tmp_path_factory.mktemp("naming"),
        exporter,
        {"placed": "/placed", "unplaced": "/unplaced", "ksm": "/ksm"},
        scrape={
            "placed": {**DCGM_CHART_SCRAPE, "labels": exporter_target("dcgm-exporter-a1b2c")},
            "unplaced": {**DCGM_CHART_SCRAPE, "labels": exporter_target("dcgm-exporter-x7k2p")},
            "ksm": KSM_SCRAPE,
        },
    )
    try:
        p.wait_for('{__name__=~"DCGM_FI_DEV_FB_USED|kube_pod_info"}', 2 + 3)
        yield p.url
    finally:
        p.stop()
        exporter.close()


@pytest.mark.external
def test_the_doctor_says_how_nodes_were_named(prom: str) -> None:
    """It said "GPU nodes named by the 'Hostname' label" for both, though neither node is named
    after its Hostname: one is the exporter pod's node, the other the scrape address."""
    layout = [(f.level, f.message) for f in diagnose(prom, timeout_s=5) if f.check == "layout"]
    assert not any("named by the 'Hostname' label" in m for _, m in layout), layout
    assert any(lvl == "ok" and "kube_pod_info" in m and "named by" in m for lvl, m in layout)
    (addr,) = [(lvl, m) for lvl, m in layout if "scrape target's address" in m]
    assert addr[0] == "warn" and "'instance': 127.0.0.1" in addr[1]
    assert "dcgm-exporter-x7k2p" in addr[1] and "dcgm-exporter-a1b2c" not in addr[1]
