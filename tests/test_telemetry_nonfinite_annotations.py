"""Live telemetry values that are not numbers, or out of range, are no reading: they never crash
a snapshot (a 500 on ``/api/v1/fleet`` and ``/api/v1/scheduler/filter``, a traceback from
``fleetmind doctor``) and never free a GPU that DCGM shows busy.

* ``alibabacloud.com/gpu-milli`` is free text to Kubernetes: ``"inf"``/``"1e999"`` overflowed
  ``int(float(...))``; ``0`` (a CPU-only pod), a negative share or one above 1000 (shares the
  extender refuses, ``serving/scheduler/extender.py``) made a GPU that another pod holds read free.
* kube-state-metrics numbers (allocatable, requests) that are NaN or +-Inf, and finite ones that
  overflow once scaled (cores * 1000 past ~1.8e305); a ``DCGM_FI_DEV_FB_FREE`` past ~1e306 MiB
  (``1000 * total`` overflowed).
* ``DCGM_FI_DEV_XID_ERRORS`` of +Inf (both the Prometheus and the single-exporter mode); but a
  ``DCGM_EXP_XID_ERRORS_COUNT`` of +Inf is a count above 0: an XID happened.
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
from fleetmind.serving.telemetry.base import free_milli_from_memory
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
def test_share_milli_refuses_non_numbers_and_shares_outside_1_to_1000(text: str) -> None:
    assert share_milli(text) is None


@pytest.mark.parametrize(
    ("text", "milli"), [("1000.5", 1000), ("999.9", 999), ("1.5", 1), ("1e3", 1000)]
)
def test_share_milli_cuts_the_fraction_before_checking_the_range(text: str, milli: int) -> None:
    """``"1000.5"`` is a whole GPU like ``"999.9"`` is 999: the range is checked on whole milli."""
    assert share_milli(text) == milli


def test_a_fractional_whole_gpu_share_on_two_gpus_holds_both() -> None:
    """A multi-GPU pod annotated ``gpu-milli: "1000.5"`` held its GPUs, which read free."""
    gpus = [{**GPU, "gpu": str(i), "UUID": f"GPU-{i}"} for i in range(3)]
    dcgm = [
        (name, lab, v)
        for lab in gpus
        for name, v in (("DCGM_FI_DEV_FB_USED", 0.0), ("DCGM_FI_DEV_FB_FREE", 81559.0))
    ]
    ksm = [
        ("kube_pod_info", {"node": "gpu-a", "namespace": "ml", "pod": "t", "uid": "u"}, 1.0),
        (
            "kube_pod_annotations",
            {
                "namespace": "ml",
                "pod": "t",
                "annotation_alibabacloud_com_gpu_milli": "1000.5",
                "annotation_alibabacloud_com_gpu_index": "0-1",
            },
            1.0,
        ),
    ]
    (node,) = build_nodes(dcgm, ksm, "c0")
    assert [(g.index, g.share_milli, g.free_milli) for g in node.gpus] == [
        (0, 1000, 0),
        (1, 1000, 0),
        (2, None, 1000),
    ]
    assert node.gpu_pods == frozenset({"ml/t"})


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


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize(
    ("name", "extra"),
    [
        ("kube_pod_container_resource_requests", {"resource": "nvidia_com_gpu"}),
        ("pod_gpu_requests", {}),
        ("kube_pod_init_container_resource_requests", {"resource": "nvidia_com_gpu"}),
        ("pod_init_gpu_requests", {"container": "init"}),
    ],
)
def test_a_pod_with_a_non_finite_gpu_request_holds_no_gpu(
    bad: float, name: str, extra: dict[str, str]
) -> None:
    """The request is no reading: the pod is not among the node's GPU pods (an infinite request
    charged to the node made it one) and the idle GPU stays free."""
    ksm = [
        ("kube_pod_info", {"node": "gpu-a", "namespace": "ml", "pod": "p", "uid": "u"}, 1.0),
        (name, {"node": "gpu-a", "namespace": "ml", "pod": "p", **extra}, bad),
    ]
    idle = [("DCGM_FI_DEV_FB_USED", GPU, 0.0), ("DCGM_FI_DEV_FB_FREE", GPU, 81559.0)]
    (node,) = build_nodes(idle, ksm, "c0")
    assert [(g.index, g.free_milli) for g in node.gpus] == [(0, 1000)]
    assert node.gpu_pods == frozenset() and node.pods == frozenset({"ml/p"})


# ---------------------------------------------------------------- huge finite numbers
HUGE = [1e306, -1e306, 1.7e308]
"""Finite values that overflow to +-Inf once scaled (cores * 1000, MiB * 1000)."""


@pytest.mark.parametrize("huge", HUGE)
def test_a_huge_cpu_allocatable_is_no_reading(huge: float) -> None:
    ksm = [("kube_node_status_allocatable", {"node": "gpu-a", "resource": "cpu"}, huge)]
    (node,) = build_nodes(DCGM_BUSY, ksm, "c0")
    assert (node.cpu_milli, node.cpu_milli_free) == (0, 0)


@pytest.mark.parametrize("huge", HUGE)
@pytest.mark.parametrize("name", ["node_requests", "kube_pod_container_resource_requests"])
def test_a_huge_cpu_request_leaves_nothing_free(huge: float, name: str) -> None:
    req = {"node": "gpu-a", "namespace": "ml", "pod": "train-0", "resource": "cpu"}
    (node,) = build_nodes(DCGM_BUSY, [*KSM_BUSY, (name, req, huge)], "c0")
    assert (node.cpu_milli, node.cpu_milli_free, node.memory_mib) == (8000, 0, 32768)


@pytest.mark.parametrize(
    ("resource", "value"),
    [("cpu", 1e16), ("cpu", 5e15), ("memory", 1e25), ("memory", 1.7e308)],
)
def test_node_amounts_past_64_bits_are_no_reading_and_the_policy_placer_places(
    resource: str, value: float
) -> None:
    """Finite allocatables that fit no signed 64-bit integer once scaled (1e16 cores = 1e19
    milli-cores, 1e25 bytes) are no reading: the policy placer's int64 arrays
    (``serving/scheduler/placement.py``) raised OverflowError on them."""
    from fleetmind.envs.policies import make_policy
    from fleetmind.serving.scheduler.placement import PeerPolicyPlacer, Reservations
    from fleetmind.serving.schemas import JobSpec
    from fleetmind.serving.telemetry.base import FleetSnapshot

    gpu = {"gpu": "0", "UUID": "GPU-x", "modelName": "H100", "Hostname": "gpu-a"}
    dcgm = [("DCGM_FI_DEV_FB_USED", gpu, 0.0), ("DCGM_FI_DEV_FB_FREE", gpu, 81559.0)]
    other = "memory" if resource == "cpu" else "cpu"
    ksm = [
        ("kube_node_status_allocatable", {"node": "gpu-a", "resource": resource}, value),
        ("kube_node_status_allocatable", {"node": "gpu-a", "resource": other}, 2.0**35),
    ]
    (node,) = build_nodes(dcgm, ksm, "c0")
    if resource == "cpu":
        assert (node.cpu_milli, node.cpu_milli_free) == (0, 0)
    else:
        assert (node.memory_mib, node.memory_mib_free) == (0, 0)
    job = JobSpec(num_gpu=1, gpu_milli=1000, cpu_milli=1000, memory_mib=1024)
    placer = PeerPolicyPlacer(make_policy("BestFit"), "heuristic:BestFit")
    snap = FleetSnapshot("prometheus", [node])
    assert len(placer.place(snap, job, Reservations(), 1)) == 1


@pytest.mark.parametrize("huge", [1e306, 1.7e308])
def test_a_huge_free_framebuffer_reads_a_free_share_in_range(huge: float) -> None:
    dcgm = [
        ("DCGM_FI_DEV_FB_USED", GPU, 70000.0),
        ("DCGM_FI_DEV_FB_FREE", GPU, huge),
        ("DCGM_FI_DEV_GPU_UTIL", GPU, 90.0),  # busy: the free fraction, not the idle shortcut
    ]
    (node,) = build_nodes(dcgm, [], "c0")
    assert node.gpus[0].free_milli == 1000 and node.gpus[0].mem_total_mib == huge + 70000.0
    assert free_milli_from_memory(huge / 2, huge, 90.0) == 500


def test_framebuffer_readings_summing_past_the_float_range_are_no_reading() -> None:
    dcgm = [("DCGM_FI_DEV_FB_USED", GPU, 1.7e308), ("DCGM_FI_DEV_FB_FREE", GPU, 1.7e308)]
    (node,) = build_nodes(dcgm, [], "c0")
    assert node.gpus[0].mem_total_mib is None and node.gpus[0].free_milli == 0


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


@pytest.mark.parametrize(
    ("count", "healthy"),
    [(2.0, False), (math.inf, False), (math.nan, True), (0.0, True), (-math.inf, True)]
    + [(float(0x7FFFFFFFFFFFFFF0), True)],  # DCGM_INT64_BLANK: no count
)
def test_an_infinite_windowed_xid_count_is_an_xid(count: float, healthy: bool) -> None:
    """``DCGM_EXP_XID_ERRORS_COUNT`` counts the XIDs of its ``xid`` label in the exporter's window
    (``internal/pkg/collector/xid_errors.go`` in NVIDIA/dcgm-exporter): +Inf is above 0, an XID
    happened; only NaN (and a blank) is no count."""
    dcgm = [
        ("DCGM_FI_DEV_FB_USED", GPU, 0.0),
        ("DCGM_FI_DEV_FB_FREE", GPU, 81559.0),
        ("DCGM_EXP_XID_ERRORS_COUNT", {**GPU, "xid": "79"}, count),
    ]
    (gpu,) = build_nodes(dcgm, [], "c0")[0].gpus
    assert (gpu.healthy, gpu.free_milli) == (healthy, 1000 if healthy else 0)


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
