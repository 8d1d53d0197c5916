"""A fitted model (``rca fit``) of an earlier fit format is refused in one line.

Models fitted before the 2026-12-02 petshop detector and synthetic incidents, or before the
2026-12-06 metric-role changes (``http_requests_total{code="500"}`` moved from traffic to errors,
which changes the ``observed`` roles stored in ``config.json`` and each alert's role), had the
same feature names and ``format_version`` 1: they loaded without a word and ranked differently.
``FIT_FORMAT_VERSION`` is now 2 and anything else is refused with "refit with `rca fit`".
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from fleetmind.data.graph import DependencyGraph, GraphNode
from fleetmind.data.metric_roles import metric_role
from fleetmind.rca.fit_model import (
    FIT_FORMAT_VERSION,
    NUM_FIT_FEATURES,
    FitModelError,
    FittedGATAnalyzer,
    load_fit_model,
    save_fit_artifact,
)
from fleetmind.rca.model import GATConfig, GATRanker


@pytest.fixture
def fitted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A tiny fitted model written by today's code."""
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    torch.manual_seed(0)
    cfg = GATConfig(
        in_dim=NUM_FIT_FEATURES, hidden=8, heads=1, layers=2, fault_types=[], crop_hops=None
    )
    g = DependencyGraph("g", [GraphNode(id=n, kind="service") for n in "abc"], [])
    observed = np.zeros((3, 5), dtype=bool)
    return save_fit_artifact(GATRanker(cfg), tmp_path / "fit", g, observed, {"roles": {}})


def test_roles_changed_since_version_1() -> None:
    """Why version 1 models cannot be trusted: a 5xx count is an error count now."""
    assert metric_role('http_requests_total{code="500"}') == "errors"


def test_the_current_version_loads(fitted: Path) -> None:
    model, meta = load_fit_model(fitted)
    assert meta["format_version"] == FIT_FORMAT_VERSION == 2
    assert FittedGATAnalyzer.load(fitted).version == meta["version"]
    assert not model.training


@pytest.mark.parametrize("version", [1, None, 3])
def test_another_version_is_refused_in_one_line(fitted: Path, version: int | None) -> None:
    cfg_path = fitted / "config.json"
    meta = json.loads(cfg_path.read_text())
    if version is None:
        del meta["format_version"]
    else:
        meta["format_version"] = version
    cfg_path.write_text(json.dumps(meta))
    with pytest.raises(FitModelError, match="refit with `rca fit`") as err:
        load_fit_model(fitted)
    assert "\n" not in str(err.value)
    assert f"fit format version {version!r}" in str(err.value)


@pytest.mark.parametrize("change", ["drop_last", "rename", "missing"])
def test_a_different_feature_list_is_refused_as_such(fitted: Path, change: str) -> None:
    """A model of this fit format version whose feature list differs: the refusal says so
    instead of naming a version that is the same as this one's."""
    cfg_path = fitted / "config.json"
    meta = json.loads(cfg_path.read_text())
    if change == "drop_last":
        meta["features"] = meta["features"][:-1]
    elif change == "rename":
        meta["features"] = ["renamed", *meta["features"][1:]]
    else:
        del meta["features"]
    cfg_path.write_text(json.dumps(meta))
    with pytest.raises(FitModelError, match="refit with `rca fit`") as err:
        load_fit_model(fitted)
    msg = str(err.value)
    assert "\n" not in msg
    assert "its feature list differs from this version's" in msg
    assert "fit format version" not in msg
