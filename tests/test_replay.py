"""``fleetmind replay``: the example storms map onto the embedded graph, are delivered as
Alertmanager's FleetMind route would deliver them, and fill the incident pages with their root first.

The delivery rules emulated are Alertmanager's route options (prometheus/alertmanager v0.28,
``docs/configuration.md``: a group's first notification waits ``group_wait`` after its first alert,
later ones go out every ``group_interval`` while the group grew, each with all of the group's
alerts), for a route grouped by cluster and alertname with the timings of ``deploy/alertmanager.yml``'s
FleetMind route (10 s, 30 s; the shipped route itself sends each alert on its own,
``group_by: ['...']``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from fleetmind.cli import main
from fleetmind.data.errors import DataError
from fleetmind.data.graph import DependencyGraph
from fleetmind.training.replay import (
    load_storm,
    plan_notifications,
    replay,
    retime,
)
from tests.replay_helpers import replay_service

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((REPO / "examples").glob("storm-*.json"))
DEFAULT_GRAPH = REPO / "serving" / "defaults" / "graph.json"


def _alert(name: str, at: str, **labels: str) -> dict:
    return {"labels": {"alertname": name, **labels}, "startsAt": at, "status": "firing"}


def test_notifications_follow_group_wait_and_group_interval() -> None:
    alerts = [
        # distinct label sets: Alertmanager tells alerts apart by their labels
        _alert("A", "2026-01-01T00:00:00Z", cluster="c0", gpu="0"),
        _alert("A", "2026-01-01T00:00:05Z", cluster="c0", gpu="1"),  # inside group_wait
        _alert("A", "2026-01-01T00:00:20Z", cluster="c0", gpu="2"),  # next tick: 10 + 30 s
        _alert("B", "2026-01-01T00:00:03Z", cluster="c0"),
        _alert("A", "2026-01-01T00:00:01Z", cluster="c1"),
    ]
    plan = plan_notifications(alerts, group_wait_s=10, group_interval_s=30)
    got = [
        (n.at_s, n.payload["groupLabels"]["cluster"], n.payload["groupLabels"]["alertname"])
        for n in plan
    ]
    assert got == [(10, "c0", "A"), (11, "c1", "A"), (13, "c0", "B"), (40, "c0", "A")]
    sizes = [len(n.payload["alerts"]) for n in plan]
    assert sizes == [2, 1, 1, 3]  # the later notification repeats the group's earlier alerts
    assert all(n.payload["version"] == "4" and n.payload["receiver"] for n in plan)
    assert plan[0].payload["commonLabels"] == {"alertname": "A", "cluster": "c0"}


def test_retime_keeps_the_gaps_and_ends_now() -> None:
    from datetime import UTC, datetime

    alerts = [_alert("A", "2026-01-01T00:00:00Z"), _alert("B", "2026-01-01T00:02:30Z")]
    end = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    out = retime(alerts, end)
    assert [a["startsAt"] for a in out] == ["2026-12-01T11:57:30Z", "2026-12-01T12:00:00Z"]
    assert alerts[0]["startsAt"] == "2026-01-01T00:00:00Z"  # the input is not changed


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_storms_map_onto_the_embedded_graph(path: Path) -> None:
    storm = load_storm(path)
    graph = DependencyGraph.from_json(json.loads(DEFAULT_GRAPH.read_text()))
    assert storm["expected_root"] in graph.index
    unmapped = [a["labels"] for a in storm["alerts"] if graph.node_for_alert(a["labels"]) is None]
    assert not unmapped, f"alerts that match no node of the default graph: {unmapped}"
    assert len({a["fingerprint"] for a in storm["alerts"]}) == len(storm["alerts"])


def test_the_three_storms_of_the_issue_ship() -> None:
    roots = {load_storm(p)["expected_root"] for p in EXAMPLES}
    assert {"c0/gpu/c0-h1/1", "c0/host/c0-h2", "global/dns"} <= roots


@pytest.fixture
def service(tmp_path: Path) -> Iterator[TestClient]:
    """The service on its embedded defaults (graph and released GAT), without tokens."""
    with replay_service(tmp_path) as c:
        yield c


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_replayed_storm_fills_the_pages_with_its_root_first(
    service: TestClient, path: Path
) -> None:
    storm = load_storm(path)
    lines: list[str] = []
    records = replay(
        storm,
        "http://testserver",
        speed=1.0,
        say=lines.append,
        sleep=lambda s: None,
        client=service,
    )
    assert records and all(r["status"] == 200 for r in records)
    assert f"sent {len(storm['alerts'])} alerts" in lines[-1]
    service.app.state.services.incidents.process_pending()
    incidents = service.get("/api/v1/incidents").json()
    assert sum(i["alert_count"] for i in incidents) == len(storm["alerts"])  # none lost or doubled
    biggest = max(incidents, key=lambda i: i["alert_count"])
    assert biggest["causes"][0]["node"] == storm["expected_root"]
    page = service.get(f"/ui/incidents/{biggest['id']}")
    assert page.status_code == 200 and storm["expected_root"] in page.text
    assert service.get("/ui/").text.count("data-incident=") == len(incidents)


def test_replay_cli_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"alerts": [{"labels": {}}]}')
    for args in (
        [str(tmp_path / "missing.json")],
        [str(bad)],
        [str(EXAMPLES[0]), "--speed", "0"],
        [str(EXAMPLES[0]), "--url", "http://127.0.0.1:9", "--wait", "0"],
    ):
        assert main(["replay", *args]) == 2, args
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("fleetmind: error: "), err
    with pytest.raises(DataError, match="alertname"):
        load_storm(bad)


def test_replay_to_a_server_that_is_not_fleetmind_is_one_line(
    capsys: pytest.CaptureFixture,
) -> None:
    """Python's own http.server answers POST with a multi-line HTML 501 page; the error quotes it
    on one line (it printed the page's nine lines)."""
    import threading
    from http.server import HTTPServer, SimpleHTTPRequestHandler

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:  # its request log goes to stderr too
            pass

    server = HTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        assert main(["replay", str(EXAMPLES[0]), "--url", url, "--wait", "0"]) == 2
    finally:
        server.shutdown()
        server.server_close()
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and "answered 501: <!DOCTYPE HTML> <html" in err[0], err
