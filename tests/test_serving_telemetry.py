"""Telemetry plug-ins: the prometheus source against a local fake DCGM exporter serving real
exposition text, the sim source, and a clear message when NVML is missing."""

from __future__ import annotations

import sys
import threading
import types
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from fleetmind.data.errors import DataError, NotAvailableError
from fleetmind.serving.app import create_app
from fleetmind.serving.settings import Settings
from fleetmind.serving.telemetry.prometheus import PrometheusSource, parse_dcgm
from tests.serving_helpers import serve_logging

# Exposition text in the shape dcgm-exporter 3.x serves (default counters, Kubernetes pod mapping on).
_LAB = (
    'gpu="{g}",UUID="GPU-{u}",device="nvidia{g}",modelName="NVIDIA A100-SXM4-80GB",'
    'Hostname="{h}",DCGM_FI_DRIVER_VERSION="535.104.05",container="{c}",namespace="{ns}",pod="{p}"'
)


def _gpu(
    h: str, g: int, util: float, used: float, free: float, xid: float = 0, pod: str = ""
) -> str:
    lab = _LAB.format(
        g=g, u=f"{h}-{g}", h=h, c="main" if pod else "", ns="ml" if pod else "", p=pod
    )
    return (
        f"DCGM_FI_DEV_SM_CLOCK{{{lab}}} 1410\n"
        f"DCGM_FI_DEV_GPU_TEMP{{{lab}}} 34\n"
        f"DCGM_FI_DEV_POWER_USAGE{{{lab}}} 61.2\n"
        f"DCGM_FI_DEV_GPU_UTIL{{{lab}}} {util}\n"
        f"DCGM_FI_DEV_FB_FREE{{{lab}}} {free}\n"
        f"DCGM_FI_DEV_FB_USED{{{lab}}} {used}\n"
        f'DCGM_FI_DEV_XID_ERRORS{{{lab},err_code="{int(xid)}",err_msg="x"}} {xid}\n'
    )


HEADER = (
    "# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz).\n# TYPE DCGM_FI_DEV_SM_CLOCK gauge\n"
    "# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).\n# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"
    "# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).\n# TYPE DCGM_FI_DEV_POWER_USAGE gauge\n"
    "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
    "# HELP DCGM_FI_DEV_FB_FREE Framebuffer memory free (in MiB).\n# TYPE DCGM_FI_DEV_FB_FREE gauge\n"
    "# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).\n# TYPE DCGM_FI_DEV_FB_USED gauge\n"
    "# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered.\n"
    "# TYPE DCGM_FI_DEV_XID_ERRORS gauge\n"
)


def dcgm_text() -> str:
    # Prometheus text groups samples by family; build per-family blocks from per-GPU lines.
    lines = (
        _gpu("node-a", 0, 0, 1, 81049)  # idle
        + _gpu("node-a", 1, 97, 70000, 11050, pod="train-1")  # busy, bound to a pod
        + _gpu("node-a", 2, 0, 0, 81050, xid=79)  # fell off the bus
        + _gpu("node-b", 0, 12, 40525, 40525)  # half the memory used, no pod
    ).splitlines()
    fams: dict[str, list[str]] = {}
    for ln in lines:
        fams.setdefault(ln.split("{", 1)[0], []).append(ln)
    body = []
    for block in HEADER.strip().split("\n# HELP "):
        name = block.removeprefix("# HELP ").split(" ", 1)[0]
        body.append(("# HELP " + block.removeprefix("# HELP ")).strip())
        body.extend(fams.get(name, []))
    return "\n".join(body) + "\n"


@pytest.fixture
def exporter() -> Iterator[str]:
    text = dcgm_text().encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            if self.path != "/metrics":
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(text)))
            self.end_headers()
            self.wfile.write(text)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    server.shutdown()
    server.server_close()


