"""Two training runs with the same seed started in the same second get run folders of their own.

The run folder is named ``<...>__<seed>__<unix second>``; it used to be made with
``mkdir(exist_ok=True)``, so two such runs (a sweep over ``--hidden`` started together) shared one
folder and one run's summary named a folder holding the other's model.
"""

from __future__ import annotations

import json
import time
import types
from pathlib import Path

import pytest

from fleetmind.training.io import new_run_dir


def _frozen_time(module: types.ModuleType) -> types.SimpleNamespace:
    """``module``'s ``time`` with ``time()`` fixed: every run starts in the same second."""
    names = {k: getattr(time, k) for k in dir(time) if not k.startswith("_")}
    return types.SimpleNamespace(**(names | {"time": lambda: 1_800_000_000.0}))


def test_new_run_dir_adds_a_suffix_when_taken(tmp_path: Path) -> None:
    names = [new_run_dir(tmp_path / "runs", "x__0__1")[0] for _ in range(3)]
    assert names == ["x__0__1", "x__0__1-2", "x__0__1-3"]
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == sorted(names)
    assert new_run_dir(tmp_path / "runs", "y", create=False) == ("y", tmp_path / "runs" / "y")
    assert not (tmp_path / "runs" / "y").exists()


def test_placement_run_dirs_are_distinct(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fleetmind.training.recipes import tracking

    monkeypatch.setattr(tracking, "time", _frozen_time(tracking))
    args = types.SimpleNamespace(seed=7, out=str(tmp_path / "runs"))
    first = tracking.run_dirs(args, "GpuPlacement-v0")
    second = tracking.run_dirs(args, "GpuPlacement-v0")
    assert first[0] != second[0] and first[1] != second[1]
    assert first[2].is_dir() and second[2].is_dir() and first[2] != second[2]


def test_rca_train_same_seed_same_second_keeps_both_models(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fleetmind.cli import main
    from fleetmind.data.rca_gen.generate import DatasetSpec, generate_dataset
    from fleetmind.data.rca_gen.graphs import GraphGenConfig
    from fleetmind.training import rca_train

    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.chdir(tmp_path)  # ./mlruns artifacts land in tmp
    data = tmp_path / "ds"
    small = GraphGenConfig(min_nodes=50, max_nodes=120)
    generate_dataset(data, DatasetSpec(n_incidents=40, seed=1, graphs=small, workers=1))
    monkeypatch.setattr(rca_train, "time", _frozen_time(rca_train))
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    arts = {}
    for hidden in (8, 16):
        out = tmp_path / f"h{hidden}.json"
        argv = ["rca", "train", "--data", str(data), "--epochs", "1", "--hidden", str(hidden)]
        argv += ["--heads", "2", "--layers", "2", "--batch-size", "8", "--no-register"]
        argv += ["--out", str(tmp_path / "runs"), "--tracking-uri", uri, "--json", str(out)]
        assert main(argv) == 0
        arts[hidden] = json.loads(out.read_text())["artifact"]
    assert arts[8] != arts[16]
    for hidden, art in arts.items():
        assert json.loads(Path(art, "config.json").read_text())["model"]["hidden"] == hidden
    assert len(list((tmp_path / "runs").iterdir())) == 2
