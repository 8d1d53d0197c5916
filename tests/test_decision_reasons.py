"""Why the kube-scheduler extender refused a pod, and which alerting nodes a cause explains, as
people get to read them.

Upstream behaviour behind the expectations: kube-scheduler's ``HTTPExtender.send``
(kubernetes ``pkg/scheduler/extender.go``) returns ``failed %v with extender at URL %v, code %v``
for any status but 200 without reading the body, so the reason of a 503 or a 422 shows only in
FleetMind's log; the reasons of a 200 go to the pod's ``FailedScheduling`` event beside those of
kube-scheduler's own plugins, so each starts with ``FleetMind: ``.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from serving_helpers import serving_settings

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

from fleetmind.data.graph import DependencyGraph, GraphEdge, GraphNode  # noqa: E402
from fleetmind.serving.app import ExtenderRefusalLog, _pod_key, create_app  # noqa: E402
from fleetmind.serving.scheduler.extender import (  # noqa: E402
    ANN_GPU_COUNT,
    ANN_GPU_MILLI,
    ANN_GPU_MODEL,
    REASON_PREFIX,
    NodeIndex,
    decide,
)
from fleetmind.serving.scheduler.placement import BestFitPlacer, Reservations  # noqa: E402
from fleetmind.serving.telemetry.base import FleetSnapshot, GpuState, NodeState  # noqa: E402
from fleetmind.serving.telemetry.sim import SimSource  # noqa: E402
from fleetmind.serving.ui.router import _cause_graphs, explained_alerting  # noqa: E402

FILTER = "/api/v1/scheduler/filter"
NODES = [
    NodeState(f"g{i}", "local", [GpuState(j, "NVIDIA H100") for j in range(8)],
              96_000, 96_000, 500_000, 500_000)
    for i in (1, 2)
]  # fmt: skip


def _pod(gpus: int = 1, ann: dict[str, str] | None = None, cpu: str = "1") -> dict[str, Any]:
    res = {"cpu": cpu, "memory": "1Gi", **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
    return {
        "metadata": {"name": "p", "namespace": "ml", "uid": "u1", "annotations": ann or {}},
        "spec": {"containers": [{"name": "trainer", "resources": {"requests": res}}]},
    }


def _reasons(pod: dict[str, Any]) -> set[str]:
    """The distinct reasons :func:`decide` fails nodes g1 and g2 with for ``pod``."""
    _, d = decide({"Pod": pod, "NodeNames": ["g1", "g2"]},
                  FleetSnapshot(source="test", nodes=NODES), Reservations(), BestFitPlacer(),
                  NodeIndex())  # fmt: skip
    assert d.options == []
    return set(d.unresolvable.values()) | set(d.failed.values())


@pytest.mark.parametrize(
    "pod",
    [
        _pod(100),  # beyond the 64 GPUs supported
        _pod(1, {ANN_GPU_MILLI: "500", ANN_GPU_COUNT: "2"}),  # a share on several GPUs
        _pod(0, {ANN_GPU_MILLI: "half"}),
        _pod(1, cpu="1e9"),  # beyond the CPUs supported, in a container
    ],
)
def test_every_refusal_reason_starts_with_the_prefix(pod: dict[str, Any]) -> None:
    """A pod refused while its request was read failed every node with the bare message."""
    (reason,) = _reasons(pod)
    assert reason.startswith(REASON_PREFIX)


def test_a_reason_names_the_container() -> None:
    """``containers[0]`` alone did not say which container of the pod asks too much."""
    (reason,) = _reasons(_pod(1, cpu="1e9"))
    assert 'containers[0] ("trainer")' in reason


def test_a_reason_quotes_only_the_annotations_the_pod_sets() -> None:
    """A missing ``gpu-count`` was quoted as ``'1'``, FleetMind's default, as if the pod said so."""
    (reason,) = _reasons(_pod(0, {ANN_GPU_MILLI: "half"}))
    assert f"{ANN_GPU_MILLI} 'half'" in reason
    assert "'1'" not in reason and f"{ANN_GPU_COUNT} '" not in reason
    (reason,) = _reasons(_pod(0, {ANN_GPU_MILLI: "2000"}))  # out of range, count absent
    assert f"got {ANN_GPU_MILLI} '2000'" in reason and f"{ANN_GPU_COUNT} '" not in reason


def test_a_cut_model_list_says_how_many_models_were_read() -> None:
    """``(23 models beyond 200 characters ignored)`` read as if the names were too long."""
    models = "|".join(f"NVIDIA-Model-{i:03d}-SXM4-80GB" for i in range(30))
    (reason,) = _reasons(_pod(1, {ANN_GPU_MODEL: models}))
    assert "(only 7 of 30 models read: the list is cut at 200 characters)" in reason


@pytest.fixture()
def client(tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(create_app(serving_settings(tmp_path)), raise_server_exceptions=False) as c:
        c.app.state.services.telemetry = SimSource(NODES)
        yield c


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "extender refused" in r.getMessage()
    ]