def test_parse_dcgm_exposition() -> None:
    nodes = {n.name: n for n in parse_dcgm(dcgm_text(), default_cluster="c7")}
    assert set(nodes) == {"node-a", "node-b"} and nodes["node-a"].cluster == "c7"
    a = {g.index: g for g in nodes["node-a"].gpus}
    assert a[0].free_milli == 1000 and a[0].healthy and a[0].util_pct == 0
    assert a[0].mem_total_mib == pytest.approx(81050) and a[0].uuid == "GPU-node-a-0"
    assert a[0].model == "NVIDIA A100-SXM4-80GB"
    assert a[1].free_milli == 0 and a[1].util_pct == 97  # held by pod train-1
    assert not a[2].healthy and a[2].free_milli == 0 and a[2].xid_errors == 79
    (b,) = nodes["node-b"].gpus
    assert b.free_milli == 500


@pytest.mark.parametrize("used, free", [(10, "NaN"), ("NaN", 80000), ("+Inf", 10)])
def test_a_nan_framebuffer_sample_leaves_that_gpu_with_nothing_free(used: str, free: str) -> None:
    """The exposition format allows NaN and +Inf sample values (Prometheus "Exposition formats",
    and Prometheus returns NaN for such samples), and one of them made the whole snapshot fail
    (``ValueError: cannot convert float NaN to integer``). That GPU is unknown: nothing free."""
    text = HEADER + _gpu("node-a", 0, 0, 10, 80000) + _gpu("node-a", 1, 0, used, free)
    (node,) = parse_dcgm(text)
    gpus = {g.index: g for g in node.gpus}
    assert gpus[0].free_milli == 1000 and gpus[1].free_milli == 0


def test_parse_rejects_garbage() -> None:
    with pytest.raises(DataError, match="not Prometheus format"):
        parse_dcgm('DCGM_FI_DEV_GPU_UTIL{gpu="0" 1\n')


def test_prometheus_source_scrapes_exporter(exporter: str) -> None:
    src = PrometheusSource(exporter, default_cluster="c0", ttl_s=60)
    snap = src.snapshot()
    assert snap.source == "prometheus" and snap.num_gpus == 4
    assert src.snapshot() is snap  # cached within the ttl
    src.close()
    dead = PrometheusSource("http://127.0.0.1:9/metrics", timeout_s=0.5)
    with pytest.raises(NotAvailableError, match="cannot scrape"):
        dead.collect()


def test_service_places_on_scraped_fleet(exporter: str, tmp_path: Path) -> None:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/t.db",
        telemetry="prometheus",
        prometheus_url=exporter,
        telemetry_cluster="c0",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
    )
    with TestClient(create_app(settings)) as c:
        fleet = c.get("/api/v1/fleet").json()
        assert fleet["source"] == "prometheus" and fleet["num_gpus"] == 4
        whole = c.post("/api/v1/placements", json={"num_gpu": 1}).json()
        assert (whole["node"], whole["gpus"]) == ("node-a", [0])  # the only idle, healthy GPU
        share = c.post("/api/v1/placements", json={"num_gpu": 1, "gpu_milli": 400}).json()
        assert (share["node"], share["gpus"]) == ("node-b", [0])  # best fit: the half-used GPU
        assert c.post("/api/v1/placements", json={"num_gpu": 2}).status_code == 409


def test_missing_nvml_is_a_clear_message(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys
) -> None:  # noqa: ANN001
    fake = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    def init() -> None:
        raise NVMLError("NVML Shared Library Not Found")

    fake.NVMLError = NVMLError  # type: ignore[attr-defined]
    fake.nvmlInit = init  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    from fleetmind.serving.telemetry.nvml import NvmlSource

    with pytest.raises(NotAvailableError) as err:
        NvmlSource()
    msg = str(err.value)
    assert "NVML" in msg and "prometheus" in msg and "sim" in msg

    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/t.db",
        telemetry="nvml",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
    )
    with serve_logging(), TestClient(create_app(settings)) as c:  # the service starts anyway
        err = capsys.readouterr().err  # as `fleetmind serve` logs it: once, on stderr
        assert err.count("telemetry unavailable") == 1
        assert "WARNING:  fleetmind: telemetry unavailable: telemetry source" in err
        r = c.get("/api/v1/fleet")
        assert r.status_code == 503 and "FLEETMIND_TELEMETRY=prometheus" in r.json()["detail"]
        assert (
            c.post("/api/v1/rca", json={"alerts": [{"labels": {"cluster": "c0"}}]}).status_code
            == 200
        )
