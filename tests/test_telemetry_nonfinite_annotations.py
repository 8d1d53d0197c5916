"""Live telemetry values that are not numbers, or out of range, are no reading: they never crash
a snapshot (a 500 on ``/api/v1/fleet`` and ``/api/v1/scheduler/filter``, a traceback from
``fleetmind doctor``) and never free a GPU that DCGM shows busy.

* ``alibabacloud.com/gpu-milli`` is free text to Kubernetes: ``"inf"``/``"1e999"`` overflowed
  ``int(float(...))``; ``0`` (a CPU-only pod), a negative share or one above 1000 (shares the
  extender refuses, ``serving/scheduler/extender.py``) made a GPU that another pod holds read free.
* kube-state-metrics numbers (allocatable, requests) that are NaN or +-Inf.
* ``DCGM_FI_DEV_XID_ERRORS`` of +Inf (both the Prometheus and the single-exporter mode).
* VictoriaMetrics cluster's ``"isPartial": true`` (VictoriaMetrics CHANGELOG v1.47.0; cluster
  docs: partial answers unless ``-search.denyPartialResponse`` or ``deny_partial_response=1``).
"""

from __future__ import annotations

import math
import os
from typing import Any
from urllib.parse import parse_qs

import httpx
import pytest

from fleetmind.data.errors import NotAvailableError
from fleetmind.serving.telemetry.prometheus import (
    PrometheusApiSource,
    build_nodes,
    is_hardware_xid,
    parse_dcgm,
    share_milli,
)

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

GPU = {"gpu": "0", "UUID": "GPU-x", "modelName": "H100", "Hostname": "gpu-a"}
BUSY = {**GPU, "pod": "train-0", "namespace": "ml"}  # DCGM names train-0 on GPU 0
DCGM_BUSY = [
    ("DCGM_FI_DEV_FB_USED", BUSY, 70000.0),
    ("DCGM_FI_DEV_FB_FREE", BUSY, 11559.0),
    ("DCGM_FI_DEV_GPU_UTIL", BUSY, 90.0),
]
KSM_BUSY = [
    ("kube_pod_info", {"node": "gpu-a", "namespace": "ml", "pod": "train-0", "uid": "u0"}, 1.0),
    ("pod_gpu_requests", {"node": "gpu-a", "namespace": "ml", "pod": "train-0"}, 1.0),
    ("kube_node_status_allocatable", {"node": "gpu-a", "resource": "cpu"}, 8.0),
    ("kube_node_status_allocatable", {"node": "gpu-a", "resource": "memory"}, 2.0**35),
]
BAD_MILLI = ["inf", "1e999", "nan", "-inf", "0", "-500", "1001", "0.5"]


def annotated(milli: str, pod: str = "cpu-only") -> list[tuple[str, dict[str, str], float]]:
    """A second pod on gpu-a whose share annotation names GPU 0."""
    return [
        ("kube_pod_info", {"node": "gpu-a", "namespace": "web", "pod": pod, "uid": "u1"}, 1.0),
        (
            "kube_pod_annotations",
            {
                "namespace": "web",
                "pod": pod,
                "annotation_alibabacloud_com_gpu_milli": milli,
                "annotation_alibabacloud_com_gpu_index": "0",
            },
            1.0,
        ),
    ]


# ---------------------------------------------------------------- gpu-milli annotations
@pytest.mark.parametrize("milli", BAD_MILLI)
def test_a_bad_share_annotation_leaves_the_busy_gpu_busy(milli: str) -> None:
    (node,) = build_nodes(DCGM_BUSY, KSM_BUSY + annotated(milli), "c0")
    (gpu,) = node.gpus
    assert gpu.free_milli == 0 and gpu.share_milli is None and gpu.healthy
    assert node.cpu_milli == 8000


