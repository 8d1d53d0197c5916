"""``fleetmind demo`` writes ``OUT/demo_summary.json`` whole (README: result files go through a
temporary file renamed over the old one, so a failed write leaves the old file). It wrote in place
(``Path.write_text``): the old file's inode was truncated and rewritten, and a write that failed
midway left it truncated, invalid JSON. The demo's steps are stubbed: only the summary's write
runs."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from fleetmind.cli import demo as demo_mod
from fleetmind.data import rca_dataset


def test_the_summary_replaces_the_old_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    out = tmp_path / "demo"
    out.mkdir()
    summary = out / "demo_summary.json"
    summary.write_text('{"old": true}')
    old_inode = summary.stat().st_ino
    incident = {"alerts": [], "graph": "g", "root_cause": "c0/host/h"}

    class Service:
        url = "http://stub"
        log_path = tmp_path / "service.log"

        def __init__(self, cfg: Any, graph_path: Path) -> None:
            pass

        def wait_ready(self) -> None:
            pass

        def stop(self) -> None:
            pass

    stubs: dict[str, Any] = {
        "_check_config": lambda cfg: None,
        "generate_data": lambda cfg: tmp_path / "data",
        "rca_model": lambda cfg, data_dir: {"gat": 1.0},
        "placement_eval": lambda cfg: {},
        "_placement_title": lambda cfg: "placement",
        "_Service": Service,
        "alert_storm": lambda svc, inc: {"id": 1},
        "placement_decisions": lambda svc: [],
        "_print_outputs": lambda *args: None,
    }
    for name, stub in stubs.items():
        monkeypatch.setattr(demo_mod, name, stub)
    monkeypatch.setattr(
        rca_dataset,
        "load_dataset",
        lambda data_dir, splits: SimpleNamespace(splits={"test": [incident]}),
    )
    demo_mod.run_demo(demo_mod.DemoConfig(out=out, quick=True))
    assert json.loads(summary.read_text())["incident"] == {"id": 1}
    assert summary.stat().st_ino != old_inode  # a new file renamed over the old one
    assert sorted(p.name for p in out.iterdir()) == ["demo_summary.json"]
