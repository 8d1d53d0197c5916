"""The ablation's "clone + short PPO" row reads the PPO stage, never the clone a second time.

Since 2026-12-02 the release's ``policy.onnx`` is a byte copy of ``clone.onnx`` and the PPO stage
is ``ppo_policy.onnx`` (``models/placement/model_card.md``); ``benchmarks/placement/release_audit.py``
already takes ``ppo_policy.onnx`` when the folder has one.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

import benchmarks.placement.ablation as ab  # noqa: E402
from fleetmind.errors import ConfigError  # noqa: E402


class _Captured(Exception):
    pass


def _folder(root: Path, name: str, files: dict[str, bytes], card: str | None = None) -> Path:
    d = root / name
    d.mkdir(parents=True)
    for f, b in files.items():
        (d / f).write_bytes(b)
    if card is not None:
        (d / "model_card.md").write_text(card)
    return d


def _policies_of_row(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, model: Path) -> list[str]:
    """The policies main() would run, with the episodes themselves cut off."""
    (tmp_path / "runs").mkdir(exist_ok=True)
    monkeypatch.setattr(ab, "REPO", tmp_path)
    seen: list[str] = []

    def fake_run_tasks(fn, jobs, **kw):  # noqa: ANN001, ANN003, ARG001
        seen.extend(j[1] for j in jobs)
        raise _Captured

    monkeypatch.setattr(ab, "run_tasks", fake_run_tasks)
    argv = ["ablation", "--set", "heldout", "--traces", "cpu050", "--eval-seeds", "42"]
    argv += ["--rows", "clone + short PPO", "--model", str(model)]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(_Captured):
        ab.main()
    return sorted(set(seen) - {"FGD"})


def test_release_folder_row_uses_ppo_policy(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clone = b"clone-weights"
    d = _folder(
        tmp_path,
        "release",
        {"clone.onnx": clone, "policy.onnx": clone, "ppo_policy.onnx": b"ppo-weights"},
    )
    pols = _policies_of_row(monkeypatch, tmp_path, d)
    assert pols == ["policy:release/ppo_policy.onnx"]


def test_copy_of_clone_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    clone = b"clone-weights"
    d = _folder(tmp_path, "copied", {"clone.onnx": clone, "policy.onnx": clone})
    with pytest.raises(ConfigError, match="byte copy of clone.onnx"):
        _policies_of_row(monkeypatch, tmp_path, d)


def test_run_that_kept_its_clone_is_scored(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # a PPO run whose validation kept step 0 exports the clone as policy.onnx: a real 0.0 row
    clone = b"clone-weights"
    card = "| key | value |\n| --- | --- |\n| best_step | 0 |\n"
    d = _folder(tmp_path, "kept0", {"clone.onnx": clone, "policy.onnx": clone}, card)
    assert _policies_of_row(monkeypatch, tmp_path, d) == ["policy:kept0/policy.onnx"]


def test_ppo_run_folder_uses_policy(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    d = _folder(tmp_path, "ppo", {"clone.onnx": b"clone", "policy.onnx": b"ppo"})
    assert _policies_of_row(monkeypatch, tmp_path, d) == ["policy:ppo/policy.onnx"]
