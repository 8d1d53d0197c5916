"""A federated cluster that stops sending drops out of the fleet after
``FLEETMIND_TELEMETRY_MAX_AGE_S``, not after Prometheus's 5-minute lookback.

Federated samples carry their own timestamps (``/federate`` exposes them), and Prometheus marks no
such series stale when its source goes: "Staleness will not be marked for time series that have
timestamps included in their scrapes. Only the 5 minute threshold will be applied" (Prometheus
docs, ``docs/querying/basics.md``, "Staleness"). The real binary scrapes exposition texts with
explicit timestamps, as a federating Prometheus scrapes ``/federate``: cluster ``a`` live,
cluster ``b`` last heard of 200 s ago, and the federation target of cluster ``c`` down.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from k8s_helpers import ExporterServer, Prometheus, prometheus_binary

from fleetmind.serving.telemetry.doctor import diagnose
from fleetmind.serving.telemetry.prometheus import DEFAULT_MAX_AGE_S, PrometheusApiSource

SILENT_FOR_S = 200.0  # past the default bound, inside Prometheus's 5-minute lookback


def cluster_text(cluster: str, ts_ms: int | None) -> str:
    """One GPU node of ``cluster``: DCGM and kube-state-metrics series (``ts_ms``: their explicit
    timestamp, as ``/federate`` writes it; None: none, a live direct scrape)."""
    at = f" {ts_ms}" if ts_ms is not None else ""
    node = f'node="{cluster}-gpu-0"'
    gpu = f'gpu="0",UUID="GPU-{cluster}0",modelName="NVIDIA A100-SXM4-80GB",{node}'
    return "\n".join(
        [
            f"DCGM_FI_DEV_GPU_UTIL{{{gpu}}} 0{at}",
            f"DCGM_FI_DEV_FB_USED{{{gpu}}} 500{at}",
            f"DCGM_FI_DEV_FB_FREE{{{gpu}}} 81000{at}",
            f'kube_node_status_allocatable{{{node},resource="cpu",unit="core"}} 64{at}',
            f'kube_node_status_allocatable{{{node},resource="memory",unit="byte"}} 2e11{at}',
            "",
        ]
    )


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if prometheus_binary() is None:
        pytest.skip("Prometheus not installed (Debian package prometheus)")
    silent_since = int((time.time() - SILENT_FOR_S) * 1000)
    exporter = ExporterServer(
        {"/a": cluster_text("a", None), "/b": cluster_text("b", silent_since)}
    )
    scrape: dict[str, dict[str, Any]] = {
        job: {"honor_labels": True, "labels": {"cluster": job[-1]}}
        for job in ("federate-a", "federate-b", "federate-c")
    }
    p = Prometheus(
        tmp_path_factory.mktemp("fed"),
        exporter,
        {"federate-a": "/a", "federate-b": "/b", "federate-c": "/gone"},  # /gone: 404, up 0
        scrape,
    )
    try:
        p.wait_for("DCGM_FI_DEV_FB_USED", 2, timeout=30)
        p.wait_for("up == 0", 1, timeout=30)
        yield p.url
    finally:
        p.stop()
        exporter.close()


@pytest.mark.external
def test_a_silent_federated_cluster_is_left_out(prom: str) -> None:
    src = PrometheusApiSource(prom)
    try:
        assert src.max_age_s == DEFAULT_MAX_AGE_S < SILENT_FOR_S
        snap = src.collect()
    finally:
        src.close()
    assert {(n.cluster, n.name) for n in snap.nodes} == {("a", "a-gpu-0")}
    (a,) = snap.nodes
    assert a.cpu_milli == 64_000 and a.gpus[0].free_milli == 1000
    # without the bound Prometheus still answers cluster b: its 5-minute lookback
    unbounded = PrometheusApiSource(prom, max_age_s=0)
    try:
        assert {n.cluster for n in unbounded.collect().nodes} == {"a", "b"}
    finally:
        unbounded.close()


@pytest.mark.external
def test_doctor_names_the_silent_cluster_and_the_federation_target_down(prom: str) -> None:
    findings = diagnose(prom, timeout_s=5.0)
    stale = [f for f in findings if f.check == "stale"]
    assert [f.level for f in stale] == ["warn"] and "b (3 series)" in stale[
        0
    ].message  # FB_USED, cpu and memory
    down = [f for f in findings if f.check == "targets" and "federation" in f.message]
    assert len(down) == 1 and down[0].level == "warn" and "c (" in down[0].message


def test_the_setting_and_the_source_share_the_default_and_the_service_passes_it() -> None:
    from fleetmind.serving.settings import Settings
    from fleetmind.serving.telemetry.base import make_source

    assert Settings.model_fields["telemetry_max_age_s"].default == DEFAULT_MAX_AGE_S
    src = make_source(
        Settings(telemetry="prometheus", prometheus_url="http://prom.test:9090",
                 telemetry_max_age_s=45.0, database_url="sqlite://")
    )  # fmt: skip
    assert isinstance(src, PrometheusApiSource) and src.max_age_s == 45.0
    assert "< 45.0))" in src.queries["DCGM"] and "< 45.0))" in src.ksm_query
    src.close()


@pytest.mark.external
def test_doctor_applies_the_services_bound_from_the_environment(
    prom: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fleetmind.data.errors import ConfigError

    monkeypatch.setenv("FLEETMIND_TELEMETRY_MAX_AGE_S", "400")  # past the silence: b is fresh
    assert not [f for f in diagnose(prom, timeout_s=5.0) if f.check == "stale"]
    monkeypatch.setenv("FLEETMIND_TELEMETRY_MAX_AGE_S", "two minutes")
    with pytest.raises(ConfigError, match="FLEETMIND_TELEMETRY_MAX_AGE_S"):
        diagnose(prom, timeout_s=5.0)
