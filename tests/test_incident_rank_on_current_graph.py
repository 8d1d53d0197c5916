"""An incident is ranked only when its alerts map onto the graph it is ranked on.

Each alert's node is stored when it is first grouped, on the graph served then. After the graph is
replaced (here: cluster ``c0`` removed), an incident of ``c0`` that gains an alert was ranked on the
new graph as if its old alerts still mapped: the analyzer, matching none of them, ranked the
graph alone and listed ``c1``'s NVLinks and the DNS as causes. ``POST /api/v1/rca`` answers such
alerts with no causes (``mapped_alerts: 0``, ``serving/rca/request.py``), and docs/serving/api.md
says an incident whose alerts match no node is kept, with no causes, and never notified.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from serving_helpers import alert
from ui_helpers import STORM_LABELS, TRUE_ROOT

from fleetmind.data.graph import DependencyGraph
from fleetmind.serving.db import Database
from fleetmind.serving.defaults.example import build_example_graph
from fleetmind.serving.graphstore import GraphStore
from fleetmind.serving.incidents import IncidentManager
from fleetmind.serving.registry import ModelRegistry
from fleetmind.serving.routers.alerts import alert_row
from fleetmind.serving.schemas import AlertIn


def _rows(*alerts: dict[str, Any]) -> list[dict[str, Any]]:
    return [alert_row(AlertIn.model_validate(a), 1000.0) for a in alerts]


def without_cluster(graph: DependencyGraph, cluster: str) -> DependencyGraph:
    """``graph`` less ``cluster``'s node and its members (and their edges)."""
    keep = [n for n in graph.nodes if n.cluster != cluster and n.id != cluster]
    ids = {n.id for n in keep}
    edges = [e for e in graph.edges if e.src in ids and e.dst in ids]
    return DependencyGraph(f"{graph.name}-without-{cluster}", keep, edges)


@pytest.fixture(scope="module")
def registry() -> ModelRegistry:
    reg = ModelRegistry(None, "heuristic:builtin-bestfit")  # the released GAT
    reg.load()
    return reg


@pytest.fixture()
def manager(tmp_path: Path, registry: ModelRegistry) -> Iterator[IncidentManager]:
    db = Database(f"sqlite:///{tmp_path}/i.db")
    db.create_all()
    yield IncidentManager(db, GraphStore(build_example_graph(), "t"), registry, window_s=600.0)
    db.dispose()


def test_an_incident_whose_cluster_left_the_graph_is_ranked_with_no_causes(
    manager: IncidentManager,
) -> None:
    db = manager.db
    storm = [
        alert(lab, starts="2026-12-01T09:00:00Z", fingerprint=f"s{i}")
        for i, lab in enumerate(STORM_LABELS[:2])
    ]
    db.store_alerts(_rows(*storm))
    manager.process_pending()
    (inc,) = db.list_incidents("open")
    assert inc["causes"][0]["node"] == TRUE_ROOT

    manager.graphs.replace(without_cluster(manager.graphs.graph, "c0"))
    # another alert of c0: it matches no node now, and joins the incident by its cluster label
    db.store_alerts(_rows(alert(STORM_LABELS[2], starts="2026-12-01T09:01:00Z", fingerprint="s2")))
    manager.process_pending()
    (inc,) = db.list_incidents("open")
    assert inc["alert_count"] == 3
    assert inc["causes"] == []  # not c1's nodes, ranked on the graph alone
