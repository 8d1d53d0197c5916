"""Which GAT artifact a local path means, and why weights do not fit their config.

* A folder holding several trained models (two ``fleetmind rca train --out runs`` runs) served the
  first by name order without a word; it is now refused with the list, while a folder holding one
  artifact below it (a run folder, an MLflow download: ``model/artifacts/<name>/``) still loads.
* Weights that do not fit ``config.json`` said only ``(Error(s) in loading state_dict for
  GATRanker:)``; the message now carries the first problem torch lists on the next line
  (``torch.nn.Module.load_state_dict``, ``torch/nn/modules/module.py``: the header line, then one
  tab-indented line per missing/unexpected key or size mismatch).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fleetmind.data.errors import ModelLoadError
from fleetmind.rca.gat_analyzer import GATAnalyzer

MODELS = Path(__file__).resolve().parents[1] / "models"


def _artifact(dst: Path, src: Path = MODELS / "rca") -> Path:
    dst.mkdir(parents=True)
    for name in ("config.json", "model.pt"):
        shutil.copy(src / name, dst / name)
    return dst


def test_a_folder_with_several_artifacts_is_refused_with_the_list(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    _artifact(runs / "rca__gat__0__1" / "model")
    _artifact(runs / "rca__gat__1__2" / "model")
    with pytest.raises(ModelLoadError) as err:
        GATAnalyzer.load(runs)
    msg = str(err.value)
    assert msg.startswith(
        f"{runs} holds 2 GAT artifacts (rca__gat__0__1/model, rca__gat__1__2/model)"
    )
    assert "pass the folder of the one to load" in msg
    # one of them, or a folder with exactly one below it, loads as before
    assert GATAnalyzer.load(runs / "rca__gat__1__2").version.startswith("gat-")


def test_an_mlflow_download_layout_with_one_artifact_loads(tmp_path: Path) -> None:
    local = tmp_path / "download"
    _artifact(local / "model" / "artifacts" / "rca")
    (local / "model" / "MLmodel").write_text("flavors: {}\n")
    assert (
        GATAnalyzer.load(local).version
        == json.loads((MODELS / "rca" / "config.json").read_text())["version"]
    )


def test_weights_that_do_not_fit_name_the_first_mismatch(tmp_path: Path) -> None:
    mixed = _artifact(tmp_path / "mixed")
    shutil.copy(MODELS / "rca_hard" / "model.pt", mixed / "model.pt")  # other widths
    with pytest.raises(ModelLoadError) as err:
        GATAnalyzer.load(mixed)
    msg = str(err.value)
    assert (
        "does not fit the model in config.json (Error(s) in loading state_dict for GATRanker: "
        in msg
    )
    tail = msg.split("GATRanker: ", 1)[1]
    assert tail.split()[0] in ("Missing", "Unexpected", "size")  # torch's first listed problem
    assert "\n" not in msg and len(msg) < 500
