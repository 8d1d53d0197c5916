"""``fleetmind rca petshop --json`` and ``python -m fleetmind.training.rca_ablation`` record the
provenance every result records (:func:`fleetmind.provenance.run_provenance`): ``commit`` and
``code_modified`` of the checkout ``fleetmind`` was imported from (not of the current folder: both
run here from a folder outside the checkout), ``date``, ``machine`` and ``versions``, beside the
keys they wrote before. Each runs with its cheapest options (one method on the PetShop slice; no
variant and no left-out fault type on a toy dataset, so nothing is trained).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from fleetmind.provenance import git_commit

SLICE = Path(__file__).parent / "data" / "petshop_slice"
KEYS = ("command", "commit", "code_modified", "date", "machine", "versions")


def _check(res: dict) -> None:
    for key in KEYS:
        assert key in res, key
    expected = git_commit()
    assert res["commit"] == expected["commit"]
    assert res["code_modified"] == expected["code_modified"]
    assert res["date"].endswith("+00:00")
    assert res["machine"]["platform"] and res["machine"]["python"]
    assert res["machine"]["cpu_count"]
    assert res["versions"]["fleetmind"] is not None and res["versions"]["torch"]


def test_rca_petshop_json_has_run_provenance(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from fleetmind.cli import main

    monkeypatch.chdir(tmp_path)
    out = tmp_path / "petshop.json"
    argv = ["rca", "petshop", "--scenario", str(SLICE), "--split", "test"]
    argv += ["--methods", "propagation", "--json", str(out)]
    monkeypatch.setattr(sys, "argv", ["fleetmind", *argv])
    assert main(argv) == 0
    res = json.loads(out.read_text())
    _check(res)
    assert res["command"] == "fleetmind " + " ".join(argv)
    assert res["n_incidents"] == 3 and set(res["methods"]) == {"propagation"}


def test_rca_ablation_json_has_run_provenance(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from gat_helpers import toy_dataset

    from fleetmind.training.rca_ablation import main

    data = toy_dataset(tmp_path / "toy", n_train=6, n_val=3, n_test=3)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "ablation.json"
    argv = ["--data", str(data), "--json", str(out), "--variants", "--lofo", "--boot", "10"]
    argv += ["--work", str(tmp_path / "work")]
    assert main(argv) == 0
    res = json.loads(out.read_text())
    _check(res)
    assert res["benchmark"] == "rca_gat_ablation"
    assert res["command"].startswith("python -m fleetmind.training.rca_ablation --data ")
    assert res["versions"]["numpy"] and res["versions"]["torch_geometric"]
    assert res["variants"] == {} and res["lofo"] == {}


def test_rca_main_table_example_names_models_that_exist() -> None:
    """The ``Run::`` example of ``benchmarks.rca.main_table`` names each setting's GAT as
    ``NAME=DATA@MODEL``; every ``MODEL`` is a folder of the checkout (the hard-topology model is
    ``models/rca_hard``, not ``models/rca/hard``)."""
    import re

    from benchmarks.provenance import REPO_ROOT
    from benchmarks.rca import main_table

    example = (main_table.__doc__ or "").split("Run::", 1)[1]
    models = re.findall(r"=\S+@(\S+)", example)
    assert len(models) == 2
    for model in models:
        assert (REPO_ROOT / model).is_dir(), model
