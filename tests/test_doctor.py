"""``fleetmind doctor --prometheus URL`` against the real Prometheus (Debian's binary) scraping
dcgm-exporter-layout texts with the chart's default (``honorLabels: false``; see
tests/test_serving_telemetry_scrape.py for the layout and its sources)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
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

from fleetmind.cli import main
from fleetmind.serving.telemetry.doctor import diagnose, has_errors

KSM_PODS = """# HELP kube_pod_container_resource_requests requests
# TYPE kube_pod_container_resource_requests gauge
kube_pod_container_resource_requests{namespace="ml",pod="train-0",container="main",node="gpu-a",resource="cpu",unit="core"} 8
# HELP kube_pod_status_phase phase
# TYPE kube_pod_status_phase gauge
kube_pod_status_phase{namespace="ml",pod="train-0",phase="Running"} 1
"""


@pytest.fixture(scope="module")
def proms(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Two Prometheus servers: ``good`` (dcgm-exporter and kube-state-metrics, a GPU free, an
    application XID), ``bad`` (no kube-state-metrics, every GPU held, a hardware XID)."""
    if _prometheus_binary() is None:
        pytest.skip("Prometheus not installed (Debian package prometheus)")
    exporter = ExporterServer({
        "/good": dcgm_text("Hostname", "gpu-a", [{"pod": "ml/train-0", "used": 70000}, {"xid": 43}]),
        "/bad": dcgm_text("Hostname", "gpu-b", [{"pod": "ml/a", "used": 70000},
                                                  {"pod": "ml/b", "used": 70000}, {"xid": 79}]),
        "/ksm": KSM + KSM_PODS,
    })  # fmt: skip
    target = exporter_target("dcgm-exporter-a1b2c")
    good = Prometheus(tmp_path_factory.mktemp("good"), exporter, {"dcgm": "/good", "ksm": "/ksm"},
                      scrape={"dcgm": {**DCGM_CHART_SCRAPE, "labels": target}, "ksm": KSM_SCRAPE})  # fmt: skip
    bad = Prometheus(tmp_path_factory.mktemp("bad"), exporter, {"dcgm": "/bad"},
                     scrape={"dcgm": {**DCGM_CHART_SCRAPE, "labels": target}})  # fmt: skip
    # a 'cluster' label on the DCGM job only (as a per-job label in deploy/prometheus.yml would
    # be), none on kube-state-metrics: the GPUs and the node's CPU land in two clusters
    split = Prometheus(tmp_path_factory.mktemp("split"), exporter, {"dcgm": "/good", "ksm": "/ksm"},
                       scrape={"dcgm": {**DCGM_CHART_SCRAPE, "labels": {**target, "cluster": "c0"}},
                               "ksm": KSM_SCRAPE})  # fmt: skip
    try:
        good.wait_for(
            '{__name__=~"DCGM_FI_DEV_FB_USED|kube_pod_info|kube_pod_status_phase"}', 2 + 3 + 1
        )
        bad.wait_for("DCGM_FI_DEV_FB_USED", 3)
        split.wait_for('{__name__=~"DCGM_FI_DEV_FB_USED|kube_pod_info|kube_pod_status_phase"}', 6)
        yield {"good": good.url, "bad": bad.url, "split": split.url}
    finally:
        good.stop()
        bad.stop()
        split.stop()
        exporter.close()


def _by(findings: list[Any]) -> dict[str, list[tuple[str, str]]]:
    out: dict[str, list[tuple[str, str]]] = {}
    for f in findings:
        out.setdefault(f.check, []).append((f.level, f.message))
    return out


@pytest.mark.external
def test_a_healthy_fleet_has_no_errors(proms: dict[str, str]) -> None:
    findings = diagnose(proms["good"])
    by = _by(findings)
    assert not has_errors(findings), findings
    assert any(lvl == "ok" and "exported_pod" in msg for lvl, msg in by["layout"])
    assert any(lvl == "ok" and "'Hostname'" in msg for lvl, msg in by["layout"])
    assert any(lvl == "ok" and "1 of 2 GPUs have room" in msg for lvl, msg in by["occupancy"])
    assert any(lvl == "info" and "application XID" in msg and "43" in msg for lvl, msg in by["xid"])
    assert any("DCGM_EXP_XID_ERRORS_COUNT" in msg for _, msg in by["metrics"])
    # the series are seconds old: no "kept the same last XID for 1h" (it said so at once)
    assert not any("kept the same" in msg for _, msg in by["xid"])
    assert not any(lvl in ("warn", "error") for lvl, _ in by.get("nodes", []))


@pytest.mark.external
def test_gpus_and_cpu_in_two_clusters_are_an_error(proms: dict[str, str]) -> None:
    """The extender then refuses every GPU pod (the GPU node has no CPU to give, the CPU node no
    GPUs); the doctor said ok."""
    findings = diagnose(proms["split"])
    nodes = _by(findings)["nodes"]
    assert has_errors(findings)
    assert any(lvl == "error" and "c0/gpu-a" in msg for lvl, msg in nodes), nodes
    assert any(lvl == "warn" and "several clusters (gpu-a)" in msg for lvl, msg in nodes), nodes
    # told which cluster the unlabelled series belong to, the doctor sees one fleet
    ok = diagnose(proms["split"], cluster="c0")
    assert not has_errors(ok) and "nodes" not in _by(ok)


@pytest.mark.external
def test_missing_series_and_a_full_fleet_are_errors(proms: dict[str, str], tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    out = tmp_path / "doctor.json"
    assert main(["doctor", "--prometheus", proms["bad"], "--json", str(out)]) == 1
    printed = capsys.readouterr().out
    assert "error  metrics: missing kube_node_status_allocatable" in printed
    assert "(is kube-state-metrics scraped?)" in printed
    assert "error  occupancy: every one of 3 GPUs looks occupied or unhealthy" in printed
    assert "warn   xid: 1 GPU(s) out for a hardware XID: gpu-b/2 (XID 79)" in printed
    report = json.loads(out.read_text())
    assert report["prometheus"] == proms["bad"] and report["errors"] == 2
    assert {f["check"] for f in report["findings"]} >= {"metrics", "layout", "occupancy", "xid"}


def test_bad_input_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    from serving_helpers import free_port

    for argv, text in (
        (["doctor", "--prometheus", "prometheus:9090"], "must be an http(s) URL"),
        (["doctor", "--prometheus", "http://node:9400/metrics"], "not an exporter"),
        (["doctor", "--prometheus", f"http://127.0.0.1:{free_port()}", "--timeout", "1"],
         "cannot query Prometheus"),
    ):  # fmt: skip
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("fleetmind: error: ") and text in err and err.count("\n") == 1
