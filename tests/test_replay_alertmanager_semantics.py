"""``fleetmind replay`` delivers ``endsAt`` as Alertmanager does, reports the alerts the service
rejected, refuses storms the service would refuse before sending any, and bounds its waits.

Alertmanager semantics encoded here (prometheus/alertmanager):

- ``dispatch/dispatch.go``, ``aggrGroup.flush``: every alert not resolved at flush time goes out
  with ``EndsAt = time.Time{}`` (the zero time ``0001-01-01T00:00:00Z``); an alert whose
  ``EndsAt`` has passed (``ResolvedAt(now)``) goes out resolved and is deleted from the group
  after the flush.
- ``notify/notify.go``, ``DedupStage.needsUpdate``: a group never notified before is notified only
  when it has firing alerts (an alert that resolved before it was ever sent firing is never sent);
  later flushes only when a new alert fires, all alerts resolved, or (``send_resolved``) one
  resolved. Alerts are told apart by fingerprint, a hash of the label set: a later alert with
  the same labels replaces the earlier one (``types.Alert.Merge``, ``types/types.go``, while the
  earlier one had not ended: the earlier ``startsAt`` kept, the later ``endsAt`` while the newer
  copy fires, a resolution's own ``endsAt``).

Replay reads ``endsAt`` in storm time: a resolution is delivered at the group's next
``group_interval`` flush after it. A firing alert's ``endsAt`` after the storm's last ``startsAt``
is Prometheus's ``ValidUntil`` (prometheus/prometheus ``rules/manager.go`` ``SendAlerts``,
``rules/alerting.go`` ``sendAlerts``), not a resolution. The sequences were compared with
Alertmanager 0.25 (a webhook receiver with ``send_resolved``, group_wait 10 s, group_interval
30 s): same notifications, the times within the 1 s it took to post the alerts, except for a
group that emptied (Alertmanager may keep its schedule until its 30 s clean-up) and an ``endsAt``
after the last ``startsAt`` (replay leaves it in the future).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from fleetmind.cli import main
from fleetmind.cli import replay as replay_cli
from fleetmind.data.errors import ConfigError, DataError
from fleetmind.training.replay import ZERO_TIME, load_storm, plan_notifications, replay
from tests.replay_helpers import replay_service

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

REPO = Path(__file__).resolve().parents[1]
XID = REPO / "examples" / "storm-gpu-xid.json"


LABELS = {"alertname": "A", "cluster": "c0"}


def _alert(name: str, at: str, ends: str | None = None, **extra: Any) -> dict[str, Any]:
    a: dict[str, Any] = {"labels": {"alertname": name, "cluster": "c0"}, "startsAt": at}
    if ends is not None:
        a["endsAt"] = ends
    return {**a, "status": "firing", **extra}


def _plan(*alerts: dict[str, Any]) -> list[Any]:
    """The notifications of a storm of ``alerts``, group_wait 10 s and group_interval 30 s."""
    return plan_notifications(list(alerts), group_wait_s=10, group_interval_s=30)


def _sent(plan: list[Any]) -> list[tuple[float, str, list[tuple[str, str, str]]]]:
    return [
        (
            n.at_s,
            n.payload["status"],
            [(a["labels"]["alertname"], a["status"], a["endsAt"]) for a in n.payload["alerts"]],
        )
        for n in plan
    ]


def test_ends_at_is_zeroed_while_firing_and_resolved_at_the_next_flush() -> None:
    """A alerts at 0 s (ends at 60 s) and 20 s; B at 200 s, the storm's end. Replay sent A at
    10 s and 40 s still carrying its past endsAt, and never resolved it."""
    a_end = "2026-01-01T00:01:00Z"
    plan = _plan(
        _alert("A", "2026-01-01T00:00:00Z", a_end),
        _alert("A", "2026-01-01T00:00:20Z", ZERO_TIME, labels={**LABELS, "gpu": "2"}),
        _alert("B", "2026-01-01T00:03:20Z"),
    )
    assert _sent(plan) == [
        (10, "firing", [("A", "firing", ZERO_TIME)]),
        (40, "firing", [("A", "firing", ZERO_TIME), ("A", "firing", ZERO_TIME)]),
        # the first flush at or after its endsAt (10 + 2 * 30 s), with its own endsAt
        (70, "firing", [("A", "resolved", a_end), ("A", "firing", ZERO_TIME)]),
        (210, "firing", [("B", "firing", ZERO_TIME)]),  # a missing endsAt goes out as zero
    ]


def test_an_alert_resolved_before_its_first_flush_is_never_sent() -> None:
    """Alertmanager notifies a new group only when it has firing alerts (DedupStage); an endsAt
    after the storm's last startsAt lies in the future: the alert is firing, not resolved."""
    plan = _plan(
        _alert("Gone", "2026-01-01T00:00:00Z", "2026-01-01T00:00:05Z"),
        _alert("Later", "2026-01-01T00:00:00Z", "2026-01-01T01:00:00Z"),
        _alert("Last", "2026-01-01T00:01:00Z"),
    )
    assert _sent(plan) == [
        (10, "firing", [("Later", "firing", ZERO_TIME)]),
        (70, "firing", [("Last", "firing", ZERO_TIME)]),
    ]


