"""A label with an empty value is no label.

In Prometheus an empty label value is the same as an absent label (Prometheus docs, "Data
model": "Labels with an empty label value are considered equivalent to labels that do not
exist"), and Alertmanager removes such labels from the alerts it receives (``removeEmptyLabels``
in prometheus/alertmanager ``api/v2/api.go``). Other senders (Grafana templates, scripts, a rule
whose ``cluster`` label is templated from a missing value) still deliver ``cluster=""``, which was
taken as a cluster named "": the alert did not map where the same alert without the label maps,
and unmapped alerts of every source with ``cluster=""`` were grouped into one incident.

Stored labels stay as received; mapping and grouping ignore them. The computed fingerprint (for
senders that send none) hashes them as received, as earlier releases did, so that it keys the
same stored alert across an upgrade.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from fastapi.testclient import TestClient

from fleetmind.data.graph import DependencyGraph
from fleetmind.rca.features.mapping import node_index_for_alert
from fleetmind.serving.app import create_app
from fleetmind.serving.routers.alerts import fingerprint_of
from fleetmind.serving.settings import Settings


def _one_cluster() -> DependencyGraph:
    return DependencyGraph.from_json(
        {
            "name": "one",
            "nodes": [
                {"id": "c0", "kind": "cluster", "cluster": "c0", "match": {"cluster": "c0"}},
                {
                    "id": "c0/host/h1",
                    "kind": "host",
                    "cluster": "c0",
                    "match": {"cluster": "c0", "node": "h1"},
                },
            ],
            "edges": [{"src": "c0/host/h1", "dst": "c0", "kind": "member_of"}],
        }
    )


def test_an_empty_cluster_maps_as_a_missing_one() -> None:
    g = _one_cluster()
    for labels in (
        {"alertname": "HostDown", "node": "h1", "cluster": ""},
        {"alertname": "HostDown", "instance": "h1:9100", "cluster": "", "pod": ""},
    ):
        without = {k: v for k, v in labels.items() if v != ""}
        assert g.node_for_alert(labels) == g.node_for_alert(without) == "c0/host/h1"
        assert g.nodes[node_index_for_alert(g, labels)].id == "c0/host/h1"  # the fast path too
    assert g.alert_subject({"alertname": "X", "cluster": ""})["cluster"] == "c0"


def _settings(tmp_path: Path) -> Settings:
    return Settings(
        database_url=f"sqlite:///{tmp_path}/e.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
    )


def test_unmapped_alerts_with_an_empty_cluster_are_not_grouped_together(tmp_path: Path) -> None:
    s = _settings(tmp_path)
    alerts = [
        {
            "labels": {"alertname": "TargetDown", "job": f"unknown-{i}", "cluster": ""},
            "startsAt": "2026-01-01T00:00:00Z",
            "fingerprint": f"td{i}",
        }
        for i in range(2)
    ]
    with TestClient(create_app(s)) as c:
        assert c.post("/api/v1/alerts", json={"alerts": alerts}).json()["accepted"] == 2
        c.app.state.services.incidents.process_pending()
        incidents = c.get("/api/v1/incidents").json()
        stored = c.get("/api/v1/alerts").json()
    # as without a cluster label: nothing ties them, one incident each
    assert sorted(i["alert_count"] for i in incidents) == [1, 1]
    assert all(a["labels"]["cluster"] == "" for a in stored)  # stored as received


def _fingerprint_as_stored_before(labels: dict[str, str]) -> str:
    """The computed fingerprint of earlier releases: every label, empty values included."""
    h = hashlib.sha256()
    for k in sorted(labels):
        h.update(k.encode() + b"\xff" + labels[k].encode() + b"\xfe")
    return h.hexdigest()[:16]


def test_the_computed_fingerprint_keeps_empty_labels_as_stored_before() -> None:
    """The computed fingerprint is the stored alert's key: an alert stored by an earlier release
    (a sender without ``fingerprint``, an empty label) must still be found by its resolve.
    Alertmanager's own fingerprint already leaves empty labels out (``removeEmptyLabels``)."""
    for labels in (
        {"alertname": "HostDown", "node": "h1", "cluster": "c0", "pod": ""},
        {"alertname": "X", "cluster": ""},
        {"alertname": "X"},
    ):
        assert fingerprint_of(labels) == _fingerprint_as_stored_before(labels)


def test_a_resolve_without_fingerprint_finds_the_alert_stored_before(tmp_path: Path) -> None:
    labels = {"alertname": "HostDown", "node": "h1", "cluster": "c0", "pod": ""}
    alert = {"labels": labels, "startsAt": "2026-01-01T00:00:00Z", "status": "firing"}
    stored = {**alert, "fingerprint": _fingerprint_as_stored_before(labels)}
    resolve = {**alert, "status": "resolved", "endsAt": "2026-01-01T00:05:00Z"}
    with TestClient(create_app(_settings(tmp_path))) as c:
        assert c.post("/api/v1/alerts", json={"alerts": [stored]}).status_code == 200
        assert c.post("/api/v1/alerts", json={"alerts": [resolve]}).status_code == 200
        rows = c.get("/api/v1/alerts").json()
    assert [r["status"] for r in rows] == ["resolved"]
