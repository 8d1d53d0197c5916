"""A ``--release`` replaces the released model folder's whole file set.

``write_folder_whole`` used to carry every file of the old folder that the new files did not
name, so a release over an earlier one kept that release's ``teacher_strand.json``,
``ppo_policy.onnx`` or ``train_summary.json``, and ``sched evaluate --policies teacher --model
<release>`` (``rl.named_policies.teacher_file`` prefers ``teacher_strand.json``) scored the
earlier model's teacher as the new one's. With ``remove`` the named regular files and links
the new files do not name are removed; the placement recipes' releases (fgd, dynamic, the
dynamic-mode learners) remove the earlier release's model files (``RELEASE_MODEL_FILES``) and
keep every other entry: a release run from inside the release folder keeps its own ``runs/``,
``mlflow.db`` and ``mlartifacts/``, a mount point keeps its ``lost+found``, and a removal that
fails half way leaves the old file set or the new one, never a mix.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fleetmind import folders
from fleetmind.data.errors import ModelLoadError
from fleetmind.folders import RELEASE_MODEL_FILES, write_folder_whole
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


# ------------------------------------------------------------------- write_folder_whole's remove
@pytest.mark.parametrize("in_place", [False, True])
def test_remove_removes_only_the_named_files_and_links(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, in_place: bool
) -> None:
    """Swapped in (a new folder) and written file by file (the working folder) alike: a folder
    is never removed, even one with a model file's name, nor an entry ``remove`` does not name."""
    out = tmp_path / "rel"
    write_folder_whole(out, RELEASE_A)
    (out / "NOTES.txt").write_text("operator's\n")
    (out / "old_dir").mkdir()
    (out / "old_dir" / "x").write_text("x")
    (out / "clone.pt").mkdir()  # a folder under a model file's name stays
    (out / "final.onnx").symlink_to("policy.onnx")  # a link under a model file's name goes
    if in_place:
        monkeypatch.chdir(out)
    write_folder_whole(
        out, {"policy.onnx": b"B-policy", "teacher.json": "B"}, remove=RELEASE_MODEL_FILES
    )
    monkeypatch.undo()
    assert sorted(os.listdir(out)) == [
        "NOTES.txt",
        "clone.pt",
        "old_dir",
        "policy.onnx",
        "teacher.json",
    ]
    assert (out / "policy.onnx").read_bytes() == b"B-policy"
    assert (out / "old_dir" / "x").read_text() == "x"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".rel.")]


def test_remove_default_keeps_every_entry(tmp_path: Path) -> None:
    """The default is unchanged (``rca train --release`` keeps an operator's files)."""
    out = tmp_path / "rel"
    write_folder_whole(out, RELEASE_A)
    write_folder_whole(out, {"policy.onnx": b"B-policy"})
    assert _snapshot(out) == {
        **{k: v.encode() if isinstance(v, str) else v for k, v in RELEASE_A.items()},
        "policy.onnx": b"B-policy",
    }


