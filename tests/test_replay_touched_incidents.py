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

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

REPO = Path(__file__).resolve().parents[1]
DNS = REPO / "examples" / "storm-dns.json"
URL = "http://fake"


class FakeClock:
    """Monotonic seconds that advance only when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(seconds, 0.0)


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
