"""Section 2 of notebooks/placement_evaluation.ipynb reads the released agent's evaluation only.

It used to load every ``*ppo*.json`` in the results folder and let ``pivot_table`` average them,
so its "PPO" column was a mean over four different models (on ``cpu050``: 4.20, the mean of
4.382, 4.152, 4.141 and 4.141 from four files). The cells run here as plain Python (the
notebook's own source, its ``%`` magics dropped) on a small results folder with decoy files.
The released agent and its evaluation files: docs/ppo.md, "Released model".
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import matplotlib
import nbformat
import pytest

NB = Path(__file__).resolve().parents[1] / "notebooks" / "placement_evaluation.ipynb"


@contextmanager
def _saved_environ() -> Iterator[None]:
    """Put ``os.environ`` back as it was: the setup cell writes ``FLEETMIND_SHARED_DATA`` and
    ``MLFLOW_TRACKING_URI`` itself (made absolute), not through monkeypatch."""
    saved = dict(os.environ)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    with _saved_environ():
        yield


def _cell(nb: Any, tag: str) -> str:
    (src,) = [c.source for c in nb.cells if tag in c.get("metadata", {}).get("tags", [])]
    return "\n".join(ln for ln in src.splitlines() if not ln.lstrip().startswith("%"))


def _eval(ppo: float, fgd: float, held_out: bool) -> dict:
    return {
        "held_out": held_out,
        "policies": {
            "ppo": {"unallocated_gpu_pct_at_100": ppo, "ms_per_decision": 0.25},
            "FGD": {"unallocated_gpu_pct_at_100": fgd, "ms_per_decision": 0.36},
        },
    }


def _write(path: Path, traces: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"train_traces": ["default"], "traces": traces}))


def test_ppo_column_is_the_released_models_value_not_a_mean_over_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    matplotlib.use("Agg")
    place = tmp_path / "placement"
    _write(
        place / "ppo_eval_scarcity.json",
        {"cpu050": _eval(4.152, 4.977, True), "default": _eval(4.15, 4.77, False)},
    )
    more = {"cpu0": _eval(4.15, 5.16, True), "cpu050": _eval(4.0, 4.977, True)}  # a duplicate
    _write(place / "ppo_eval_scarcity_more_traces.json", more)
    for decoy, v in (("ppo_eval.json", 4.382), ("ppo_eval_strand.json", 4.141)):
        _write(place / decoy, {"cpu050": _eval(v, 4.977, True)})  # earlier models
    _write(tmp_path / "dynamic" / "ppo_dynamic_x.json", {"cpu050": _eval(99.0, 1.0, True)})
    monkeypatch.setenv("FLEETMIND_RESULTS_DIR", str(tmp_path))
    nb = nbformat.read(NB, as_version=4)
    notes: list[str] = []
    ns: dict[str, Any] = {}
    exec(_cell(nb, "setup"), ns)  # the notebook's own cells
    ns["note"] = notes.append
    exec(_cell(nb, "ppo"), ns)
    piv = ns["ppo_df"].pivot(index="trace", columns="policy", values="unallocated_gpu_pct_at_100")
    assert piv.loc["cpu050", "PPO"] == pytest.approx(4.152)
    assert set(piv.index) == {"cpu050", "cpu0", "default (train)"}
    assert any("cpu050 is also in ppo_eval_scarcity.json" in n for n in notes), notes
    assert set(ns["ppo_df"]["file"]) == {
        "ppo_eval_scarcity.json",
        "ppo_eval_scarcity_more_traces.json",
    }


def test_setup_cell_writes_do_not_outlive_the_test(monkeypatch: pytest.MonkeyPatch) -> None:
    # values the setup cell rewrites (a relative sqlite URI, a path it makes absolute) are put back,
    # so tests/test_notebooks_inputs.py and later files see the developer's own environment
    monkeypatch.setenv("FLEETMIND_SHARED_DATA", "data-folder")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///mlflow.db")
    matplotlib.use("Agg")
    before = dict(os.environ)
    nb = nbformat.read(NB, as_version=4)
    with _saved_environ():
        exec(_cell(nb, "setup"), {})
        assert os.environ["FLEETMIND_SHARED_DATA"] != "data-folder"  # the cell did write
        assert os.environ["MLFLOW_TRACKING_URI"] != "sqlite:///mlflow.db"
    assert dict(os.environ) == before