def test_release_run_from_inside_the_release_folder_keeps_its_own_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``sched train --release`` run with the release folder as the working folder: the
    recipe's relative defaults (``--out runs/ppo``, MLflow's ``mlflow.db`` and ``mlartifacts/``)
    lie inside it, and the release must not remove them (it used to remove every entry but an
    operator's notes)."""
    rel = tmp_path / "models" / "placement"
    monkeypatch.setattr(fgd, "RELEASED_DIR", rel)
    write_folder_whole(rel, RELEASE_A)
    monkeypatch.chdir(rel)
    run = _run_folder(rel / "runs" / "ppo" / "r1" / "model", {"policy.onnx": b"B"})
    (rel / "runs" / "ppo" / "r1" / "checkpoints").mkdir()
    (rel / "mlflow.db").write_bytes(b"registry")
    (rel / "mlartifacts" / "1").mkdir(parents=True)
    fgd._release(run, {})
    monkeypatch.undo()
    assert sorted(os.listdir(rel)) == ["mlartifacts", "mlflow.db", "policy.onnx", "runs"]
    assert (run / "policy.onnx").read_bytes() == b"B"
    assert (rel / "mlflow.db").read_bytes() == b"registry"


def _in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every folder one written file by file (what a mount point gets)."""
    monkeypatch.setattr(folders, "_in_place", lambda target, st: True)


def test_mount_point_release_keeps_lost_and_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A release folder that is a mount point keeps its ``lost+found`` (a root-owned folder a
    non-root writer could not remove: the release used to fail half way)."""
    rel = tmp_path / "placement"
    write_folder_whole(rel, RELEASE_A)
    (rel / "lost+found").mkdir()
    _in_place(monkeypatch)
    write_folder_whole(
        rel, {"policy.onnx": b"B", "metadata.json": "{}"}, remove=RELEASE_MODEL_FILES
    )
    assert sorted(os.listdir(rel)) == ["lost+found", "metadata.json", "policy.onnx"]


def test_in_place_release_whose_deletes_fail_leaves_the_new_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deleting the earlier model's files fails (``PermissionError``): the new files are in and
    no earlier model file is left under its name (only hidden set-aside copies no loader reads)."""
    rel = tmp_path / "placement"
    write_folder_whole(rel, RELEASE_A)
    _in_place(monkeypatch)

    def refuse(path: object, *a: object, **k: object) -> None:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(os, "unlink", refuse)
    write_folder_whole(rel, {"policy.onnx": b"B", "teacher.json": "B"}, remove=RELEASE_MODEL_FILES)
    monkeypatch.undo()
    visible = sorted(n for n in os.listdir(rel) if not n.startswith("."))
    assert visible == ["policy.onnx", "teacher.json"]
    assert (rel / "policy.onnx").read_bytes() == b"B"
    assert all(n.endswith(".old") for n in os.listdir(rel) if n.startswith("."))


def test_in_place_release_whose_set_aside_fails_leaves_the_old_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Setting an earlier model file aside fails half way (``PermissionError`` on the second
    one): the files moved are put back and no new file is renamed in: the old set as it was."""
    rel = tmp_path / "placement"
    write_folder_whole(rel, RELEASE_A)
    before = _snapshot(rel)
    _in_place(monkeypatch)
    real_rename = os.rename
    calls: list[str] = []

    def rename(src: str, dst: str) -> None:
        if str(dst).endswith(".old"):
            calls.append(str(src))
            if len(calls) == 2:
                raise PermissionError(13, "Permission denied", str(src))
        real_rename(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(PermissionError):
        write_folder_whole(rel, {"policy.onnx": b"B"}, remove=RELEASE_MODEL_FILES)
    monkeypatch.undo()
    assert len(calls) == 2
    assert _snapshot(rel) == before


def _replace_failing_on(monkeypatch: pytest.MonkeyPatch, nth: int) -> list[str]:
    """Make the ``nth`` ``os.replace`` fail with ``EBUSY`` (a bind-mounted file); returns the
    destinations of the calls."""
    real_replace = os.replace
    calls: list[str] = []

    def replace(src: str, dst: str) -> None:
        calls.append(str(dst))
        if len(calls) == nth:
            raise OSError(16, "Device or resource busy", str(dst))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    return calls


def test_in_place_release_whose_first_rename_in_fails_leaves_the_old_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first new file cannot be renamed in (``EBUSY``): the earlier model's files set aside
    are put back, so the old release keeps its teacher; a later write carries no hidden copy."""
    rel = tmp_path / "placement"
    write_folder_whole(rel, RELEASE_A)
    before = _snapshot(rel)
    _in_place(monkeypatch)
    calls = _replace_failing_on(monkeypatch, 1)
    with pytest.raises(OSError, match="busy"):
        write_folder_whole(
            rel, {"policy.onnx": b"B", "teacher.json": "B"}, remove=RELEASE_MODEL_FILES
        )
    monkeypatch.undo()
    assert len(calls) == 1
    assert _snapshot(rel) == before
    assert teacher_file(rel).name == "teacher_strand.json"


def test_in_place_release_whose_second_rename_in_fails_leaves_no_hidden_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second new file cannot be renamed in: the first one is in, the earlier model's files
    set aside are deleted (as on success), and a later swap write carries no hidden copy."""
    rel = tmp_path / "placement"
    write_folder_whole(rel, RELEASE_A)
    _in_place(monkeypatch)
    _replace_failing_on(monkeypatch, 2)
    with pytest.raises(OSError, match="busy"):
        write_folder_whole(
            rel, {"policy.onnx": b"B", "metadata.json": "{}"}, remove=RELEASE_MODEL_FILES
        )
    monkeypatch.undo()
    assert sorted(os.listdir(rel)) == ["policy.onnx"]
    assert (rel / "policy.onnx").read_bytes() == b"B"
    write_folder_whole(rel, {"policy.onnx": b"C"}, remove=RELEASE_MODEL_FILES)
    assert sorted(os.listdir(rel)) == ["policy.onnx"]


def test_set_aside_files_are_not_carried_and_a_dead_writers_are_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file set aside by a file-by-file write (``.<name>.<pid>.<hex>.old``) is never carried
    into a new folder; one a dead writer left is removed at the start of a write, one of a
    running writer (this process) is kept."""
    rel = tmp_path / "placement"
    write_folder_whole(rel, RELEASE_A)
    dead, live = 2**22 + 1, os.getpid()  # above Linux's pid_max default: no such process
    assert not folders.pid_running(dead)
    (rel / f".teacher_strand.json.{dead}.0123abcd.old").write_text("A strand")
    (rel / f".teacher.json.{live}.0123abcd.old").write_text("A base")
    monkeypatch.setattr(folders, "STALE_AFTER_S", -1.0)  # no waiting an hour
    write_folder_whole(rel, {"policy.onnx": b"B"}, remove=RELEASE_MODEL_FILES)
    assert sorted(os.listdir(rel)) == ["policy.onnx"]  # swapped: the live one not carried
    _in_place(monkeypatch)
    (rel / f".teacher_strand.json.{dead}.0123abcd.old").write_text("A strand")
    (rel / f".teacher.json.{live}.0123abcd.old").write_text("A base")
    write_folder_whole(rel, {"policy.onnx": b"C"}, remove=RELEASE_MODEL_FILES)
    assert sorted(os.listdir(rel)) == [f".teacher.json.{live}.0123abcd.old", "policy.onnx"]


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


def test_release_model_files_name_what_the_recipes_release() -> None:
    """Every file of the shipped releases is a model file (and nothing an operator or a run's
    output folder would hold)."""
    from fleetmind.data.paths import REPO_ROOT

    for folder in ("models/placement", "models/placement-dynamic"):
        path = REPO_ROOT / folder
        if path.is_dir():
            assert {p.name for p in path.iterdir() if p.is_file()} <= RELEASE_MODEL_FILES
    assert not RELEASE_MODEL_FILES & {"NOTES.txt", "README.md", "mlflow.db", "runs", "lost+found"}