@pytest.mark.parametrize(("text", "milli"), [("1", 1), ("500", 500), ("1000", 1000)])
def test_a_valid_share_is_read(text: str, milli: int) -> None:
    assert share_milli(text) == milli
    (node,) = build_nodes(DCGM_BUSY[:2], KSM_BUSY[:1] + annotated(text), "c0")
    assert node.gpus[0].share_milli == milli
    assert node.gpus[0].free_milli == 1000 - milli


@pytest.mark.parametrize("text", [*BAD_MILLI, "half", ""])
def test_share_milli_refuses_what_the_extender_refuses(text: str) -> None:
    assert share_milli(text) is None


def test_shares_summing_past_a_whole_gpu_leave_it_at_zero_free() -> None:
    ksm = KSM_BUSY[:1] + annotated("700", "a") + annotated("600", "b")
    (node,) = build_nodes(DCGM_BUSY[:2], ksm, "c0")
    assert node.gpus[0].share_milli == 1300
    assert 0 <= node.gpus[0].free_milli <= 1000 and node.gpus[0].free_milli == 0


# ---------------------------------------------------------------- kube-state-metrics numbers
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("resource", ["cpu", "memory"])
def test_a_non_finite_allocatable_is_no_reading(bad: float, resource: str) -> None:
    ksm = [
        ("kube_node_status_allocatable", {"node": "gpu-a", "resource": resource}, bad),
        ("kube_node_status_allocatable", {"node": "gpu-a", "resource": "gpu-x"}, 1.0),
    ]
    (node,) = build_nodes(DCGM_BUSY, ksm, "c0")
    assert (node.cpu_milli, node.cpu_milli_free, node.memory_mib, node.memory_mib_free) == (
        0,
        0,
        0,
        0,
    )


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("resource", ["cpu", "memory"])
def test_a_non_finite_request_leaves_nothing_free(bad: float, resource: str) -> None:
    """A node's requests sum is unknown: it shows its allocatable, none of it free (showing it
    all free would place on a node that may be full)."""
    req = {"node": "gpu-a", "namespace": "ml", "pod": "train-0", "resource": resource}
    for name in ("node_requests", "kube_pod_container_resource_requests"):
        (node,) = build_nodes(DCGM_BUSY, [*KSM_BUSY, (name, req, bad)], "c0")
        assert node.cpu_milli == 8000 and node.memory_mib == 32768
        assert getattr(node, f"{'cpu_milli' if resource == 'cpu' else 'memory_mib'}_free") == 0


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_gpu_requests_and_counts_are_no_reading(bad: float) -> None:
    ksm = [
        ("kube_pod_info", {"node": "gpu-a", "namespace": "ml", "pod": "p", "uid": "u"}, 1.0),
        ("pod_gpu_requests", {"node": "gpu-a", "namespace": "ml", "pod": "p"}, bad),
        ("node_gpus", {"__name__": "kube_node_status_capacity", "node": "gpu-a"}, bad),
    ]
    idle = [("DCGM_FI_DEV_FB_USED", GPU, 0.0), ("DCGM_FI_DEV_FB_FREE", GPU, 81559.0)]
    (node,) = build_nodes(idle, ksm, "c0")
    assert [(g.index, g.free_milli) for g in node.gpus] == [(0, 1000)]


# ---------------------------------------------------------------- XIDs
@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan])
def test_a_non_finite_last_xid_is_no_reading(bad: float) -> None:
    assert not is_hardware_xid(bad)
    dcgm = [("DCGM_FI_DEV_FB_USED", GPU, 0.0), ("DCGM_FI_DEV_FB_FREE", GPU, 81559.0)]
    (node,) = build_nodes([*dcgm, ("DCGM_FI_DEV_XID_ERRORS", GPU, bad)], [], "c0")
    assert node.gpus[0].healthy and node.gpus[0].xid_errors is None
    assert node.gpus[0].free_milli == 1000


