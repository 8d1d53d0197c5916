"""What a local GAT artifact folder's weights say at load time.

* The reported version is ``gat-`` plus the first 10 hex digits of the SHA-256 of the ``model.pt``
  bytes actually loaded (as :func:`fleetmind.rca.gat_analyzer.save_artifact` writes it into
  ``config.json``); a ``model.pt`` copied over the served one (a model retrained in place) used to
  keep ``config.json``'s old label while ranking differently. It still serves, with a warning.
* Weights with NaN or inf ranked every node at score 0; they are refused at load
  (``ModelLoadError``: a reload answers 409 and keeps the served model).
* ``heads: 0`` in ``config.json`` failed with a bare ``ZeroDivisionError``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from pathlib import Path

import pytest
import torch
from fastapi.testclient import TestClient

from fleetmind.data.errors import ModelLoadError
from fleetmind.rca.gat_analyzer import GATAnalyzer
from fleetmind.serving.app import create_app
from fleetmind.serving.settings import Settings

REPO = Path(__file__).resolve().parents[1]
RELEASED = REPO / "models" / "rca"


def _copy(tmp_path: Path, name: str = "rca") -> Path:
    out = tmp_path / name
    shutil.copytree(RELEASED, out)
    return out


def _perturb(folder: Path, fill: float | None = None) -> str:
    """Rewrite ``folder/model.pt`` (seeded noise, or every float set to ``fill``); its version."""
    state = torch.load(folder / "model.pt", map_location="cpu", weights_only=True)
    gen = torch.Generator().manual_seed(0)
    for value in state.values():
        if value.is_floating_point():
            if fill is None:
                value.add_(torch.randn(value.shape, generator=gen) * 0.5)
            else:
                value.fill_(fill)
    torch.save(state, folder / "model.pt")
    return "gat-" + hashlib.sha256((folder / "model.pt").read_bytes()).hexdigest()[:10]


def test_version_is_the_loaded_weights_hash(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = _copy(tmp_path)
    label = json.loads((folder / "config.json").read_text())["version"]
    with caplog.at_level(logging.WARNING):
        assert GATAnalyzer.load(folder).version == label  # the released artifact: they agree
    assert not [r for r in caplog.records if "SHA-256" in r.getMessage()]
    new = _perturb(folder)
    assert new != label
    with caplog.at_level(logging.WARNING):
        gat = GATAnalyzer.load(folder)
    assert gat.version == new  # served, under the version of what it runs
    assert [r for r in caplog.records if label in r.getMessage() and new in r.getMessage()]


@pytest.mark.parametrize("fill", [float("nan"), float("inf")])
def test_non_finite_weights_are_refused(tmp_path: Path, fill: float) -> None:
    folder = _copy(tmp_path)
    _perturb(folder, fill)
    with pytest.raises(ModelLoadError, match="non-finite weights"):
        GATAnalyzer.load(folder)


def test_zero_heads_is_a_clear_config_error(tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    meta = json.loads((folder / "config.json").read_text())
    meta["model"]["heads"] = 0
    (folder / "config.json").write_text(json.dumps(meta))
    with pytest.raises(ModelLoadError, match="heads must be >= 1"):
        GATAnalyzer.load(folder)


def test_reload_to_nan_weights_answers_409_and_keeps_the_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    folder = _copy(tmp_path)
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/s.db",
        rca_model=str(folder),
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
    )
    with TestClient(create_app(settings)) as client:
        before = client.get("/api/v1/models").json()["rca"]
        assert before["method"] == "gat"
        _perturb(folder, float("nan"))
        r = client.post("/api/v1/models/reload")
        assert r.status_code == 409, r.text
        assert "non-finite weights" in r.json()["detail"]
        after = client.get("/api/v1/models").json()["rca"]
        assert (after["method"], after["version"]) == ("gat", before["version"])
