"""``fleetmind replay`` prints only the incidents that hold some of its own alerts.

Replay chose the incidents it touched by time alone (the last alert started after the replay's
first re-timed one). A second replay into a service that had just grouped another storm (another
cluster, so another incident) then also printed that storm's incident, with the note that it
"also holds 6 earlier alerts, not this replay's", although it held none of this replay's. The
service here is an ``httpx.MockTransport`` (httpx's documented way to fake a server, "Mock
transports" in its advanced usage docs) and the clock a fake, so the waits are exact and instant.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from fleetmind.cli import main
from fleetmind.cli import replay as replay_cli
from tests.replay_helpers import FakeClock

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

REPO = Path(__file__).resolve().parents[1]
DNS = REPO / "examples" / "storm-dns.json"
URL = "http://fake"


def _iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


def _other_storm(now: datetime) -> list[dict[str, Any]]:
    """Six alerts of another storm (cluster c1) replayed just before: they started within the
    last 30 s, after this replay's first re-timed alert."""
    return [
        {
            "fingerprint": f"e1e1e1e1e1e1e1{i:02x}",
            "status": "firing",
            "labels": {"alertname": "GPUXidError", "cluster": "c1", "node": "c1-h0", "gpu": str(i)},
            "annotations": {},
            "startsAt": _iso(now - timedelta(seconds=30 - i)),
        }
        for i in range(6)
    ]


def _incident(
    inc_id: int, top: str, count: int, last: datetime, clusters: list[str]
) -> dict[str, Any]:
    return {
        "id": inc_id,
        "status": "open",
        "first_alert_at": _iso(last - timedelta(seconds=30)),
        "last_alert_at": _iso(last),
        "alert_count": count,
        "firing_count": count,
        "nodes": [top],
        "clusters": clusters,
        "causes": [{"node": top, "kind": "x", "cluster": None, "score": 0.9, "fault_type": "f"}],
        "method": "gat",
        "model_version": "v",
    }