def test_an_alert_the_file_marks_resolved_resolves_at_its_ends_at() -> None:
    """Replay sent it resolved in its group's first notification, one that Alertmanager's dedup
    would not send. Alertmanager 0.25 (a webhook receiver, these route timings) sent it firing at
    its group's first flush and resolved at the first flush after its endsAt."""
    ends = "2026-01-01T00:00:30Z"
    plan = _plan(
        _alert("R", "2026-01-01T00:00:00Z", ends, status="resolved"),
        _alert("F", "2026-01-01T00:01:00Z"),
    )
    assert _sent(plan) == [
        (10, "firing", [("R", "firing", ZERO_TIME)]),
        (40, "resolved", [("R", "resolved", ends)]),
        (70, "firing", [("F", "firing", ZERO_TIME)]),
    ]


def test_a_resolution_after_the_last_start_is_delivered() -> None:
    """An alert marked resolved whose endsAt lies after the storm's last startsAt: replay sent it
    resolved at once; it is firing until its endsAt, and the replay goes on until the flush that
    sends it resolved."""
    ends = "2026-01-01T00:02:00Z"
    plan = _plan(
        _alert("R", "2026-01-01T00:00:00Z", ends, status="resolved"),
        _alert("F", "2026-01-01T00:01:00Z"),
    )
    assert _sent(plan) == [
        (10, "firing", [("R", "firing", ZERO_TIME)]),
        (70, "firing", [("F", "firing", ZERO_TIME)]),
        (130, "resolved", [("R", "resolved", ends)]),
    ]


def test_an_alert_and_its_recorded_resolution_are_one_alert() -> None:
    """A storm that records an alert's firing and its resolution as two entries (same labels, the
    second ``"status": "resolved"`` with endsAt 60 s in): replay sent both copies at 10 s, and the
    firing one again at 100 s, after the resolution. Alertmanager keys alerts by their label set:
    the second entry replaces the first (``types.Alert.Merge`` keeps the earlier startsAt)."""
    ends = "2026-01-01T00:01:00Z"
    plan = _plan(
        _alert("A", "2026-01-01T00:00:00Z", ZERO_TIME),
        _alert("A", "2026-01-01T00:00:00Z", ends, status="resolved"),
        _alert("A", "2026-01-01T00:01:30Z", labels={**LABELS, "gpu": "7"}),
        _alert("B", "2026-01-01T00:02:00Z"),
    )
    assert _sent(plan) == [
        (10, "firing", [("A", "firing", ZERO_TIME)]),
        (70, "resolved", [("A", "resolved", ends)]),
        (100, "firing", [("A", "firing", ZERO_TIME)]),  # the other GPU's alert, alone
        (130, "firing", [("B", "firing", ZERO_TIME)]),
    ]
    assert plan[2].payload["alerts"][0]["labels"]["gpu"] == "7"


def test_a_resolution_without_ends_at_resolves_at_its_starts_at() -> None:
    """An entry marked resolved without endsAt, 50 s in, ends the alert then: Alertmanager merges
    it into the firing one (its startsAt kept) and sends it resolved at the next flush, its endsAt
    the resolution's time."""
    plan = _plan(
        _alert("A", "2026-01-01T00:00:00Z"),
        _alert("A", "2026-01-01T00:00:50Z", status="resolved"),
        _alert("B", "2026-01-01T00:02:00Z"),
    )
    assert _sent(plan) == [
        (10, "firing", [("A", "firing", ZERO_TIME)]),
        (70, "resolved", [("A", "resolved", "2026-01-01T00:00:50Z")]),
        (130, "firing", [("B", "firing", ZERO_TIME)]),
    ]
    assert plan[1].payload["alerts"][0]["startsAt"] == "2026-01-01T00:00:00Z"


