"""``fleetmind replay`` prints an incident's ranking only once it has settled, and says when the
incident also holds alerts from before the replay.

The service re-ranks an incident at most every ``FLEETMIND_INCIDENT_RANK_INTERVAL_S`` during a
storm (:class:`fleetmind.serving.incidents.worker.RankSchedule`), so an incident that already had
causes when the replay's last alerts joined it shows its earlier ranking for up to that interval:
replay printed that one, labelled against the storm's root. Here the service is an
``httpx.MockTransport`` (httpx's documented way to fake a server, "Mock transports" in its advanced
usage docs) and the clock a fake, so the waits are exact and instant.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from fleetmind.cli import main
from fleetmind.cli import replay as replay_cli
from fleetmind.serving.settings import Settings
from tests.replay_helpers import FakeClock

REPO = Path(__file__).resolve().parents[1]
DNS = REPO / "examples" / "storm-dns.json"
URL = "http://fake"


def _iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


def _incident(top: str, alert_count: int = 8, first: datetime | None = None) -> dict[str, Any]:
    now = datetime.now(UTC)
    return {
        "id": 1,
        "status": "open",
        "first_alert_at": _iso(first or now),
        "last_alert_at": _iso(now),
        "alert_count": alert_count,
        "firing_count": alert_count,
        "nodes": ["global/dns", "c0/host/c0-h2"],
        "clusters": ["c0", "c1"],
        "causes": [{"node": top, "kind": "x", "cluster": None, "score": 0.9, "fault_type": "f"}],
        "method": "gat",
        "model_version": "v",
    }


def _run(
    monkeypatch: pytest.MonkeyPatch,
    incidents: Callable[[float], list[dict[str, Any]]],
    earlier: list[dict[str, Any]] | None = None,
    wait: str = "30",
) -> tuple[list[str], FakeClock]:
    """``fleetmind replay storm-dns.json`` against a fake service whose incident list at fake time
    ``t`` (seconds since the replay's first read) is ``incidents(t)``. With ``earlier``, incident
    1 lists those alerts and the ones the replay posted."""
    clock = FakeClock()
    posted: dict[tuple[str, str], dict[str, Any]] = {}
    monkeypatch.setattr(
        replay_cli, "time", SimpleNamespace(monotonic=clock.monotonic, sleep=clock.sleep)
    )

    def handler(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/api/v1/alerts":
            for a in json.loads(request.content)["alerts"]:
                posted[(a["fingerprint"], a["startsAt"])] = a  # stored once, as the service does
            return httpx.Response(200, json={"status": "ok"})
        if path == "/api/v1/rca":
            return httpx.Response(200, json={"mapped_alerts": 8, "graph": "fleetmind-example"})
        if path == "/api/v1/incidents":
            return httpx.Response(200, json=incidents(clock.now))
        if path == "/api/v1/incidents/1" and earlier is not None:
            return httpx.Response(200, json={"id": 1, "alerts": earlier + list(posted.values())})
        return httpx.Response(404, json={"detail": "not found"})

    def client(url: str) -> httpx.Client:
        return httpx.Client(base_url=url, transport=httpx.MockTransport(handler))

    monkeypatch.setattr(replay_cli, "_client", client)
    argv = ["replay", str(DNS), "--url", URL, "--speed", "1e9", "--wait", wait]
    return argv, clock


def test_a_stale_ranking_is_not_printed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The incident has causes from its earlier ranking (host c0-h2) at once; the worker re-ranks
    it 1.5 s later (global/dns). Replay printed the first read: the stale top cause."""
    argv, clock = _run(
        monkeypatch, lambda t: [_incident("c0/host/c0-h2" if t < 1.5 else "global/dns")]
    )
    assert main(argv) == 0
    out = capsys.readouterr().out
    shown = [ln for ln in out.splitlines() if ln.startswith("incident #")]
    assert shown == ["incident #1: 8 alerts; top cause global/dns f  (the storm's root)"], out
    # unchanged for the rank interval and the margin after the change, not longer
    settle = replay_cli.DEFAULT_RANK_INTERVAL_S + replay_cli.SETTLE_MARGIN_S
    assert 1.5 + settle <= clock.now < 1.5 + settle + 2 * replay_cli.POLL_S
    assert "not settled" not in out and "from before this replay" not in out


def test_rankings_that_keep_changing_time_out_with_a_message(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A ranking that never settles is shown after --wait, saying so."""
    tops = ["c0/host/c0-h2", "global/dns"]
    argv, clock = _run(monkeypatch, lambda t: [_incident(tops[int(t / 0.5) % 2])], wait="5")
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert 5.0 <= clock.now <= 5.0 + replay_cli.POLL_S
    assert "the rankings had not settled after --wait 5 s" in out, out
    assert "incident #1:" in out


def test_an_incident_with_earlier_alerts_says_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A replay whose alerts joined an incident of an earlier storm (within
    FLEETMIND_INCIDENT_WINDOW_S) printed the earlier storm's top cause as a miss of this one.
    Here the incident holds an alert from 5 minutes ago and the same storm replayed 5 s before:
    re-timed to end then, most of those start after this replay's first alert."""
    now = datetime.now(UTC)
    storm = json.loads(DNS.read_text())["alerts"]
    last = max(datetime.fromisoformat(a["startsAt"].replace("Z", "+00:00")) for a in storm)
    before = [
        {
            **a,
            "startsAt": _iso(
                datetime.fromisoformat(a["startsAt"].replace("Z", "+00:00"))
                + (now - timedelta(seconds=5) - last)
            ),
        }
        for a in storm
    ]
    foreign = {
        "fingerprint": "x",
        "labels": {"alertname": "X"},
        "startsAt": _iso(now - timedelta(minutes=5)),
    }
    first = now - timedelta(minutes=5)
    argv, _ = _run(
        monkeypatch, lambda t: [_incident("c0/host/c0-h2", 17, first)], [foreign, *before]
    )
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "(storm's root: global/dns)" in out
    assert (
        "it also holds 9 earlier alerts, not this replay's, so its top cause may be theirs" in out
    )


def test_the_default_rank_interval_is_the_services() -> None:
    default = Settings.model_fields["incident_rank_interval_s"].default
    assert replay_cli.DEFAULT_RANK_INTERVAL_S == default
