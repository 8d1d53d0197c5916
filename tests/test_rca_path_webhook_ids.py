"""The webhook's ``fleetmind.path`` is the ranker's path as a list, whatever the node ids hold.

The graph schema lets a node id contain `` -> `` (the separator of the Alertmanager ``path``
annotation, which is text for people: docs/operators.md, "The alert"); the webhook's JSON list must
still be the ranker's ids, first the cause. A row stored before the list was kept falls back to
splitting the annotation text.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from serving_helpers import NOTIFY_AM as AM
from serving_helpers import NOTIFY_HOOK as HOOK
from serving_helpers import NotifyPosts, mock_notifier, notify_settings
from sqlalchemy import select
from ui_helpers import ranked_storm

from fleetmind.serving.db import notifications
from fleetmind.serving.notify import EXACT_SCORE, PATH_IDS, Notifier

T0 = datetime.now(UTC) - timedelta(minutes=5)
ODD = "us-east/net/tor-0 -> spine-9"  # one node id, containing the annotation's separator


@pytest.fixture(autouse=True)
def _no_telemetry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")


@pytest.fixture
def app(tmp_path: Path) -> Iterator[TestClient]:
    with ranked_storm(notify_settings(tmp_path, notify_settle_s=0.0), T0) as c:
        yield c


def test_a_node_id_with_the_separator_stays_one_hop_in_the_webhook(app: TestClient) -> None:
    svc = app.app.state.services
    inc = next(i for i in app.get("/api/v1/incidents").json() if i["alert_count"] == 7)
    causes = [dict(x) for x in inc["causes"]]
    top = causes[0]
    path = [top["node"], ODD, "us-east/pod/p-0"]
    top.update(score=0.95, fault_type="nic_down", path=path)
    svc.db.set_incident_rca(inc["id"], causes, "gat", None)
    posts = NotifyPosts()
    n = mock_notifier(app, posts)
    n.poll()
    n.poll()
    [hook] = [h for h in posts.to(HOOK) if h["fleetmind"]["incident"] == inc["id"]]
    assert hook["fleetmind"]["path"] == path  # three hops, the cause first
    am = [a for body in posts.to(AM + "/api/v2/alerts") for a in body]
    [alert] = [a for a in am if a["labels"]["incident"] == str(inc["id"])]
    # the annotation stays text, and only the documented annotations go to Alertmanager
    assert alert["annotations"]["path"] == " -> ".join(path)
    assert set(alert["annotations"]) == {
        "summary", "description", "path", "score", "fault_type", "incident_url"
    }  # fmt: skip


def test_an_older_row_without_the_list_splits_the_annotation() -> None:
    row = {
        "state": "firing",
        "labels": {"incident": "3", "cause_node": "a", "cause_kind": "host", "cluster": "c"},
        "annotations": {"incident_url": "u", "path": "a -> b -> c", "score": "0.9000"},
        "starts_at": "2026-01-01T00:00:00Z",
        "ends_at": None,
    }
    assert Notifier.webhook_body(row)["fleetmind"]["path"] == ["a", "b", "c"]


def _stored_annotations(app: TestClient, path: list[str]) -> tuple[dict, list, dict]:
    """Rank ``path`` for the storm's incident, poll twice; the stored row's annotations, the
    webhook's ``fleetmind.path`` and the alert posted to Alertmanager."""
    svc = app.app.state.services
    inc = next(i for i in app.get("/api/v1/incidents").json() if i["alert_count"] == 7)
    causes = [dict(x) for x in inc["causes"]]
    causes[0].update(score=0.95, fault_type="nic_down", path=[causes[0]["node"], *path])
    svc.db.set_incident_rca(inc["id"], causes, "gat", None)
    posts = NotifyPosts()
    n = mock_notifier(app, posts)
    n.poll()
    n.poll()
    with svc.db.engine.connect() as conn:
        row = conn.execute(
            select(notifications.c.annotations).where(notifications.c.incident_id == inc["id"])
        ).one()
    [hook] = [h for h in posts.to(HOOK) if h["fleetmind"]["incident"] == inc["id"]]
    am = [a for body in posts.to(AM + "/api/v2/alerts") for a in body]
    [alert] = [a for a in am if a["labels"]["incident"] == str(inc["id"])]
    return row[0], hook["fleetmind"]["path"], alert


def test_a_plain_path_keeps_no_hidden_list(app: TestClient) -> None:
    """Ids without the separator: the text splits back exactly, so no ``fleetmind_path`` is
    stored, and a release that filters only ``fleetmind_exact_score`` (a rollback, an older
    replica during a rolling update) posts exactly what this one posts."""
    annotations, hook_path, alert = _stored_annotations(app, ["us-east/pod/p-0"])
    assert PATH_IDS not in annotations
    assert len(hook_path) == 2 and hook_path[1] == "us-east/pod/p-0"
    older = {k: v for k, v in annotations.items() if k != EXACT_SCORE}
    assert alert["annotations"] == older


def test_an_id_that_only_ends_like_the_separator_keeps_the_list(app: TestClient) -> None:
    """``"x ->"`` does not contain `` -> ``, yet the joined text splits wrongly: the list is kept
    (and still not posted to Alertmanager)."""
    path = ["us-east/net/tor-0 ->", "us-east/pod/p-0"]
    annotations, hook_path, alert = _stored_annotations(app, path)
    assert json.loads(annotations[PATH_IDS]) == hook_path and hook_path[1:] == path
    assert PATH_IDS not in alert["annotations"]
