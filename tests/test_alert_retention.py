"""Auto-resolve and retention of alerts that open no incident (SQLite and PostgreSQL).

Alertmanager with ``send_resolved: false`` (or a resolved notification that never arrives) tells
the webhook only that an alert fires; Alertmanager re-sends a still-firing alert every
``repeat_interval`` (prometheus/alertmanager ``notify/notify.go``, ``DedupStage.needsUpdate``: a
firing set unchanged is notified again once ``repeat_interval`` has passed), so an alert not
delivered for longer has stopped firing. Alerts that open no incident (kube-prometheus' Watchdog
and InfoInhibitor, ``severity="none"``: ``FLEETMIND_UNGROUPED_ALERTS``) were never auto-resolved
and so never deleted by retention either.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from serving_helpers import alert

from fleetmind.serving.db import Database, metadata
from fleetmind.serving.defaults.example import build_example_graph
from fleetmind.serving.graphstore import GraphStore
from fleetmind.serving.incidents import IncidentManager
from fleetmind.serving.registry import ModelRegistry
from fleetmind.serving.routers.alerts import alert_row
from fleetmind.serving.schemas import AlertIn

DAY_S = 86400.0
"""``FLEETMIND_INCIDENT_AUTO_RESOLVE_S``'s default, seconds."""


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    """An empty database of each kind (PostgreSQL: the suite's throwaway ``pg`` cluster)."""
    if request.param == "sqlite":
        d = Database(f"sqlite:///{tmp_path}/r.db")
    else:
        from sqlalchemy import text

        d = Database(request.getfixturevalue("pg").url)
        metadata.drop_all(d.engine)
        with d.engine.begin() as conn:
            conn.execute(text("DROP TABLE IF EXISTS alembic_version"))
    d.create_all()
    yield d
    d.dispose()


def _manager(db: Database, auto_resolve_s: float = DAY_S) -> IncidentManager:
    """An incident manager on ``db`` whose auto-resolve and retention periods are a day."""
    reg = ModelRegistry("baseline:upstream-coverage", "heuristic:builtin-bestfit")
    reg.load()
    graphs = GraphStore(build_example_graph(), "t")
    return IncidentManager(db, graphs, reg, auto_resolve_s=auto_resolve_s, retention_s=DAY_S)


def _store(db: Database, received_ts: float, *alerts: dict) -> None:
    """Store ``alerts`` as one webhook received at ``received_ts`` (unix s)."""
    db.store_alerts([alert_row(AlertIn.model_validate(a), received_ts) for a in alerts])


def test_ungrouped_alerts_never_resolved_are_resolved_then_purged(db: Database) -> None:
    """Four InfoInhibitor episodes (one fingerprint, four ``startsAt``) sent without a resolved
    notification were four rows firing forever; now they resolve once not delivered for
    ``auto_resolve_s`` and retention deletes them. A Watchdog re-sent every ``repeat_interval``
    keeps firing, and so does an incident's alert that is still re-sent."""
    m = _manager(db)
    t0 = time.time()
    info = {"alertname": "InfoInhibitor", "severity": "none", "namespace": "gpu-operator"}
    episodes = [
        alert(info, starts=f"2026-01-0{d}T00:00:00Z", fingerprint="info-1") for d in (1, 2, 3, 4)
    ]
    watchdog = alert({"alertname": "Watchdog", "severity": "none"}, fingerprint="wd")
    gpu = alert(
        {"alertname": "GpuXid", "cluster": "c0", "node": "c0-h1", "gpu": "3"}, fingerprint="g"
    )
    _store(db, t0, *episodes, watchdog, gpu)
    m.process_pending()
    assert len(db.list_incidents("open")) == 1  # only the GPU alert opens one
    # repeat_interval 4 h: the Watchdog and the GPU alert are re-sent, the inhibitor is gone
    for k in range(1, 8):
        _store(db, t0 + k * 4 * 3600, watchdog, gpu)
    m.housekeeping(now=t0 + 1.5 * DAY_S, force=True)
    firing = sorted(a["fingerprint"] for a in db.list_alerts() if a["status"] == "firing")
    assert firing == ["g", "wd"]
    resolved = [a for a in db.list_alerts() if a["status"] == "resolved"]
    assert sorted(a["starts_at"][:10] for a in resolved) == [e["startsAt"][:10] for e in episodes]
    # ended when last delivered; resolved (retention counts from it) at the auto-resolution
    assert all(a["ends_ts"] == pytest.approx(t0, abs=1e-3) for a in resolved)
    assert all(a["updated_ts"] == pytest.approx(t0 + 1.5 * DAY_S) for a in resolved)
    assert len(db.list_incidents("open")) == 1
    # retention (1 day after the resolution) deletes the four rows, and only them
    m.housekeeping(now=t0 + 2.6 * DAY_S, force=True)
    assert sorted(a["fingerprint"] for a in db.list_alerts()) == ["g", "wd"]


