"""What makes the incident worker rank: new evidence, not recovery; and no ranking without evidence.

* A storm that recovers, root alert first (the usual order: the GPU comes back, then what it broke),
  keeps the causes ranked while it fired. Ranked again on each resolution, the released GAT moved
  the example XID storm's top cause from the GPU to its host once the GPU's alerts had resolved,
  and the notifier paged on-call about the host.
* Alerts that match no graph node (kube-prometheus' always-firing ``Watchdog``, a ``TargetDown``
  of a job outside the graph) open an incident that is kept and listed, with no causes: ranked,
  the GAT named a host it had no alert about, and the notifier sent it to Alertmanager.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from serving_helpers import alert

from fleetmind.serving.db import Database
from fleetmind.serving.defaults.example import build_example_graph
from fleetmind.serving.graphstore import GraphStore
from fleetmind.serving.incidents import IncidentManager
from fleetmind.serving.registry import ModelRegistry
from fleetmind.serving.routers.alerts import alert_row
from fleetmind.serving.schemas import AlertIn

ROOT = Path(__file__).resolve().parents[1]


def _rows(*alerts: dict[str, Any]) -> list[dict[str, Any]]:
    return [alert_row(AlertIn.model_validate(a), 1000.0) for a in alerts]


@pytest.fixture(scope="module")
def registry() -> ModelRegistry:
    reg = ModelRegistry(None, "heuristic:builtin-bestfit")  # the released GAT
    reg.load()
    return reg


@pytest.fixture()
def manager(tmp_path: Path, registry: ModelRegistry) -> IncidentManager:
    db = Database(f"sqlite:///{tmp_path}/i.db")
    db.create_all()
    return IncidentManager(db, GraphStore(build_example_graph(), "t"), registry, window_s=600.0)


def _ranked(manager: IncidentManager, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record how many alerts each ranking of the served analyzer saw."""
    seen: list[int] = []
    impl = manager.registry.current.rca.impl
    inner = impl.find_root_causes

    def spy(graph: Any, alerts: list[dict[str, Any]], top_k: int) -> Any:
        seen.append(len(alerts))
        return inner(graph, alerts, top_k)

    monkeypatch.setattr(impl, "find_root_causes", spy)
    return seen


def test_a_recovering_storm_keeps_the_causes_ranked_while_it_fired(
    manager: IncidentManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    storm = json.loads((ROOT / "examples" / "storm-gpu-xid.json").read_text())
    db = manager.db
    db.store_alerts(_rows(*storm["alerts"]))
    seen = _ranked(manager, monkeypatch)
    manager.process_pending()
    (inc,) = db.list_incidents("open")
    firing_causes = inc["causes"]
    assert firing_causes[0]["node"] == storm["expected_root"]
    assert seen == [len(storm["alerts"])]

    for a in storm["alerts"]:  # recovery, root first, one delivery per alert
        done = {**a, "status": "resolved", "endsAt": "2026-12-01T09:30:00Z"}
        db.store_alerts(_rows(done))
        manager.process_pending()
        (inc,) = db.list_incidents(None)
        assert inc["causes"] == firing_causes, a["labels"]["alertname"]
    assert inc["status"] == "resolved" and inc["firing_count"] == 0
    assert seen == [len(storm["alerts"])]  # resolutions rank nothing
    assert db.incidents_needing_ranking() == []  # and leave nothing due after a failover

    # new evidence does rank: the root fires again (a new episode of the same alert)
    again = {**storm["alerts"][0], "startsAt": "2026-12-01T09:40:00Z"}
    db.store_alerts(_rows(again))
    manager.process_pending()
    assert len(seen) == 2
    (inc,) = db.list_incidents("open")
    assert inc["causes"][0]["node"] == storm["expected_root"]


def test_a_resolution_does_not_clear_a_ranking_still_due(
    manager: IncidentManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ranking deferred by the worker stays due when a resolution of the same incident comes
    before it (``needs_ranking`` is kept, not overwritten)."""
    gpu = alert(
        {"alertname": "GpuXid", "cluster": "c0", "node": "c0-h1", "gpu": "3"}, fingerprint="g"
    )
    host = alert({"alertname": "HostDown", "cluster": "c0", "node": "c0-h1"}, fingerprint="h")
    db = manager.db
    db.store_alerts(_rows(gpu))
    manager.process_pending()
    seen = _ranked(manager, monkeypatch)
    db.store_alerts(_rows(host))
    manager.process_pending(defer=True)  # ranked moments ago: this ranking is deferred
    assert seen == [] and len(db.incidents_needing_ranking()) == 1
    db.store_alerts(_rows({**gpu, "status": "resolved", "endsAt": "2026-01-01T00:30:00Z"}))
    manager.process_pending(defer=True)
    assert len(db.incidents_needing_ranking()) == 1  # still due
    manager.rank_due(older_than_s=-60.0)  # due within the next minute (rank_interval_s: 2 s)
    assert seen == [2]


def test_alerts_that_match_no_node_get_no_causes(
    manager: IncidentManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    # kube-prometheus' TargetDown for a job the graph does not know (kube-prometheus
    # manifests/kubePrometheus-prometheusRule.yaml: by (job, namespace, service), severity warning);
    # heartbeats such as Watchdog are never grouped at all (FLEETMIND_UNGROUPED_ALERTS)
    watchdog = alert(
        {"alertname": "TargetDown", "severity": "warning", "job": "billing-exporter",
         "namespace": "billing", "service": "billing-exporter", "prometheus": "monitoring/k8s"},
        fingerprint="wd01",
    )  # fmt: skip
    db = manager.db
    db.store_alerts(_rows(watchdog))
    seen = _ranked(manager, monkeypatch)
    manager.process_pending()
    (inc,) = db.list_incidents("open")
    assert inc["alert_count"] == 1 and inc["nodes"] == [] and inc["causes"] == []
    assert seen == []  # the model is not asked
    assert db.incidents_needing_ranking() == []