def _run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], with_ours: bool
) -> str:
    """``fleetmind replay storm-dns.json`` against a fake service that holds incident 2, six
    alerts of another storm just replayed (the newest), and with ``with_ours`` incident 1, the
    alerts this replay posted; returns what replay printed."""
    clock = FakeClock()
    monkeypatch.setattr(
        replay_cli, "time", SimpleNamespace(monotonic=clock.monotonic, sleep=clock.sleep)
    )
    now = datetime.now(UTC)
    other = _other_storm(now)
    posted: dict[tuple[str, str], dict[str, Any]] = {}

    def listed() -> list[dict[str, Any]]:
        items = [_incident(2, "c1/host/c1-h0", len(other), now + timedelta(minutes=1), ["c1"])]
        if with_ours:
            items.append(_incident(1, "global/dns", len(posted), now, ["c0", "c1"]))
        return items

    def handler(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/api/v1/alerts":
            for a in json.loads(request.content)["alerts"]:
                posted[(a["fingerprint"], a["startsAt"])] = a  # stored once, as the service does
            return httpx.Response(200, json={"status": "ok"})
        if path == "/api/v1/rca":
            return httpx.Response(200, json={"mapped_alerts": 8, "graph": "fleetmind-example"})
        if path == "/api/v1/incidents":
            return httpx.Response(200, json=listed())
        if path == "/api/v1/incidents/1" and with_ours:
            return httpx.Response(200, json={"id": 1, "alerts": list(posted.values())})
        if path == "/api/v1/incidents/2":
            return httpx.Response(200, json={"id": 2, "alerts": other})
        return httpx.Response(404, json={"detail": "not found"})

    def client(url: str) -> httpx.Client:
        return httpx.Client(base_url=url, transport=httpx.MockTransport(handler))

    monkeypatch.setattr(replay_cli, "_client", client)
    argv = ["replay", str(DNS), "--url", URL, "--speed", "1e9", "--wait", "30"]
    assert main(argv) == 0
    return capsys.readouterr().out


def test_another_storms_incident_is_not_shown(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _run(monkeypatch, capsys, with_ours=True)
    shown = [ln for ln in out.splitlines() if ln.startswith("incident #")]
    assert shown == ["incident #1: 8 alerts; top cause global/dns f  (the storm's root)"], out
    assert "earlier alert" not in out, out
    assert f"{URL}/ui/incidents/1" in out and "/ui/incidents/2" not in out


def test_only_another_storms_incident_is_no_incident_of_this_storm(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _run(monkeypatch, capsys, with_ours=False)
    assert "incident #" not in out and "earlier alert" not in out, out
    assert f"no incident of this storm yet; see {URL}/ui/" in out


def _storm_alerts() -> list[dict[str, Any]]:
    return json.loads(DNS.read_text())["alerts"]


def _shifted(alerts: list[dict[str, Any]], end: datetime) -> list[dict[str, Any]]:
    """The storm re-timed to end at ``end``, as a replay started then posts it."""
    times = [datetime.fromisoformat(a["startsAt"].replace("Z", "+00:00")) for a in alerts]
    shift = end - max(times)
    return [{**a, "startsAt": _iso(t + shift)} for a, t in zip(alerts, times, strict=True)]


def test_the_same_storm_replayed_back_to_back_joins_the_earlier_incident(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The service folds a firing delivery that starts less than HA_START_SKEW_S (90 s) after a
    still-firing alert of its fingerprint into that alert, keeping its earlier startsAt
    (serving/db.py). So the second of two replays of one storm, 60 s apart, lists only the first
    one's alerts under incident 1: replay said "no incident of this storm yet", where
    docs/operators.md says back-to-back replays join one incident, noted as holding earlier
    alerts."""
    from fleetmind.serving.db import HA_START_SKEW_S

    clock = FakeClock()
    monkeypatch.setattr(
        replay_cli, "time", SimpleNamespace(monotonic=clock.monotonic, sleep=clock.sleep)
    )
    now = datetime.now(UTC)
    gap = timedelta(seconds=60)
    assert gap.total_seconds() < HA_START_SKEW_S
    stored = {a["fingerprint"]: a for a in _shifted(_storm_alerts(), now - gap)}  # 1st replay
    folded = [0]

    def handler(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/api/v1/alerts":
            for a in json.loads(request.content)["alerts"]:
                old = stored.get(a["fingerprint"])
                t = datetime.fromisoformat(a["startsAt"].replace("Z", "+00:00"))
                t_old = datetime.fromisoformat(old["startsAt"].replace("Z", "+00:00"))
                assert timedelta(0) < t - t_old < timedelta(seconds=HA_START_SKEW_S)
                folded[0] += 1  # onto the earlier row, its startsAt kept
            return httpx.Response(200, json={"status": "ok"})
        if path == "/api/v1/rca":
            return httpx.Response(200, json={"mapped_alerts": 8, "graph": "fleetmind-example"})
        if path == "/api/v1/incidents":
            return httpx.Response(200, json=[_incident(1, "global/dns", 8, now, ["c0", "c1"])])
        if path == "/api/v1/incidents/1":
            return httpx.Response(200, json={"id": 1, "alerts": list(stored.values())})
        return httpx.Response(404, json={"detail": "not found"})

    monkeypatch.setattr(
        replay_cli,
        "_client",
        lambda url: httpx.Client(base_url=url, transport=httpx.MockTransport(handler)),
    )
    argv = ["replay", str(DNS), "--url", URL, "--speed", "1e9", "--wait", "30"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert folded == [8]
    assert "no incident of this storm" not in out, out
    shown = [ln for ln in out.splitlines() if ln.startswith("incident #")]
    assert shown == ["incident #1: 8 alerts; top cause global/dns f  (the storm's root)"], out
    assert "it also holds 8 earlier alerts, not this replay's" in out, out
    assert f"{URL}/ui/incidents/1" in out


def _replay_after_an_earlier_replay(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], gap_s: float
) -> tuple[str, int]:
    """``fleetmind replay storm-dns.json`` ``gap_s`` seconds after an earlier replay of the same
    storm, into a fake service that groups alerts only within 1 s (as with
    ``FLEETMIND_INCIDENT_WINDOW_S=1``): the earlier replay's alerts are incident 1. Like
    serving/db.py, a delivery that starts less than ``HA_START_SKEW_S`` after a stored alert of its
    fingerprint is folded onto it (incident 1 then lists only the earlier alerts); a later one is
    a new alert, here in incident 2. Returns what replay printed and how many it folded."""
    from fleetmind.serving.db import HA_START_SKEW_S

    clock = FakeClock()
    monkeypatch.setattr(
        replay_cli, "time", SimpleNamespace(monotonic=clock.monotonic, sleep=clock.sleep)
    )
    now = datetime.now(UTC)
    earlier = {
        a["fingerprint"]: a for a in _shifted(_storm_alerts(), now - timedelta(seconds=gap_s))
    }
    new: dict[str, dict[str, Any]] = {}
    folded = [0]

    def at(a: dict[str, Any]) -> datetime:
        return datetime.fromisoformat(a["startsAt"].replace("Z", "+00:00"))

    def handler(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/api/v1/alerts":
            for a in json.loads(request.content)["alerts"]:
                if at(a) - at(earlier[a["fingerprint"]]) < timedelta(seconds=HA_START_SKEW_S):
                    folded[0] += 1  # onto the earlier row, its startsAt kept
                else:
                    new[a["fingerprint"]] = a
            return httpx.Response(200, json={"status": "ok"})
        if path == "/api/v1/rca":
            return httpx.Response(200, json={"mapped_alerts": 8, "graph": "fleetmind-example"})
        if path == "/api/v1/incidents":
            last_earlier = max(at(a) for a in earlier.values())
            items = [_incident(1, "global/dns", 8, last_earlier, ["c0", "c1"])]
            if new:
                items.append(_incident(2, "global/dns", len(new), now, ["c0", "c1"]))
            return httpx.Response(200, json=items)
        if path == "/api/v1/incidents/1":
            return httpx.Response(200, json={"id": 1, "alerts": list(earlier.values())})
        if path == "/api/v1/incidents/2" and new:
            return httpx.Response(200, json={"id": 2, "alerts": list(new.values())})
        return httpx.Response(404, json={"detail": "not found"})

    monkeypatch.setattr(
        replay_cli,
        "_client",
        lambda url: httpx.Client(base_url=url, transport=httpx.MockTransport(handler)),
    )
    argv = ["replay", str(DNS), "--url", URL, "--speed", "1e9", "--wait", "30"]
    assert main(argv) == 0
    return capsys.readouterr().out, folded[0]


def test_an_earlier_replays_incident_of_the_same_storm_is_not_shown(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Replay counted an incident as possibly holding its alerts when it listed any alert of the
    storm, whatever its start. Two replays of one storm 92 s apart (more than HA_START_SKEW_S,
    90 s: nothing folds) that the service did not group into one incident: the second also
    showed the first one's incident, noted as holding 8 earlier alerts, although none of its own
    could be there (each such incident takes one of the 3 shown)."""
    out, folded = _replay_after_an_earlier_replay(monkeypatch, capsys, gap_s=92.0)
    assert folded == 0
    shown = [ln for ln in out.splitlines() if ln.startswith("incident #")]
    assert shown == ["incident #2: 8 alerts; top cause global/dns f  (the storm's root)"], out
    assert "earlier alert" not in out, out
    assert f"{URL}/ui/incidents/2" in out and "/ui/incidents/1" not in out


def test_a_back_to_back_replay_folded_onto_the_earlier_one_is_still_shown(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Less than HA_START_SKEW_S apart, every alert folds onto the earlier replay's, so incident 1
    lists none under this replay's start: still shown, with the earlier-alerts note."""
    out, folded = _replay_after_an_earlier_replay(monkeypatch, capsys, gap_s=60.0)
    assert folded == 8
    shown = [ln for ln in out.splitlines() if ln.startswith("incident #")]
    assert shown == ["incident #1: 8 alerts; top cause global/dns f  (the storm's root)"], out
    assert "it also holds 8 earlier alerts, not this replay's" in out, out


def _foreign_service(
    monkeypatch: pytest.MonkeyPatch, read_s: float
) -> tuple[list[float], FakeClock]:
    """A fake service listing 100 incidents of other storms, all touched by the replay's time
    span (newest first: 100 down to 1); a read of one's alerts takes ``read_s`` fake seconds.
    Returns the timeouts of those reads and the clock."""
    clock = FakeClock()
    monkeypatch.setattr(
        replay_cli, "time", SimpleNamespace(monotonic=clock.monotonic, sleep=clock.sleep)
    )
    now = datetime.now(UTC)
    other = _other_storm(now)
    incidents = [
        _incident(i, "c1/host/c1-h0", 6, now + timedelta(seconds=i), ["c1"]) for i in range(1, 101)
    ]
    timeouts: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/api/v1/alerts":
            return httpx.Response(200, json={"status": "ok"})
        if path == "/api/v1/rca":
            return httpx.Response(200, json={"mapped_alerts": 8, "graph": "fleetmind-example"})
        if path == "/api/v1/incidents":
            return httpx.Response(200, json=incidents)
        timeouts.append(request.extensions["timeout"]["read"])
        clock.now += read_s
        return httpx.Response(200, json={"id": int(path.rsplit("/", 1)[1]), "alerts": other})

    monkeypatch.setattr(
        replay_cli,
        "_client",
        lambda url: httpx.Client(base_url=url, transport=httpx.MockTransport(handler)),
    )
    return timeouts, clock


def test_the_alerts_of_at_most_a_few_incidents_are_read(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """With 100 incidents of other storms touched by its time span, replay read the alerts of
    every one of them (each up to 10,000 alerts) looking for 3 of its own."""
    timeouts, _ = _foreign_service(monkeypatch, read_s=0.0)
    argv = ["replay", str(DNS), "--url", URL, "--speed", "1e9", "--wait", "30"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert len(timeouts) == 3 * replay_cli.MAX_SHOWN == 9, out  # the newest 9 only
    assert replay_cli.MAX_EXAMINED == 9
    assert f"no incident of this storm yet; see {URL}/ui/" in out


@pytest.mark.parametrize(("wait", "first"), [("30", 27.0), ("5", 10.0)])
def test_the_reads_of_incident_alerts_take_the_time_left_in_wait(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], wait: str, first: float
) -> None:
    """Each read of an incident's alerts had its own 10 s, however many, after --wait. Together
    they now take the time left in --wait, at least MIN_READ_TIMEOUT_S (10 s) as a read of the
    incident list does. The rankings here settle 3 s into the wait (the rank interval and the
    margin); each read takes 4 s."""
    timeouts, _ = _foreign_service(monkeypatch, read_s=4.0)
    argv = ["replay", str(DNS), "--url", URL, "--speed", "1e9", "--wait", wait]
    assert main(argv) == 0
    capsys.readouterr()
    budget = first
    expected = []
    while budget > 0 and len(expected) < 3 * replay_cli.MAX_SHOWN:
        expected.append(budget)
        budget -= 4.0
    assert timeouts == pytest.approx(expected)
