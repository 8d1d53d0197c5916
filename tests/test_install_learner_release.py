"""The dynamic-mode learners (paired, distill, ES, order) in a pip install: ``release=True`` is
refused by the library entry points before training, ``publish_learner`` refuses it too, and
``sched train --release`` prints the ``released`` folder in its JSON line for every ``--algo``.

The wheel layout is simulated as in ``tests/test_install_layout.py``; nothing is trained.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from fleetmind import cli
from fleetmind.data import paths
from fleetmind.data.errors import ConfigError

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")


@pytest.fixture
def wheel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A simulated installed package; returns its released dynamic-mode model folder."""
    pkg = tmp_path / "site-packages" / "fleetmind"
    released = pkg / "models" / "placement-dynamic"
    released.mkdir(parents=True)
    (released / "policy.onnx").write_bytes(b"packaged")
    monkeypatch.setattr(paths, "REPO_ROOT", pkg)
    monkeypatch.setattr(paths, "MODELS_DIR", pkg / "models")
    monkeypatch.chdir(tmp_path)
    return released


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize("algo", ["paired", "distill", "es", "order"])
def test_learner_run_release_in_a_pip_install_is_refused_before_training(
    algo: str, wheel: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fleetmind.training.recipes import distill, es, order, paired, settings

    module = {"paired": paired, "distill": distill, "es": es, "order": order}[algo]
    cls = {
        "paired": settings.PairedArgs,
        "distill": settings.DistillArgs,
        "es": settings.EsArgs,
        "order": settings.OrderArgs,
    }[algo]
    monkeypatch.setattr(module, "DYNAMIC_RELEASE_DIR", wheel)
    monkeypatch.setattr(module, "_check" if algo == "paired" else "check", lambda a: None)

    def trained(*_: object) -> None:
        raise AssertionError("training started")

    monkeypatch.setattr(paired.LearnerRun, "start", trained)
    before = _snapshot(wheel)
    with pytest.raises(ConfigError, match="--release would write into the installed package"):
        module.run(cls(release=True))
    assert _snapshot(wheel) == before


def test_publish_learner_refuses_the_installed_package(
    wheel: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The backstop: a caller that skips ``run`` still cannot write the package's model."""
    from fleetmind.training.recipes import paired

    monkeypatch.setattr(paired, "DYNAMIC_RELEASE_DIR", wheel)
    monkeypatch.setattr(paired.mlflow, "log_metrics", lambda *a, **k: None)
    monkeypatch.setattr(paired.mlflow, "log_artifacts", lambda *a, **k: None)
    model = wheel.parents[3] / "run" / "model"
    model.mkdir(parents=True)
    (model / "policy.onnx").write_bytes(b"new")
    before = _snapshot(wheel)
    summary: dict[str, Any] = {}
    with pytest.raises(ConfigError, match="into the installed package"):
        paired.publish_learner(model, summary, 1.0, -1.0, True)
    assert _snapshot(wheel) == before
    assert "released" not in summary


def test_publish_learner_names_the_resolved_release_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fleetmind.training.recipes import paired

    (tmp_path / "real").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(paired, "DYNAMIC_RELEASE_DIR", Path("real") / ".." / "rel")
    monkeypatch.setattr(paired.mlflow, "log_metrics", lambda *a, **k: None)
    monkeypatch.setattr(paired.mlflow, "log_artifacts", lambda *a, **k: None)
    model = tmp_path / "run"
    model.mkdir()
    (model / "policy.onnx").write_bytes(b"new")
    summary: dict[str, Any] = {}
    paired.publish_learner(model, summary, 1.0, -1.0, True)
    assert summary["released"] == str(tmp_path.resolve() / "rel")


# --- the printed line -------------------------------------------------------------------------------


@pytest.mark.parametrize("algo", ["ppo", "paired", "distill", "es", "order"])
def test_sched_train_release_prints_the_released_folder(
    algo: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every ``--algo`` prints ``released`` in its JSON line when it released (training stubbed;
    the checkout, where ``--release`` is allowed)."""
    from fleetmind.training.recipes import distill, dynamic, es, order, paired

    summary = {"run_id": "r1", "metrics": {"m": 1.0}, "artifact": "a", "released": "/rel"}
    for recipe in (dynamic, paired, distill, es, order):
        monkeypatch.setattr(recipe, "run", lambda a: dict(summary))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    argv = ["sched", "train", "--mode", "dynamic", "--trace", "default", "--release"]
    if algo != "ppo":
        argv += ["--algo", algo]
    else:
        argv += ["--timesteps", "64", "--no-register"]
    assert cli.main([*argv, "--out", "runs"]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("{")]
    assert json.loads(lines[-1]) == summary
