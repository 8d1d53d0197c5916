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
from fleetmind.serving.incidents.manager import dependents, explained_nodes  # noqa: E402
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
from fleetmind.serving.ui.svg import (  # noqa: E402
    MAX_TREE_NODES,
    propagation_tree,
    short_id,
    text_width,
    tree_svg,
)

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


SKIPPED = "models read: names that would take the list past 200 characters are skipped)"


def test_a_cut_model_list_says_how_many_models_were_read() -> None:
    """``(23 models beyond 200 characters ignored)`` read as if the names were too long."""
    models = "|".join(f"NVIDIA-Model-{i:03d}-SXM4-80GB" for i in range(30))
    (reason,) = _reasons(_pod(1, {ANN_GPU_MODEL: models}))
    assert f"(7 of 30 {SKIPPED}" in reason


def test_one_name_too_long_is_not_called_a_cut_list() -> None:
    """clip_models skips a name that does not fit and keeps the later ones: with one 255-character
    name first, "A10" was read and the reason said "only 1 of 2 models read: the list is cut at
    200 characters", as if the list had been cut after its first name."""
    (reason,) = _reasons(_pod(1, {ANN_GPU_MODEL: "H100-" + "x" * 250 + "|A10"}))
    assert reason.endswith(f"no GPU of the pod's model (A10) here (1 of 2 {SKIPPED}")
    assert "cut" not in reason


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
    # the line reads as the body does (docs/serving/cluster.md quotes it): quotes not escaped
    assert _warnings(caplog)[-1].endswith(
        "(422) for pod ml/p: containers[0] (\"trainer\") 'cpu': '1.5.5' is not a Kubernetes quantity"
    )
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


def test_a_pod_is_not_drawn_reaching_a_pod_through_its_host() -> None:
    """The walk that builds the tree went both ways: crashlooping pod q was drawn reaching pod p
    through their host (q -runs_on-> h1 <-runs_on- p), a route along which a fault of q explains
    nothing. It follows the notifier's table now: q reaches Service s, s its caller p."""
    (cause,) = _cause_graphs(_graph(), [{"node": "c/pod/q", "path": ["c/pod/q"]}], ALERTING)
    svg = str(cause["svg"])
    assert "c/host/h1" not in svg
    assert _boxes(svg) == {"c/svc/s", "c/pod/p"}  # and the cause's own (root) box
    g = _graph()
    depth, edges = propagation_tree(g, "c/pod/q", {"c/svc/s", "c/pod/p"}, reach=dependents(g))
    assert dict(depth) == {"c/pod/q": 0, "c/svc/s": 1, "c/pod/p": 2}
    assert sorted(edges) == [("c/pod/q", "c/svc/s", "member_of"), ("c/svc/s", "c/pod/p", "calls")]
    depth, _ = propagation_tree(g, "c/host/h1", ALERTING, reach=dependents(g))
    # a host reaches its GPU and pods, and Service s through its member q
    assert dict(depth) == {
        "c/host/h1": 0,
        "c/gpu/h1/0": 1,
        "c/pod/p": 1,
        "c/pod/q": 1,
        "c/svc/s": 2,
    }


def _callers(n: int) -> DependencyGraph:
    """Service dns with ``n`` calling pods p0..p{n-1}, and a chain s5 -> s4 -> ... -> s1 -> dns of
    Services each calling the next (s5 is 5 hops from dns along dependencies)."""
    nodes = [GraphNode("c/svc/dns", "service", "c", {"cluster": "c"})]
    nodes += [GraphNode(f"c/svc/s{i}", "service", "c", {"cluster": "c"}) for i in range(1, 6)]
    nodes += [GraphNode(f"c/pod/p{i}", "pod", "c", {"cluster": "c"}) for i in range(n)]
    edges = [GraphEdge("c/svc/s1", "c/svc/dns", "calls")]
    edges += [GraphEdge(f"c/svc/s{i + 1}", f"c/svc/s{i}", "calls") for i in range(1, 5)]
    edges += [GraphEdge(f"c/pod/p{i}", "c/svc/dns", "calls") for i in range(n)]
    return DependencyGraph("g", nodes, edges)


def test_what_the_page_counts_as_explained_is_bounded_like_its_tree() -> None:
    """The page's explained walk had no bound: an alerting node a cause does not reach made it
    walk everything the cause reaches (300,000 calling pods: 812 ms a page, then 1,982 ms). It
    stops at 4 hops and :data:`MAX_TREE_NODES` nodes, like the tree; what the ranking stores for
    the notifier (no bound) is unchanged."""
    chain = _callers(0)
    alerting = {"c/svc/s4", "c/svc/s5"}
    assert explained_alerting(chain, {"node": "c/svc/dns"}, alerting) == {"c/svc/s4"}
    assert set(explained_nodes(chain, "c/svc/dns", alerting)) == alerting  # the notifier's rule
    g = _callers(MAX_TREE_NODES + 10)
    far = f"c/pod/p{MAX_TREE_NODES + 5}"  # visited after the cap (dependents keep edge order)
    alerting = {"c/pod/p3", far}
    assert explained_alerting(g, {"node": "c/svc/dns"}, alerting) == {"c/pod/p3"}
    assert set(explained_nodes(g, "c/svc/dns", alerting)) == alerting
    stored = {"node": "c/svc/dns", "explains": [far]}  # what the ranking stored still counts
    assert explained_alerting(g, stored, alerting) == alerting


def test_the_nodes_not_explained_are_named_cut_like_box_labels() -> None:
    """The note named up to 8 whole node ids: 12 pod names of 250 characters made a drawing
    14,406 px wide. Each is cut like a box's label now (40 columns, the middle giving way)."""
    longs = [f"c/pod/{'x' * 240}-{i}" for i in range(12)]
    svg = tree_svg({"c/host/h1": 0}, [], {"c/host/h1": "host"}, set(), unexplained=longs)
    (note,) = re.findall(r'<text class="unexplained"[^>]*>([^<]*)<', svg)
    names = note.split(": ", 1)[1].removesuffix(" and 4 more").split(", ")
    assert names == [short_id(n) for n in sorted(longs)[:8]]
    assert all(len(n) <= 40 and "…" in n for n in names)
    width = float(re.search(r'width="([0-9.]+)"', svg).group(1))
    assert width <= 24 + text_width(note, 11.0) + 1 < 3_000


def test_a_firing_cause_is_still_marked_as_firing() -> None:
    """Only the alerting nodes a cause explains were passed as alerting, and a cause does not
    explain itself: a cause with its own firing alert lost its red outline and dot."""
    alerting = ALERTING | {"c/pod/q"}
    (cause,) = _cause_graphs(_graph(), [{"node": "c/pod/q", "path": ["c/pod/q"]}], alerting)
    svg = str(cause["svg"])
    assert '<g class="node root alerting"><title>c/pod/q (pod) - firing alert</title>' in svg
    assert _alerting_boxes(svg) == {"c/svc/s", "c/pod/p"}
