"""Two unrelated faults in one incident: every sent cause stays paged while its own alerts fire.

The example XID storm (``examples/storm-gpu-xid.json``: GPU c0-h1/1) fires, and three minutes
later the host-down storm (``examples/storm-host-down.json``: host c0-h2 NotReady) joins its
incident. The served model ranks a single root, so it splits its score (host 0.59, GPU 0.41). The
notifier used to resolve the GPU's critical FleetMindRootCause ("root cause changed") while the
GPU's alerts still fired, send the host alone, and, once the host recovered, keep re-sending the
healthy host as the cause: resolutions did not re-rank. Now the GPU's alert fires on beside the
host's (``notify.KEPT``), the host's is resolved once its own alerts are ("its alerts
resolved"), and the incident is ranked again on what still fires, naming the GPU.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from serving_helpers import NOTIFY_AM, NOTIFY_HOOK, NotifyPosts, notify_settings, webhook

from fleetmind.serving.app import create_app
from fleetmind.serving.incidents.manager import live_ranking
from fleetmind.serving.notify import Notifier

ROOT = Path(__file__).resolve().parents[1]
GPU, HOST = "c0/gpu/c0-h1/1", "c0/host/c0-h2"
ALERTS = NOTIFY_AM + "/api/v2/alerts"


def _storm(name: str, shift_s: float = 0.0) -> list[dict[str, Any]]:
    """The alerts of example storm ``name``, their starts moved ``shift_s`` seconds later."""
    out = []
    for a in json.loads((ROOT / "examples" / f"{name}.json").read_text())["alerts"]:
        t = datetime.fromisoformat(a["startsAt"].replace("Z", "+00:00")) + timedelta(
            seconds=shift_s
        )
        out.append({**a, "startsAt": t.isoformat().replace("+00:00", "Z")})
    return out


def _resolved(alerts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**a, "status": "resolved", "endsAt": "2026-12-01T09:30:00Z"} for a in alerts]


class _Clock:
    def __init__(self) -> None:
        self.t = 1_800_000_000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    # the served default model (the released GAT): the one that splits the two faults' score
    with TestClient(create_app(notify_settings(tmp_path, rca_model=None))) as c:
        yield c


class _Run:
    """Deliver alerts, group and rank them, and let the notifier settle and send."""

    def __init__(self, c: TestClient) -> None:
        self.c, self.posts, self.clock = c, NotifyPosts(), _Clock()
        svc = c.app.state.services
        self.n = Notifier(
            svc.db, svc.settings, clock=self.clock, transport=httpx.MockTransport(self.posts)
        )

    def deliver(self, alerts: list[dict[str, Any]]) -> None:
        self.posts.calls.clear()
        assert self.c.post("/api/v1/alerts", json=webhook(alerts)).status_code == 200
        self.c.app.state.services.incidents.process_pending()
        self.n.poll()
        self.clock.t += self.c.app.state.services.settings.notify_settle_s + 1
        self.n.poll()

    def alerts(self) -> list[tuple[str, str, str | None]]:
        """(cause node, severity, resolved_because or None while firing) of each alert posted."""
        return [
            (
                a["labels"]["cause_node"],
                a["labels"]["severity"],
                a["annotations"].get("resolved_because") if a.get("endsAt") else None,
            )
            for body in self.posts.to(ALERTS)
            for a in body
        ]

    def chat(self) -> list[str]:
        return [m["text"] for m in self.posts.to(NOTIFY_HOOK)]

    def top(self) -> str:
        (inc,) = self.c.get("/api/v1/incidents").json()
        return inc["causes"][0]["node"]


def test_a_second_fault_leaves_the_first_paged_and_it_is_named_again(client: TestClient) -> None:
    run = _Run(client)
    run.deliver(_storm("storm-gpu-xid"))
    assert run.alerts() == [(GPU, "critical", None)]

    run.deliver(_storm("storm-host-down", 180))
    assert run.top() == HOST  # the single-root ranking now puts the host first
    sent = run.alerts()
    assert (GPU, "critical", None) in sent  # not withdrawn, its severity as it was
    assert all(s[2] is None for s in sent) and {s[0] for s in sent} == {GPU, HOST}
    (chat,) = run.chat()
    assert "A further root cause" in chat and "withdrawn" not in chat and GPU in chat

    run.deliver(_resolved(_storm("storm-host-down", 180)))  # the host recovers, the GPU not
    assert run.top() == GPU  # ranked again on what still fires
    sent = run.alerts()
    assert (HOST, sent[0][1], "its alerts resolved") == sent[0]
    assert (GPU, "critical", None) in sent[1:]
    (chat,) = run.chat()  # the GPU's own message went out when it was first sent
    assert "cleared: its alerts resolved" in chat and HOST in chat and "withdrawn" not in chat

    run.posts.calls.clear()
    run.clock.t += client.app.state.services.settings.notify_resend_s + 1
    run.n.poll()
    assert run.alerts() == [(GPU, "critical", None)]  # the healthy host is not re-sent


def test_the_incident_closing_resolves_every_cause_it_sent(client: TestClient) -> None:
    run = _Run(client)
    run.deliver(_storm("storm-gpu-xid"))
    run.deliver(_storm("storm-host-down", 180))
    run.deliver(_resolved(_storm("storm-gpu-xid") + _storm("storm-host-down", 180)))
    assert sorted(run.alerts()) == sorted(
        [(GPU, "critical", "incident closed"), (HOST, "warning", "incident closed")]
    )
    run.posts.calls.clear()
    run.clock.t += client.app.state.services.settings.notify_resend_s + 1
    run.n.poll()
    assert run.alerts() == []


def test_a_cause_with_no_alert_of_its_own_is_withdrawn(client: TestClient) -> None:
    """A top cause the model inferred (no alert maps to its node) is withdrawn when the ranking
    names another: nothing of its own still fires."""
    run = _Run(client)
    run.deliver(_storm("storm-gpu-xid"))
    db = client.app.state.services.db
    (inc,) = client.get("/api/v1/incidents").json()
    real = inc["causes"]
    inferred = [{**real[0], "node": "global/config", "kind": "config"}, *real[1:]]
    db.set_incident_rca(inc["id"], inferred, inc["method"], inc["model_version"])
    run.deliver([])
    db.set_incident_rca(inc["id"], real, inc["method"], inc["model_version"])
    run.deliver([])
    sent = run.alerts()
    assert (sent[0][0], sent[0][2]) == ("global/config", "root cause changed")
    assert (GPU, "critical", None) in sent[1:]  # kept beside it all along, firing on
    assert "withdrawn" in run.chat()[0]


@pytest.mark.parametrize(
    ("causes", "firing", "expected"),
    [
        ([(HOST, 0.587), (GPU, 0.41)], {GPU}, True),  # the host recovered, the GPU fires
        ([(HOST, 0.587), (GPU, 0.41)], {HOST, GPU}, False),  # the top still fires
        ([(GPU, 0.999), ("c0/host/c0-h1", 0.001), ("c0/pod/s2-1", 0.0)], {"c0/pod/s2-1"}, False),
        ([(HOST, 0.587), (GPU, 0.41)], set(), False),  # nothing fires: the incident closes
    ],
)
def test_which_resolutions_rank_again(
    causes: list[tuple[str, float]], firing: set[str], expected: bool
) -> None:
    """The XID storm recovering root first (third case: only what it broke still fires, ranked
    near 0) is not ranked again (``test_incident_evidence``); a second fault outliving the first
    is."""
    ranked = [{"node": n, "score": s} for n, s in causes]
    assert live_ranking(ranked, firing) is expected