def test_a_re_fire_within_one_interval_sends_nothing_new() -> None:
    """The same labels resolve at 45 s and fire again at 50 s, before the flush at 70 s: replay
    sent a notification at 70 s with both copies. Alertmanager 0.25 sent none until the next
    group's (its dedup: the same alert firing as in the last notification)."""
    plan = _plan(
        _alert("A", "2026-01-01T00:00:00Z", "2026-01-01T00:00:45Z"),
        _alert("A", "2026-01-01T00:00:50Z"),
        _alert("M", "2026-01-01T00:02:00Z"),
    )
    assert _sent(plan) == [
        (10, "firing", [("A", "firing", ZERO_TIME)]),
        (130, "firing", [("M", "firing", ZERO_TIME)]),
    ]


def test_a_captured_firing_alert_with_a_future_ends_at_stays_firing() -> None:
    """Prometheus sends a firing alert with endsAt = its ValidUntil, 4 x max(evaluation interval,
    resend delay) ahead (prometheus/prometheus ``rules/alerting.go`` ``sendAlerts``,
    ``rules/manager.go`` ``SendAlerts``), so a storm captured from Alertmanager's
    ``/api/v2/alerts`` has an endsAt after its last startsAt on alerts still firing: they must not
    be resolved."""
    plan = _plan(
        _alert("A", "2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z"),  # last start + 4 min
        _alert("B", "2026-01-01T00:01:00Z", "2026-01-01T00:05:00Z"),
    )
    assert _sent(plan) == [
        (10, "firing", [("A", "firing", ZERO_TIME)]),
        (70, "firing", [("B", "firing", ZERO_TIME)]),
    ]


@pytest.fixture
def service(tmp_path: Path) -> Iterator[TestClient]:
    with replay_service(tmp_path) as c:
        yield c


def _xid_storm(tmp_path: Path, extra: dict[str, Any] | None = None, **changes: Any) -> Path:
    """The shipped XID storm with its first alert (GPUXidError of GPU 1, at 09:00:00) changed,
    and ``extra`` added to its group."""
    storm = json.loads(XID.read_text())
    storm["alerts"][0].update(changes)
    if extra is not None:
        storm["alerts"].append({**storm["alerts"][0], "startsAt": "2026-12-01T09:00:05Z", **extra})
    path = tmp_path / "storm.json"
    path.write_text(json.dumps(storm))
    return path


def test_a_cleared_alert_is_stored_resolved(service: TestClient, tmp_path: Path) -> None:
    """The XID clears 60 s into the storm (before its last alert): the service stores it
    resolved; replay posted it firing (its endsAt already past) and it stayed firing."""
    storm = load_storm(_xid_storm(tmp_path, endsAt="2026-12-01T09:01:00Z"))
    xid = storm["alerts"][0]
    assert xid["labels"]["alertname"] == "GPUXidError" and xid["startsAt"].endswith("09:00:00Z")
    replay(storm, "http://testserver", speed=1.0, say=lambda s: None, sleep=lambda s: None,
           client=service)  # fmt: skip
    service.app.state.services.incidents.process_pending()
    (inc,) = service.get("/api/v1/incidents", params={"status": "all"}).json()
    alerts = service.get(f"/api/v1/incidents/{inc['id']}", params={"alerts_limit": 100}).json()
    status = {a["fingerprint"]: a["status"] for a in alerts["alerts"]}
    assert status.pop(xid["fingerprint"]) == "resolved"
    assert set(status.values()) == {"firing"}, status


