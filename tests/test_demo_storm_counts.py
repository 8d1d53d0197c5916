"""``fleetmind demo`` step 5 counts every incident the storm formed, open and resolved; step 3 names
the trace it scores on; the closing lines say where the example storms are.

An incident whose alerts all arrive resolved is resolved at once (:mod:`fleetmind.serving.incidents
.manager`), and ``GET /api/v1/incidents`` lists open incidents unless asked for ``status=all``
(:mod:`fleetmind.serving.routers.incidents`): the demo said "the storm formed 4 incidents (42, 1, 1,
1 alerts)" after posting 47. The service here is an ``httpx.MockTransport`` (httpx's documented
way to fake a server, "Mock transports" in its advanced usage docs) and the clock a fake.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from fleetmind.cli import demo
from fleetmind.cli import replay as replay_cli


class FakeClock:
    """Monotonic seconds that advance only when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(seconds, 0.0)


def _incident(id_: int, status: str, alerts: int, node: str) -> dict[str, Any]:
    cause = {"node": node, "kind": "pod", "cluster": "c0", "score": 0.8, "fault_type": "f"}
    return {
        "id": id_,
        "status": status,
        "alert_count": alerts,
        "nodes": [node],
        "causes": [{**cause, "path": [node]}],
        "method": "gat",
        "model_version": "v",
        "merged_into": 3 if status == "merged" else None,
    }


STORED = [
    _incident(4, "merged", 2, "c0/pod/b"),  # its alerts moved to incident 3: not counted twice
    _incident(3, "open", 5, "c0/pod/a"),
    _incident(2, "resolved", 2, "c0/pod/b"),  # every alert of it arrived resolved
    _incident(1, "open", 1, "c0/pod/c"),
]


def test_step5_counts_open_and_resolved_incidents(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    clock = FakeClock()
    monkeypatch.setattr(
        replay_cli, "time", SimpleNamespace(monotonic=clock.monotonic, sleep=clock.sleep)
    )
    asked: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/v1/alerts":
            return httpx.Response(200, json={"status": "ok"})
        status = request.url.params.get("status")
        asked.append(status)
        wanted = status or "open"  # the API's default
        return httpx.Response(
            200, json=[i for i in STORED if wanted == "all" or i["status"] == wanted]
        )

    real_client = httpx.Client

    def client(**kwargs: Any) -> httpx.Client:
        return real_client(transport=httpx.MockTransport(handler), **kwargs)

    monkeypatch.setattr(httpx, "Client", client)
    alerts = [
        {"labels": {"alertname": f"A{i}", "cluster": "c0"}, "startsAt": "2026-01-01T00:00:00Z"}
        for i in range(8)
    ]
    storm = {"alerts": alerts, "root_cause": "c0/pod/a", "fault_type": "f"}
    best = demo.alert_storm(SimpleNamespace(url="http://fake"), storm)  # type: ignore[arg-type]
    out = capsys.readouterr().out
    assert best["id"] == 3
    assert "posted 8 alerts" in out
    # 5 + 2 + 1 = the 8 alerts posted
    assert "the storm formed 3 incidents (5, 2, 1 alerts; 2 open, 1 resolved)" in out, out
    assert asked and set(asked) == {"all"}


def test_step3_names_the_trace_it_uses(monkeypatch: pytest.MonkeyPatch) -> None:
    """Step 3 said "an openb-schema trace" even on Alibaba's real openb data."""
    import fleetmind.data.paths as paths

    monkeypatch.setattr(paths, "allow_synthetic_openb", lambda: None)  # the real data is there
    title = demo._placement_title(demo.DemoConfig(quick=False))
    assert "the openb trace (Alibaba cluster-trace-gpu-v2023)" in title, title
    assert "schema" not in title
    monkeypatch.setattr(paths, "allow_synthetic_openb", lambda: Path("synthetic/csv"))
    assert "synthetic openb-schema trace" in demo._placement_title(demo.DemoConfig(quick=False))
    assert "synthetic openb-schema trace" in demo._placement_title(demo.DemoConfig(quick=True))


def test_next_steps_name_a_storm_path_that_exists_or_say_where_it_is(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The closing "fleetmind replay examples/..." only worked from a checkout."""
    args = (demo.DemoConfig(), tmp_path, tmp_path / "s.json", tmp_path / "log")
    monkeypatch.chdir(tmp_path)  # not the checkout: the relative path would not exist here
    demo._print_outputs(*args)
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "fleetmind replay" in ln)
    path = Path(line.split("fleetmind replay ")[1].split()[0])
    assert path.is_file() and json.loads(path.read_text())["alerts"]
    monkeypatch.setattr(demo, "REPO_ROOT", tmp_path / "site-packages" / "fleetmind")  # a wheel
    demo._print_outputs(*args)
    out = capsys.readouterr().out
    assert "examples/storm-gpu-xid.json is in the FleetMind source checkout" in out, out