@pytest.mark.parametrize("bad", ["+Inf", "-Inf", "NaN"])
def test_a_non_finite_last_xid_from_one_exporter_is_no_reading(bad: str) -> None:
    labels = 'gpu="0",UUID="GPU-x",modelName="H100",Hostname="gpu-a"'
    text = (
        "# TYPE DCGM_FI_DEV_XID_ERRORS gauge\n"
        f"DCGM_FI_DEV_XID_ERRORS{{{labels}}} {bad}\n"
        "# TYPE DCGM_FI_DEV_FB_USED gauge\n"
        f"DCGM_FI_DEV_FB_USED{{{labels}}} 0\n"
        "# TYPE DCGM_FI_DEV_FB_FREE gauge\n"
        f"DCGM_FI_DEV_FB_FREE{{{labels}}} 81559\n"
    )
    (node,) = parse_dcgm(text, "c0")
    assert node.gpus[0].healthy and node.gpus[0].xid_errors is None


def test_a_real_hardware_xid_still_marks_the_gpu() -> None:
    dcgm = [("DCGM_FI_DEV_FB_USED", GPU, 0.0), ("DCGM_FI_DEV_XID_ERRORS", GPU, 79.0)]
    assert not build_nodes(dcgm, [], "c0")[0].gpus[0].healthy


# ---------------------------------------------------------------- VictoriaMetrics isPartial
VECTOR = {"status": "success", "data": {"resultType": "vector", "result": [
    {"metric": {"__name__": "up"}, "value": [1.0, "1"]}]}}  # fmt: skip


def _query(body: dict[str, Any]) -> tuple[list[Any], dict[str, list[str]]]:
    seen: list[bytes] = []

    def handler(r: httpx.Request) -> httpx.Response:
        seen.append(r.content)
        return httpx.Response(200, json=body)

    src = PrometheusApiSource("http://vmselect.test:8481/select/0/prometheus")
    src._client = httpx.Client(transport=httpx.MockTransport(handler))
    try:
        return src.query("up", at=1.0), parse_qs(seen[0].decode())
    finally:
        src.close()


def test_every_query_denies_victoriametrics_partial_answers() -> None:
    got, form = _query(VECTOR)
    assert got[0][2] == 1.0
    assert form["deny_partial_response"] == ["1"] and form["partial_response"] == ["false"]


def test_an_is_partial_answer_is_unavailable() -> None:
    with pytest.raises(NotAvailableError, match=r"partial result \(isPartial") as err:
        _query({**VECTOR, "isPartial": True})
    assert "vmselect.test" in str(err.value) and "\n" not in str(err.value)


def test_is_partial_false_is_a_whole_answer() -> None:
    got, _ = _query({**VECTOR, "isPartial": False})
    assert got[0][2] == 1.0


# ---------------------------------------------------------------- the doctor
@pytest.mark.parametrize("milli", ["inf", "1e999"])
def test_the_doctor_prints_no_traceback_for_an_infinite_share(
    milli: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every query answered by a stub: the DCGM entries with the busy GPU, the
    kube-state-metrics join with the bad annotation, the doctor's counts with nothing."""
    from fleetmind.cli import main

    def query(self: PrometheusApiSource, promql: str, name: str | None = None, at: Any = None):
        if promql == self.ksm_query:
            return KSM_BUSY + annotated(milli)
        if promql == self.queries["DCGM"]:
            return list(DCGM_BUSY)
        return []

    monkeypatch.setattr(PrometheusApiSource, "query", query)
    monkeypatch.delenv("FLEETMIND_GRAPH", raising=False)
    code = main(["doctor", "--prometheus", "http://127.0.0.1:18302", "--timeout", "1"])
    out = capsys.readouterr()
    assert code in (0, 1)
    assert "Traceback" not in out.err + out.out
    assert "occupancy" in out.out


def test_a_node_with_only_a_non_finite_allocatable_is_still_listed() -> None:
    ksm = [("kube_node_status_allocatable", {"node": "cpu-a", "resource": "cpu"}, math.nan)]
    (node,) = build_nodes([], ksm, "c0")
    assert node.name == "cpu-a" and node.cpu_milli == 0 and node.gpus == []
