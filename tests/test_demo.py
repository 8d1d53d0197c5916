"""``fleetmind demo --quick`` end to end: data, released GAT, MLflow run, service, alert storm, placement."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetmind.cli.demo import DemoConfig, _webhook_batches, run_demo
from fleetmind.data.openb_synthetic import SYNTHETIC_LABEL


def test_webhook_batches_group_like_alertmanager() -> None:
    alerts = [
        {"labels": {"alertname": "A", "cluster": "c0"}, "startsAt": "2026-01-01T00:00:02Z"},
        {"labels": {"alertname": "B", "cluster": "c0"}, "startsAt": "2026-01-01T00:00:01Z"},
        {"labels": {"alertname": "A", "cluster": "c0"}, "startsAt": "2026-01-01T00:00:00Z"},
        {"labels": {"alertname": "A", "cluster": "c1"}, "startsAt": "2026-01-01T00:00:03Z"},
    ]
    payloads = _webhook_batches(alerts)
    assert sorted(len(p["alerts"]) for p in payloads) == [1, 1, 2]
    assert all(p["version"] == "4" and p["receiver"] for p in payloads)
    assert sum(len(p["alerts"]) for p in payloads) == len(alerts)


@pytest.mark.slow
def test_quick_demo_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = DemoConfig(
        out=tmp_path / "demo", quick=True, tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}"
    )
    summary = run_demo(cfg)
    # RCA: the released GAT was evaluated beside every baseline on the generated test incidents.
    methods = summary["rca"]["methods"]
    assert {"gat", "random", "deepest", "pagerank"} <= set(methods)
    assert summary["rca"]["n_incidents"] > 0
    # The webhook replay became an incident with ranked causes, each with a propagation path.
    incident = summary["incident"]
    assert incident["alert_count"] > 0 and incident["causes"]
    assert all(c["path"] and c["path"][0] == c["node"] for c in incident["causes"])
    # Placement: both jobs were placed with the right number of GPUs.
    placements = summary["placements"]
    assert [len(p["gpus"]) for p in placements] == [4, 1]
    assert all(p["reserved"] for p in placements)
    first, second = placements
    if (first["cluster"], first["node"]) == (second["cluster"], second["node"]):
        assert not set(first["gpus"]) & set(second["gpus"]), "the second job got a held GPU"
    # placement evaluation ran on the labelled synthetic trace
    assert summary["placement_eval"]["data"] == SYNTHETIC_LABEL
    assert {"BestFit", "FGD"} <= set(summary["placement_eval"]["policies"])
    assert (tmp_path / "demo" / "demo_summary.json").is_file()
    assert (tmp_path / "mlflow.db").is_file()
    out = capsys.readouterr().out
    assert "[6/6]" in out and "skipped" not in out
    for where in ("demo_summary.json", "service.log", str(tmp_path / "demo" / "rca")):
        assert where in out.split("Done. Outputs:")[1], where