def test_a_503_or_422_of_the_extender_is_logged_with_the_pod(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    """kube-scheduler shows only "code 503"; the reason was logged nowhere."""
    caplog.set_level(logging.WARNING, logger="fleetmind.serving")
    r = client.post(FILTER, json={"Pod": _pod(1), "NodeNames": ["gpu-node-a", "gpu-node-b"]})
    assert r.status_code == 503
    (line,) = _warnings(caplog)
    assert "(503) for pod ml/p: " in line and r.json()["detail"] in line
    bad = _pod(1, cpu="1.5.5")
    r = client.post(FILTER, json={"Pod": bad, "NodeNames": ["g1"]})
    assert r.status_code == 422 and 'containers[0] ("trainer")' in r.json()["detail"]
    assert "(422) for pod ml/p: " in _warnings(caplog)[-1]
    caplog.clear()  # the same refusal again within the minute: counted, not logged
    client.post(FILTER, json={"Pod": bad, "NodeNames": ["g1"]})
    assert _warnings(caplog) == []


def test_refusals_are_logged_once_a_minute_with_a_count(caplog: pytest.LogCaptureFixture) -> None:
    now = [100.0]
    refusals = ExtenderRefusalLog(logging.getLogger("fleetmind.test"), clock=lambda: now[0])
    caplog.set_level(logging.WARNING, logger="fleetmind.test")
    for _ in range(5):
        refusals.refused(FILTER, 503, RuntimeError("no telemetry"), "ml/p")
        now[0] += 10.0
    now[0] = 161.0
    refusals.refused(FILTER, 503, RuntimeError("no telemetry"), "ml/q")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and lines[0].endswith("for pod ml/p: no telemetry")
    assert lines[1].endswith("for pod ml/q: no telemetry (4 more refused like it in the last 61 s)")


@pytest.mark.parametrize(
    ("body", "key"),
    [
        (json.dumps({"Pod": _pod()}).encode(), "ml/p"),
        (b'{"PodName": "x", "PodNamespace": ""}', "default/x"),
        (b'{"Pod": {"metadata": {"name": "a\\nb"}}}', "default/a\\nb"),
        (b"not json", "?"),
        (b'{"Pod": 3}', "?"),
    ],
)
def test_the_pod_key_of_a_body(body: bytes, key: str) -> None:
    assert _pod_key(body) == key


def _graph() -> DependencyGraph:
    """Host h1 with GPU 0; pod q runs on h1 and is a member of Service s, which pod p calls."""
    nodes = [("c/host/h1", "host"), ("c/gpu/h1/0", "gpu"), ("c/pod/p", "pod"),
             ("c/pod/q", "pod"), ("c/svc/s", "service")]  # fmt: skip
    edges = [("c/gpu/h1/0", "c/host/h1", "attached_to"), ("c/pod/p", "c/host/h1", "runs_on"),
             ("c/pod/q", "c/host/h1", "runs_on"), ("c/pod/q", "c/svc/s", "member_of"),
             ("c/pod/p", "c/svc/s", "calls")]  # fmt: skip
    return DependencyGraph(
        "g",
        [GraphNode(i, k, "c", {"cluster": "c"}) for i, k in nodes],
        [GraphEdge(*e) for e in edges],
    )


ALERTING = {"c/gpu/h1/0", "c/svc/s", "c/pod/p"}


def _boxes(svg: str) -> set[str]:
    """The node ids drawn as boxes in ``svg``."""
    return set(re.findall(r'<g class="node(?: alerting)?"><title>(\S+) ', svg))


def _alerting_boxes(svg: str) -> set[str]:
    return set(re.findall(r'<g class="node alerting"><title>(\S+) ', svg))


def test_a_pod_is_not_drawn_as_propagating_to_its_gpu() -> None:
    """A crashlooping pod's graph reached the XID of its host's GPU through the host (the walk
    went both ways); the notifier judges "explains" by dependency direction."""
    (cause,) = _cause_graphs(_graph(), [{"node": "c/pod/q", "path": ["c/pod/q"]}], ALERTING)
    svg = str(cause["svg"])
    assert "c/gpu/h1/0" not in _boxes(svg)
    assert _alerting_boxes(svg) == {"c/svc/s", "c/pod/p"}
    assert re.search(
        r'<text class="unexplained"[^>]*>Not explained by this cause[^<]*c/gpu/h1/0<', svg
    )
    assert "to the alerting nodes it explains" in svg


def test_a_host_still_reaches_its_gpu_and_pods_and_lists_nothing() -> None:
    (cause,) = _cause_graphs(_graph(), [{"node": "c/host/h1", "path": ["c/host/h1"]}], ALERTING)
    assert _alerting_boxes(str(cause["svg"])) == ALERTING
    assert 'class="unexplained"' not in str(cause["svg"])


def test_the_stored_explains_list_of_the_top_cause_counts_too() -> None:
    """The ranking stores what the top cause explains with the pod-to-GPU edges its alerts named
    (which the served graph lacks): a GPU cause explains the pod on it."""
    g = _graph()
    assert explained_alerting(g, {"node": "c/gpu/h1/0"}, {"c/pod/q"}) == set()
    stored = {"node": "c/gpu/h1/0", "explains": ["c/pod/q", "c/pod/elsewhere"]}
    assert explained_alerting(g, stored, {"c/pod/q"}) == {"c/pod/q"}
    assert explained_alerting(g, {"node": "c/pod/q"}, ALERTING) == {"c/svc/s", "c/pod/p"}