def test_a_recorded_resolution_leaves_the_alert_resolved(
    service: TestClient, tmp_path: Path
) -> None:
    """The XID and a second entry for it (same labels and fingerprint) marked resolved 60 s in,
    and another GPU's XID joining its group at 90 s: replay sent both copies at 10 s, and the
    firing one again at 100 s, after the resolution (a re-fire to the service). Alertmanager
    0.25 sent the alert firing at 10 s and resolved at 70 s, whether the resolution was posted
    with the firing alert or 60 s later."""
    resolution = {"startsAt": "2026-12-01T09:00:00Z", "status": "resolved",
                  "endsAt": "2026-12-01T09:01:00Z"}  # fmt: skip
    path = _xid_storm(tmp_path, extra=resolution)
    data = json.loads(path.read_text())
    other = data["alerts"][0]
    data["alerts"].append({**other, "labels": {**other["labels"], "gpu": "7"},
                           "fingerprint": "00000000000000ff", "startsAt": "2026-12-01T09:01:30Z"})  # fmt: skip
    path.write_text(json.dumps(data))
    storm = load_storm(path)
    xid = storm["alerts"][0]["fingerprint"]
    sent: list[list[str]] = []  # the XID's statuses in each notification

    def post(url: str, json: dict[str, Any], headers: dict[str, str]) -> httpx.Response:
        sent.append([a["status"] for a in json["alerts"] if a["fingerprint"] == xid])
        return service.post(url, json=json, headers=headers)

    replay(storm, "http://testserver", speed=1.0, say=lambda s: None, sleep=lambda s: None,
           client=SimpleNamespace(post=post))  # fmt: skip
    assert [x for x in sent if x] == [["firing"], ["resolved"]]  # never firing after resolved
    service.app.state.services.incidents.process_pending()
    (inc,) = service.get("/api/v1/incidents", params={"status": "all"}).json()
    alerts = service.get(f"/api/v1/incidents/{inc['id']}", params={"alerts_limit": 100}).json()
    assert {a["status"] for a in alerts["alerts"] if a["fingerprint"] == xid} == {"resolved"}


