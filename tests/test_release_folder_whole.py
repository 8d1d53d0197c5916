"""A ``--release`` replaces the released model folder's whole file set.

``write_folder_whole`` used to carry every file of the old folder that the new files did not
name, so a release over an earlier one kept that release's ``teacher_strand.json``,
``ppo_policy.onnx`` or ``train_summary.json``, and ``sched evaluate --policies teacher --model
<release>`` (``rl.named_policies.teacher_file`` prefers ``teacher_strand.json``) scored the
earlier model's teacher as the new one's. With ``keep`` only the named entries stay; the
placement recipes' releases (fgd, dynamic, the dynamic-mode learners) keep only an operator's
notes (``RELEASE_KEEPS``: ``NOTES.txt``, ``README.md``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fleetmind.data.errors import ModelLoadError
from fleetmind.folders import RELEASE_KEEPS, write_folder_whole
from fleetmind.rl.named_policies import teacher_file
from fleetmind.training.recipes import dynamic, fgd, paired

RELEASE_A = {
    "policy.onnx": b"A-policy",
    "clone.onnx": b"A-clone",
    "teacher.json": '{"who": "A base"}',
    "teacher_strand.json": '{"who": "A strand"}',
    "ppo_policy.onnx": b"A-ppo",
    "train_summary.json": '{"who": "A"}',
}


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _run_folder(root: Path, files: dict[str, bytes | str]) -> Path:
    """A run's exported model folder holding ``files``."""
    root.mkdir(parents=True)
    for name, content in files.items():
        data = content.encode() if isinstance(content, str) else content
        (root / name).write_bytes(data)
    return root


# ------------------------------------------------------------------- write_folder_whole's keep
@pytest.mark.parametrize("in_place", [False, True])
def test_keep_removes_every_other_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, in_place: bool
) -> None:
    """Swapped in (a new folder) and written file by file (the working folder) alike."""
    out = tmp_path / "rel"
    write_folder_whole(out, RELEASE_A)
    (out / "NOTES.txt").write_text("operator's\n")
    (out / "old_dir").mkdir()
    (out / "old_dir" / "x").write_text("x")
    (out / "old_link").symlink_to("policy.onnx")
    if in_place:
        monkeypatch.chdir(out)
    write_folder_whole(out, {"policy.onnx": b"B-policy", "teacher.json": "B"}, keep={"NOTES.txt"})
    monkeypatch.undo()
    assert _snapshot(out) == {
        "NOTES.txt": b"operator's\n",
        "policy.onnx": b"B-policy",
        "teacher.json": b"B",
    }
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".rel.")]


def test_keep_none_still_keeps_every_entry(tmp_path: Path) -> None:
    """The default is unchanged (``rca train --release`` keeps an operator's files)."""
    out = tmp_path / "rel"
    write_folder_whole(out, RELEASE_A)
    write_folder_whole(out, {"policy.onnx": b"B-policy"})
    assert _snapshot(out) == {
        **{k: v.encode() if isinstance(v, str) else v for k, v in RELEASE_A.items()},
        "policy.onnx": b"B-policy",
    }


# ------------------------------------------------------------------- the recipes' releases
def test_fgd_release_over_a_strand_release_leaves_no_stale_teacher(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Release A (a strand teacher) then release B (``--teacher fgd``: no teacher file): the
    folder holds B's files only, and the teacher policy is refused in one line instead of
    scoring A's strand teacher."""
    rel = tmp_path / "models" / "placement"
    monkeypatch.setattr(fgd, "RELEASED_DIR", rel)
    fgd._release(_run_folder(tmp_path / "a" / "model", RELEASE_A), {})
    assert teacher_file(rel).name == "teacher_strand.json"
    (rel / "NOTES.txt").write_text("operator's\n")
    b = {"policy.onnx": b"B-policy", "clone.onnx": b"B-clone", "metadata.json": "{}"}
    summary: dict[str, object] = {}
    fgd._release(_run_folder(tmp_path / "b" / "model", b), summary)
    assert summary["released"] == str(rel)
    want = {k: v.encode() if isinstance(v, str) else v for k, v in b.items()}
    assert _snapshot(rel) == {**want, "NOTES.txt": b"operator's\n"}
    with pytest.raises(ModelLoadError, match="has no teacher.json") as err:
        teacher_file(rel)
    assert "\n" not in str(err.value)


def test_fgd_release_with_a_linear_teacher_is_scored_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Release B with a linear teacher only: its ``teacher.json`` is the teacher, not A's
    ``teacher_strand.json``."""
    rel = tmp_path / "placement"
    monkeypatch.setattr(fgd, "RELEASED_DIR", rel)
    fgd._release(_run_folder(tmp_path / "a", RELEASE_A), {})
    fgd._release(_run_folder(tmp_path / "b", {"policy.onnx": b"B", "teacher.json": "B"}), {})
    assert teacher_file(rel) == rel / "teacher.json"
    assert (rel / "teacher.json").read_text() == "B"


def test_dynamic_release_replaces_the_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rel = tmp_path / "placement-dynamic"
    monkeypatch.setattr(dynamic, "RELEASE_DIR", rel)
    write_folder_whole(rel, {**RELEASE_A, "clone_train_summary.json": "{}", "README.md": "R"})
    model = _run_folder(tmp_path / "b", {"policy.onnx": b"B", "ppo.zip": b"Z"})
    dynamic._release(model, {"run": "B"})
    assert sorted(os.listdir(rel)) == ["README.md", "policy.onnx", "ppo.zip", "train_summary.json"]
    assert json.loads((rel / "train_summary.json").read_text()) == {"run": "B"}


def test_learner_release_replaces_the_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``publish_learner`` (paired, distill, ES, order): ``keep_out`` files are not released and
    no file of the earlier release stays."""
    rel = tmp_path / "placement-dynamic"
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.setattr(paired, "DYNAMIC_RELEASE_DIR", rel)
    monkeypatch.setattr(paired.mlflow, "log_metrics", lambda *a, **k: None)
    monkeypatch.setattr(paired.mlflow, "log_artifacts", lambda *a, **k: None)
    write_folder_whole(rel, RELEASE_A)
    model = _run_folder(tmp_path / "b", {"policy.onnx": b"B", "dataset.npz": b"D"})
    summary: dict[str, object] = {"run": "B"}
    paired.publish_learner(model, summary, 1.0, -1.0, True, keep_out=frozenset({"dataset.npz"}))
    assert sorted(os.listdir(rel)) == ["policy.onnx", "train_summary.json"]
    assert summary["released"] == str(rel)


def test_release_keeps_only_an_operators_notes() -> None:
    assert RELEASE_KEEPS == frozenset({"NOTES.txt", "README.md"})
