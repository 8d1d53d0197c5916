"""The GPU rules' summaries name the node in a real Prometheus (2.42, the Debian binary) under
dcgm-exporter's chart default: no ``node`` label, ``Hostname`` the exporter pod's name.

``deploy/fleetmind-rules.yml`` looks that pod up in kube-state-metrics' ``kube_pod_info`` with the
alert template's ``query`` function (Prometheus' template reference,
https://prometheus.io/docs/prometheus/latest/configuration/template_reference/, "Queries":
``query``, ``first``, ``label``), which the rule manager evaluates against its own storage on each
evaluation (prometheus/prometheus ``rules/alerting.go``, ``Eval``: ``template.QueryFunc(query)``).
``promtool test rules`` (deploy/fleetmind-rules.test.yml) pins the label order; this checks the
lookup in a running server too, with kube-state-metrics scraped either way: ``honor_labels: true``
(kube-prometheus-stack's default; ``pod``/``node`` are the described pod's) or ``false`` (its own
target's ``pod``/``namespace`` win and the described pod is ``exported_pod``; ``honor_labels``:
https://prometheus.io/docs/prometheus/latest/configuration/configuration/#scrape_config).
dcgm-exporter's labels: NVIDIA/dcgm-exporter
``internal/pkg/hostname/hostname.go`` (``os.Hostname()``, the pod's name without hostNetwork);
the scrape's target labels: prometheus-operator's ServiceMonitor ones (:func:`exporter_target`).
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from k8s_helpers import DCGM_CHART_SCRAPE, KSM_SCRAPE, ExporterServer, exporter_target
from k8s_helpers import prometheus_binary as _prometheus_binary
from serving_helpers import free_port

from fleetmind.data.paths import REPO_ROOT

RULES = REPO_ROOT / "deploy" / "fleetmind-rules.yml"
WINDOW = 'window_size_in_ms="300000",xid="79"'
DCGM = (
    "# TYPE DCGM_EXP_XID_ERRORS_COUNT gauge\n"
    f'DCGM_EXP_XID_ERRORS_COUNT{{gpu="0",UUID="GPU-6a",Hostname="dcgm-exporter-x7k2p",{WINDOW}}} 1\n'
    f'DCGM_EXP_XID_ERRORS_COUNT{{gpu="1",UUID="GPU-7a",Hostname="dcgm-exporter-gone1",{WINDOW}}} 1\n'
)
"""Two GPUs' windowed XID 79: one exporter pod kube-state-metrics lists, one it does not."""
KSM_TEXT = (
    "# TYPE kube_pod_info gauge\n"
    'kube_pod_info{namespace="gpu-operator",pod="dcgm-exporter-x7k2p",uid="u1",node="c0-h9",'
    'created_by_kind="DaemonSet"} 1\n'
)
KSM_TARGET = {"namespace": "monitoring", "pod": "kube-state-metrics-5d9f",
              "container": "kube-state-metrics", "service": "kube-state-metrics", "endpoint": "http"}  # fmt: skip
"""kube-state-metrics' own ServiceMonitor target labels (prometheus-operator ``promcfg.go``), no
``node``: under ``honor_labels: false`` its ``pod`` becomes ``exported_pod``, ``node`` stays."""
EXPECTED = {
    "0": "GPU 0 (GPU-6a) on c0-h9 reported hardware XID 79",
    "1": "GPU 1 (GPU-7a) on dcgm-exporter-gone1 reported hardware XID 79",
}


def _alerts(url: str) -> list[dict[str, Any]]:
    """The alerts the server's rules hold now (``/api/v1/alerts``), none while it starts."""
    try:
        return httpx.get(url + "/api/v1/alerts", timeout=2.0).json()["data"]["alerts"]
    except (httpx.HTTPError, ValueError, KeyError):
        return []


def _start(
    tmp: Path, port: int, exporter: ExporterServer, ksm: tuple[dict[str, Any], dict[str, str]]
) -> subprocess.Popen[bytes]:
    """Prometheus with the shipped rules (evaluated every second) scraping dcgm-exporter as its
    chart does (``honorLabels: false``, the exporter pod's ServiceMonitor target labels) and
    kube-state-metrics with ``ksm`` (its scrape, its target labels)."""
    target = [f"127.0.0.1:{exporter.port}"]
    jobs = (("dcgm", DCGM_CHART_SCRAPE, exporter_target("dcgm-exporter-x7k2p")),
            ("ksm", *ksm))  # fmt: skip
    cfg = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [
            {
                "job_name": job,
                "metrics_path": f"/{job}",
                "honor_labels": how["honor_labels"],
                "static_configs": [{"targets": target, "labels": labels}],
            }
            for job, how, labels in jobs
        ],  # fmt: skip
    }
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(cfg))
    return subprocess.Popen(
        [
            str(_prometheus_binary()),
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


@pytest.mark.external
@pytest.mark.parametrize(
    "ksm", [(KSM_SCRAPE, {}), ({"honor_labels": False}, KSM_TARGET)], ids=["honor", "exported"]
)
def test_xid_summary_names_the_exporter_pods_node(
    tmp_path: Path, ksm: tuple[dict[str, Any], dict[str, str]]
) -> None:
    """GpuXidError on a GPU whose exporter pod ``kube_pod_info`` places on c0-h9 says "on c0-h9";
    a pod it does not list keeps the ``Hostname`` (the exporter pod's name), both with the UUID.

    The dcgm and ksm jobs are scraped independently and GpuXidError fires at once, so evaluations
    before the first kube-state-metrics scrape name the exporter pod (the documented fallback):
    the test waits (60 s at most) until the summaries are the expected ones."""
    if _prometheus_binary() is None:
        pytest.skip("prometheus is not installed (Debian package prometheus)")
    exporter = ExporterServer({"/dcgm": DCGM, "/ksm": KSM_TEXT})
    port = free_port()
    proc = _start(tmp_path, port, exporter, ksm)
    try:
        said: dict[str, str] = {}
        deadline = time.time() + 60
        while said != EXPECTED and time.time() < deadline:
            said = {
                a["labels"]["gpu"]: a["annotations"]["summary"]
                for a in _alerts(f"http://127.0.0.1:{port}")
                if a["labels"]["alertname"] == "GpuXidError"
            }
            time.sleep(0.3)
        assert said == EXPECTED
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        exporter.close()