def test_rejected_alerts_are_reported_and_exit_1(
    service: TestClient, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The service answers 200 and leaves out an alert with a label name over 256 characters
    (docs/serving/api.md: ``rejected``, ``rejected_count``); replay said nothing and exited 0."""
    bad_labels = {"alertname": "GPUXidError", "cluster": "c0", "x" * 300: "1"}
    path = _xid_storm(tmp_path, extra={"labels": bad_labels, "fingerprint": "bad"})
    lines: list[str] = []
    records = replay(load_storm(path), "http://testserver", speed=1.0, say=lines.append,
                     sleep=lambda s: None, client=service)  # fmt: skip
    assert sum(r["rejected"] for r in records) >= 1
    assert lines[-1].startswith("the service rejected 1 of the storm's alerts (not stored)")
    assert "GPUXidError: labels." in lines[-1], lines[-1]

    def client(url: str) -> TestClient:
        return service

    capsys.readouterr()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(replay_cli, "_client", client)
        mp.setattr(service, "close", lambda: None)  # the fixture closes it
        code = main(["replay", str(path), "--url", "http://127.0.0.1:9", "--speed", "1e9",
                     "--wait", "0"])  # fmt: skip
    assert code == 1
    assert "the service rejected 1 of the storm's alerts" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"labels": {"alertname": "GPUXidError", "cluster": 1}}, "alert 0: labels.cluster must"),
        ({"annotations": {"summary": ["x"]}}, "alert 0: annotations.summary must be a string"),
        ({"annotations": "x"}, "alert 0: annotations must be an object of strings"),
        ({"status": "active"}, "alert 0: status must be firing or resolved"),
    ],
)
def test_what_the_service_would_refuse_is_refused_before_sending(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict[str, Any], message: str
) -> None:
    """load_storm accepted these; the service then answered 422 halfway through the replay."""
    path = _xid_storm(tmp_path, **change)
    with pytest.raises(DataError, match=message):
        load_storm(path)
    assert main(["replay", str(path), "--url", "http://127.0.0.1:9", "--wait", "0"]) == 2
    captured = capsys.readouterr()
    err = [ln for ln in captured.err.splitlines() if ln.strip()]
    assert len(err) == 1 and message in err[0], err
    assert captured.out == ""  # before the title: nothing was sent


def test_an_empty_ends_at_means_no_end(service: TestClient, tmp_path: Path) -> None:
    """``"endsAt": ""`` passed load_storm, was posted as is and answered 422 (after the alerts
    before it had been sent)."""
    storm = load_storm(_xid_storm(tmp_path, endsAt=""))
    assert storm["alerts"][0]["endsAt"] == ZERO_TIME
    records = replay(storm, "http://testserver", speed=1.0, say=lambda s: None,
                     sleep=lambda s: None, client=service)  # fmt: skip
    assert all(r["status"] == 200 and r["rejected"] == 0 for r in records)


def test_a_speed_that_cannot_be_waited_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """``--speed 1e-300`` made time.sleep raise OverflowError: a traceback."""
    argv = ["replay", str(XID), "--url", "http://127.0.0.1:9", "--speed", "1e-300", "--wait", "0"]
    assert main(argv) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and "--speed 1e-300 is too slow" in err[0], err
    for speed in ("inf", "nan"):  # argparse's usage error
        with pytest.raises(SystemExit) as exit_:
            main([*argv[:5], speed])
        assert exit_.value.code == 2
        err = capsys.readouterr().err.splitlines()
        assert "argument --speed: expected a finite number" in err[-1], err
    with pytest.raises(ConfigError, match="too slow"):
        replay(load_storm(XID), "http://x", speed=1e-300, sleep=lambda s: None, client=object())


def test_a_slow_incident_read_says_so_and_may_take_the_wait(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Reads of the incidents had a fixed 10 s timeout and a timeout ended the replay silently
    (exit 0, nothing about incidents)."""
    clock = SimpleNamespace(now=0.0)
    monkeypatch.setattr(
        replay_cli,
        "time",
        SimpleNamespace(monotonic=lambda: clock.now, sleep=lambda s: None),
    )
    timeouts: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/v1/incidents":
            timeouts.append(request.extensions["timeout"]["read"])
            raise httpx.ReadTimeout("timed out", request=request)
        if request.url.path == "/api/v1/rca":
            return httpx.Response(200, json={"mapped_alerts": 8})
        return httpx.Response(200, json={"accepted": 1, "rejected": [], "rejected_count": 0})

    monkeypatch.setattr(
        replay_cli,
        "_client",
        lambda url: httpx.Client(base_url=url, transport=httpx.MockTransport(handler)),
    )
    argv = ["replay", str(XID), "--url", "http://fake", "--speed", "1e9", "--wait", "25"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "could not read incidents from http://fake/api/v1/incidents: timed out" in out, out
    assert timeouts == [25.0]  # the time left in --wait, not 10 s


def _incidents_client(
    monkeypatch: pytest.MonkeyPatch, incidents: Any
) -> tuple[list[float], list[int]]:
    """A fake service for ``fleetmind replay``, on a clock that only its sleeps advance:
    ``incidents(n)`` answers the n-th read of ``/api/v1/incidents`` (1-based). Returns the reads'
    timeouts and their count."""
    clock = SimpleNamespace(now=0.0)

    def sleep(s: float) -> None:
        clock.now += s

    monkeypatch.setattr(
        replay_cli, "time", SimpleNamespace(monotonic=lambda: clock.now, sleep=sleep)
    )
    timeouts: list[float] = []
    reads = [0]

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/v1/incidents":
            reads[0] += 1
            timeouts.append(request.extensions["timeout"]["read"])
            return incidents(reads[0], request)
        if request.url.path == "/api/v1/rca":
            return httpx.Response(200, json={"mapped_alerts": 8})
        if request.url.path.startswith("/api/v1/incidents/"):
            return httpx.Response(200, json={"alerts": []})
        return httpx.Response(200, json={"accepted": 1, "rejected": [], "rejected_count": 0})

    monkeypatch.setattr(
        replay_cli,
        "_client",
        lambda url: httpx.Client(base_url=url, transport=httpx.MockTransport(handler)),
    )
    return timeouts, reads


def test_a_failed_later_read_is_not_called_the_wait_running_out(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The first read of the incidents succeeds, the next one fails (--wait 30 s not run out):
    replay said the rankings "had not settled after --wait 30 s"."""
    incident = {"id": 7, "alert_count": 6, "nodes": ["x"], "status": "open",
                "causes": [{"node": "gpu:c0-h1:1", "fault_type": "xid", "score": 0.9}],
                "first_alert_at": "2999-01-01T00:00:00Z",
                "last_alert_at": "2999-01-01T00:00:00Z"}  # fmt: skip

    def incidents(n: int, request: httpx.Request) -> httpx.Response:
        if n >= 2:
            raise httpx.ConnectError("connection refused", request=request)
        return httpx.Response(200, json=[incident])

    _, reads = _incidents_client(monkeypatch, incidents)
    argv = ["replay", str(XID), "--url", "http://fake", "--speed", "1e9", "--wait", "30"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert reads == [2]
    assert "could not read incidents from http://fake/api/v1/incidents" in out, out
    assert "as they stood at the last successful read" in out, out
    assert "after --wait" not in out, out
    assert "incident #7: 6 alerts; top cause gpu:c0-h1:1 xid" in out, out


def test_a_small_wait_still_gives_a_read_10_s(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """With --wait 2 a read of the incidents timed out after 2 s (the time left in --wait, at
    least 1 s), where it had 10 s before: it takes the time left, at least 10 s."""

    def incidents(n: int, request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=[])

    timeouts, _ = _incidents_client(monkeypatch, incidents)
    argv = ["replay", str(XID), "--url", "http://fake", "--speed", "1e9", "--wait", "2"]
    assert main(argv) == 0
    assert timeouts and set(timeouts) == {replay_cli.MIN_READ_TIMEOUT_S} == {10.0}
    assert "no incident of this storm yet" in capsys.readouterr().out


# types.Alert.Merge (types/types.go of prometheus/alertmanager, 0.25 on): the earlier startsAt;
# while the newer copy fires the later endsAt wins (unless the older one timed out), and a newer
# resolution's endsAt wins unless the older copy was resolved too with a later one.
@pytest.mark.parametrize("first_ends", ["2026-01-01T00:05:00Z", "2026-01-01T00:00:40Z"])
def test_same_labels_and_start_keep_the_later_end_whatever_the_file_order(first_ends: str) -> None:
    """Two sends of one alert (same labels and startsAt; endsAt 300 s, a ValidUntil after the
    last startsAt, and 40 s, an older send's): replay resolved it at 40 s when the 40 s copy came
    second in the file, and kept it firing otherwise. Alertmanager 0.25 kept it firing either
    way (Merge keeps the later endsAt)."""
    ends = {"2026-01-01T00:05:00Z", "2026-01-01T00:00:40Z"}
    second_ends = (ends - {first_ends}).pop()
    plan = _plan(
        _alert("A", "2026-01-01T00:00:00Z", first_ends),
        _alert("A", "2026-01-01T00:00:00Z", second_ends),
        _alert("M", "2026-01-01T00:01:40Z"),
    )
    assert _sent(plan) == [
        (10, "firing", [("A", "firing", ZERO_TIME)]),
        (110, "firing", [("M", "firing", ZERO_TIME)]),
    ]


def test_a_re_send_with_an_earlier_end_keeps_the_later_one() -> None:
    """The alert ends at 45 s; the same labels re-sent at 20 s with endsAt 30 s: replay took the
    re-send's end and sent it resolved at 40 s with endsAt 30 s. Alertmanager 0.25 (a webhook
    receiver, these route timings) sent it firing at 10 s and resolved at 71 s, the flush after
    45 s, with endsAt 45 s."""
    ends = "2026-01-01T00:00:45Z"
    plan = _plan(
        _alert("A", "2026-01-01T00:00:00Z", ends),
        _alert("A", "2026-01-01T00:00:20Z", "2026-01-01T00:00:30Z"),
        _alert("M", "2026-01-01T00:02:00Z"),
    )
    assert _sent(plan) == [
        (10, "firing", [("A", "firing", ZERO_TIME)]),
        (70, "resolved", [("A", "resolved", ends)]),
        (130, "firing", [("M", "firing", ZERO_TIME)]),
    ]
    assert plan[1].payload["alerts"][0]["startsAt"] == "2026-01-01T00:00:00Z"


def test_a_resolution_ends_an_alert_whose_firing_copy_ends_later() -> None:
    """A resolution's own endsAt wins over a firing copy's later one (Merge: ``o.Resolved()``)."""
    ends = "2026-01-01T00:00:30Z"
    plan = _plan(
        _alert("A", "2026-01-01T00:00:00Z", "2026-01-01T00:01:40Z"),
        _alert("A", "2026-01-01T00:00:20Z", ends, status="resolved"),
        _alert("M", "2026-01-01T00:02:00Z"),
    )
    assert _sent(plan)[1] == (40, "resolved", [("A", "resolved", ends)])


def _storm_file(tmp_path: Path, alerts: list[dict[str, Any]]) -> Path:
    path = tmp_path / "storm.json"
    path.write_text(json.dumps({"name": "s", "alerts": alerts}))
    return path


def test_the_summary_counts_alerts_sent_not_file_entries(tmp_path: Path) -> None:
    """An alert and its recorded resolution (two entries, one alert): replay said "sent 2
    alerts"."""
    storm = load_storm(
        _storm_file(
            tmp_path,
            [
                _alert("A", "2026-01-01T00:00:00Z"),
                _alert("A", "2026-01-01T00:00:00Z", "2026-01-01T00:01:00Z", status="resolved"),
            ],
        )
    )
    ok = SimpleNamespace(status_code=200, text="", json=lambda: {"accepted": 1, "rejected": []})
    lines: list[str] = []
    records = replay(storm, "http://x", speed=1e9, say=lines.append, sleep=lambda s: None,
                     client=SimpleNamespace(post=lambda *a, **k: ok))  # fmt: skip
    assert len(records) == 2
    assert lines[-1] == "sent 1 alert (2 entries in the file; a storm of 0 s) in 2 notifications"


def test_nothing_to_send_says_so_and_waits_for_no_incident(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every alert resolved before its first notification: replay said "sent 1 alerts ... in 0
    notifications" and then waited --wait for incidents that cannot come."""
    path = _storm_file(tmp_path, [_alert("A", "2026-01-01T00:00:00Z", status="resolved")])
    asked: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.path)
        return httpx.Response(200, json=[])

    monkeypatch.setattr(
        replay_cli,
        "_client",
        lambda url: httpx.Client(base_url=url, transport=httpx.MockTransport(handler)),
    )
    assert main(["replay", str(path), "--url", "http://fake", "--wait", "30"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == (
        "nothing to send: every alert resolved before its first notification "
        "(as Alertmanager would)"
    )
    assert asked == []


def test_an_api_v2_alerts_capture_replays_as_firing(service: TestClient, tmp_path: Path) -> None:
    """``GET /api/v2/alerts`` gives ``status`` as an object (Alertmanager's OpenAPI
    ``alertStatus``) and lists only alerts not resolved: load_storm refused it ("status must be
    firing or resolved")."""
    v2 = {"annotations": {}, "endsAt": "2026-01-01T00:05:00.000Z",
          "fingerprint": "0123456789abcdef", "receivers": [{"name": "fleetmind"}], "startsAt": "2026-01-01T00:00:00.000Z",
          "status": {"inhibitedBy": [], "silencedBy": [], "state": "active"},
          "updatedAt": "2026-01-01T00:01:00.000Z", "generatorURL": "",
          "labels": {"alertname": "A", "cluster": "c0"}}  # fmt: skip
    storm = load_storm(_storm_file(tmp_path, [v2]))
    assert storm["alerts"][0]["status"] == "firing"
    records = replay(storm, "http://testserver", speed=1.0, say=lambda s: None,
                     sleep=lambda s: None, client=service)  # fmt: skip
    assert [(r["status"], r["rejected"]) for r in records] == [(200, 0)]
    for state in ("unprocessed", "suppressed"):
        v2["status"] = {"state": state}
        assert load_storm(_storm_file(tmp_path, [v2]))["alerts"][0]["status"] == "firing"
    v2["status"] = {"state": "resolved"}
    with pytest.raises(DataError, match="alert 0: status.state must be one of active"):
        load_storm(_storm_file(tmp_path, [v2]))


def test_a_bare_api_v2_alerts_array_is_a_storm(tmp_path: Path) -> None:
    """``GET /api/v2/alerts`` answers a bare JSON array (Alertmanager's OpenAPI
    ``gettableAlerts``): saved as it came, it was refused ('expected {"alerts": [...]}')."""
    v2 = {"annotations": {}, "endsAt": "2026-01-01T00:05:00.000Z", "fingerprint": "0123456789abcdef",
          "startsAt": "2026-01-01T00:00:00.000Z", "status": {"state": "active"},
          "labels": {"alertname": "A", "cluster": "c0"}}  # fmt: skip
    path = tmp_path / "capture.json"
    path.write_text(json.dumps([v2]))
    assert [a["labels"]["alertname"] for a in load_storm(path)["alerts"]] == ["A"]
    path.write_text("[]")
    with pytest.raises(DataError, match="at least one alert"):
        load_storm(path)