def test_auto_resolve_leaves_ungrouped_alerts_alone_when_disabled_or_pending(
    db: Database,
) -> None:
    """``FLEETMIND_INCIDENT_AUTO_RESOLVE_S=0`` resolves nothing; an alert the worker has not
    looked at yet (pending) is the worker's, whatever its age."""
    t0 = time.time()
    info = alert({"alertname": "InfoInhibitor", "severity": "none"}, fingerprint="i")
    _store(db, t0, info)  # pending: no worker ran
    db.auto_resolve(quiet_before=t0 + DAY_S, now=t0 + 2 * DAY_S)
    (row,) = db.list_alerts()
    assert row["status"] == "firing" and row["pending"]
    m = _manager(db, auto_resolve_s=0.0)
    m.process_pending()
    m.housekeeping(now=t0 + 10 * DAY_S, force=True)
    (row,) = db.list_alerts()
    assert row["status"] == "firing" and not row["pending"]


def test_a_refired_alert_of_an_old_closed_incident_survives_a_purge_before_grouping(
    db: Database,
) -> None:
    """Alertmanager delivers an alert of an incident closed longer than the retention period as
    firing again with its old ``startsAt`` (Prometheus keeps an alert's ``activeAt`` across a
    rule re-evaluation; Alertmanager then sends the same alert, prometheus/alertmanager
    ``types.Alert``, identified by its labels' fingerprint). The webhook stores it pending with
    the closed incident's id; if housekeeping runs before the worker groups it (the worker was
    busy ranking a storm), retention used to delete it with the old incident: the firing alert was
    gone until the next ``repeat_interval`` (4 h by default). It must wait for the worker, which
    reopens the incident.
    """
    m = _manager(db)
    t0 = time.time()
    starts = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0 - 60))
    labels = {"alertname": "GpuXid", "cluster": "c0", "node": "c0-h1", "gpu": "3"}
    fire = alert(labels, starts=starts, fingerprint="g")
    ends = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0))
    _store(db, t0, fire)
    m.process_pending()
    _store(db, t0 + 10, dict(fire, status="resolved", endsAt=ends))
    m.process_pending()
    (closed,) = db.list_incidents(None)
    assert closed["status"] == "resolved"

    now = t0 + 2 * DAY_S
    _store(db, now, fire)
    m.housekeeping(now=now + 1, force=True)
    assert [(a["status"], a["pending"]) for a in db.list_alerts()] == [("firing", True)]

    m.process_pending()
    (alert_row_after,) = db.list_alerts()
    assert alert_row_after["status"] == "firing" and not alert_row_after["pending"]
    (incident,) = db.list_incidents(None)
    assert incident["status"] == "open"
    assert incident["id"] == alert_row_after["incident_id"]


def test_a_refire_committed_while_the_purge_waits_on_its_row_survives(
    request: pytest.FixtureRequest,
) -> None:
    """PostgreSQL, read committed: a ``DELETE`` blocked on a row lock re-checks only its own
    ``WHERE`` on the row's new version once the lock is released (PostgreSQL documentation,
    "Read Committed Isolation Level": the search condition is re-evaluated on the updated row),
    not a subquery's. A webhook that re-fires an alert of an old closed incident while the purge
    waits on that row must keep it (pending, grouped later)."""
    import threading

    from sqlalchemy import text

    d = Database(request.getfixturevalue("pg").url)
    metadata.drop_all(d.engine)
    with d.engine.begin() as conn:
        conn.execute(text("DROP TABLE IF EXISTS alembic_version"))
    d.create_all()
    try:
        m = _manager(d)
        t0 = time.time() - 40 * DAY_S
        starts = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0 - 60))
        fire = alert({"alertname": "GpuXid", "node": "c0-h1"}, starts=starts, fingerprint="g")
        ends = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0))
        _store(d, t0, fire)
        m.process_pending()
        _store(d, t0 + 10, dict(fire, status="resolved", endsAt=ends))
        m.process_pending()
        with d.engine.begin() as conn:  # closed 40 days ago
            conn.execute(text("UPDATE incidents SET closed_ts = :t"), {"t": t0 + 10})

        hook = d.engine.connect()  # the webhook's re-fire, not yet committed
        tx = hook.begin()
        hook.execute(text("UPDATE alerts SET status = 'firing', pending = TRUE"))
        out: dict = {}
        purge = threading.Thread(target=lambda: out.update(r=d.purge(time.time() - 30 * DAY_S)))
        purge.start()
        waiting = False
        for _ in range(200):  # until the purge's DELETE waits on the row lock
            with d.engine.connect() as conn:
                waiting = bool(
                    conn.execute(
                        text(
                            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = "
                            "'Lock' AND query LIKE 'DELETE FROM alerts%'"
                        )
                    ).scalar()
                )
            if waiting:
                break
            time.sleep(0.05)
        assert waiting, "the purge never waited on the re-fired row"
        tx.commit()
        hook.close()
        purge.join(30)
        assert out["r"] == (0, 0)
        assert [(a["status"], a["pending"]) for a in d.list_alerts()] == [("firing", True)]
        m.process_pending()
        (incident,) = d.list_incidents(None)
        assert incident["status"] == "open"
    finally:
        d.dispose()
