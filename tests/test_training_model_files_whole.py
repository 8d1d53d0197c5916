"""Model folders are written whole: a write that fails midway (a full disk; here a file-size
limit, ``RLIMIT_FSIZE``, setrlimit(2)) leaves the earlier model as it was and loadable.

Covers ``rca fit`` re-fitting into an existing fit folder (``save_fit_artifact``), ``rca
calibrate --write`` (``write_calibration``), ``rca train --release`` (``release``) and the helper
they share, :func:`fleetmind.folders.write_folder_whole`.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from fleetmind import folders
from fleetmind.data.synth_system import make_system
from fleetmind.folders import write_folder_whole
from fleetmind.rca.fit_model import is_fit_artifact
from fleetmind.training.rca_fit import FitArgs, fit

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE is POSIX")

LIMITED = """
import resource, sys
def limit(n):  # Python ignores SIGXFSZ: a write past n bytes raises OSError (EFBIG)
    resource.setrlimit(resource.RLIMIT_FSIZE, (n, n))
"""


def _run_limited(code: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, MLFLOW_DISABLE_TELEMETRY="true")
    return subprocess.run(
        [sys.executable, "-c", LIMITED + code], env=env, capture_output=True, text=True, timeout=300
    )


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _no_leftovers(folder: Path) -> None:
    left = [p.name for p in folder.parent.iterdir() if p.name.startswith(f".{folder.name}.")]
    assert not left, f"temporary folders left beside {folder}: {left}"


FIT = """
import numpy as np, torch
from fleetmind.data.graph import DependencyGraph, GraphNode
from fleetmind.rca.fit_model import NUM_FIT_FEATURES, save_fit_artifact
from fleetmind.rca.model import GATConfig, GATRanker
def fit(path, seed):
    torch.manual_seed(seed)
    cfg = GATConfig(in_dim=NUM_FIT_FEATURES, hidden=8, heads=1, layers=2, fault_types=[],
                    crop_hops=None)
    g = DependencyGraph("g", [GraphNode(id=n, kind="service") for n in "abc"], [])
    return save_fit_artifact(GATRanker(cfg), path, g, np.ones((3, 5), dtype=bool), {"roles": {}})
"""


def test_refit_that_fails_midway_keeps_the_earlier_fit(tmp_path: Path) -> None:
    """Used to write ``model.pt`` in place: a failed re-fit left a truncated ``model.pt`` beside
    the old ``config.json`` (the model no longer loaded)."""
    from fleetmind.rca.fit_model import load_fit_model

    out = tmp_path / "fit"
    before = _run_limited(FIT + f"fit({str(out)!r}, 0)\n")
    assert before.returncode == 0, before.stderr
    _, old_cfg = load_fit_model(out)
    old = _snapshot(out)
    assert len(old["model.pt"]) > 2000
    failed = _run_limited(FIT + f"limit(1000)\nfit({str(out)!r}, 1)\n")
    assert failed.returncode != 0 and "File too large" in failed.stderr, failed.stderr
    assert _snapshot(out) == old
    _, cfg = load_fit_model(out)
    assert cfg["version"] == old_cfg["version"]
    _no_leftovers(out)


def test_calibration_write_that_fails_midway_keeps_config_json(tmp_path: Path) -> None:
    """``rca calibrate --write`` used to rewrite ``config.json`` in place (left truncated)."""
    folder = tmp_path / "gat"
    folder.mkdir()
    meta = {"format": "fleetmind-rca-gat", "version": "gat-x", "pad": ["x" * 50] * 40}
    (folder / "config.json").write_text(json.dumps(meta, indent=2) + "\n")
    old = _snapshot(folder)
    code = (
        "from fleetmind.training.rca_calibrate import write_calibration\n"
        f"limit(200)\nwrite_calibration({str(folder)!r}, None, 'too few incidents')\n"
    )
    failed = _run_limited(code)
    assert failed.returncode != 0 and "File too large" in failed.stderr, failed.stderr
    assert _snapshot(folder) == old
    assert json.loads((folder / "config.json").read_text()) == meta


def _artifact(path: Path, version: str, seed: int) -> dict[str, object]:
    """A run result whose artifact is ``path`` (as in ``tests/test_gat_train.py``)."""
    path.mkdir()
    cfg = {"layers": 3, "hidden": 48, "heads": 4, "edge_dim": 16, "feature_version": 2}
    cfg |= {"in_dim": 131, "fault_types": ["a", "b"], "neighbours": False}
    (path / "config.json").write_text(json.dumps({"version": version, "model": cfg, "data": {}}))
    (path / "model.pt").write_bytes(np.random.default_rng(seed).bytes(5000))
    res: dict[str, object] = {"artifact": str(path), "run_id": "r", "run_name": "n"}
    res |= {"epochs": 1, "fit_seconds": 1.0, "data": {"n_train": 10, "n_val": 2}}
    res["metrics"] = {"val": {"n": 1, "ac@1": 1, "ac@3": 1, "ac@5": 1, "mrr": 1}}
    return res


def test_release_that_fails_midway_keeps_the_earlier_release(tmp_path: Path) -> None:
    """``rca train --release`` used to copy one file at a time: a failure left the new
    ``config.json`` beside a truncated ``model.pt``."""
    from fleetmind.training import rca_train

    rel = tmp_path / "rel"
    rca_train.release(_artifact(tmp_path / "a1", "gat-1", 1), rel, command="c")
    (rel / "NOTES.txt").write_text("kept\n")  # a file of the operator's: kept by a release
    old = _snapshot(rel)
    res2 = _artifact(tmp_path / "a2", "gat-2", 2)
    code = (
        "from fleetmind.training import rca_train\n"
        f"res = {res2!r}\nlimit(1000)\nrca_train.release(res, {str(rel)!r}, command='c')\n"
    )
    failed = _run_limited(code)
    assert failed.returncode != 0 and "File too large" in failed.stderr, failed.stderr
    assert _snapshot(rel) == old
    _no_leftovers(rel)
    rca_train.release(res2, rel, command="c")  # and one that succeeds replaces it
    assert (rel / "model.pt").read_bytes() == (tmp_path / "a2" / "model.pt").read_bytes()
    assert "gat-2" in (rel / "MODEL_CARD.md").read_text()
    assert (rel / "NOTES.txt").read_text() == "kept\n"


# ------------------------------------------------------------------- write_folder_whole itself
def test_write_folder_whole_new_existing_and_kept_files(tmp_path: Path) -> None:
    src = tmp_path / "src.bin"
    src.write_bytes(b"\x00\x01")
    out = tmp_path / "deep" / "model"
    assert write_folder_whole(out, {"a.bin": b"A", "b.txt": "ü", "c.bin": src}) == out
    assert _snapshot(out) == {"a.bin": b"A", "b.txt": "ü".encode(), "c.bin": b"\x00\x01"}
    os.chmod(out, 0o750)
    (out / "extra").mkdir()
    (out / "extra" / "x").write_text("x")
    (out / "link").symlink_to("a.bin")
    write_folder_whole(out, {"a.bin": b"AA"})
    assert (out / "a.bin").read_bytes() == b"AA"
    assert (out / "b.txt").read_text() == "ü" and (out / "extra" / "x").read_text() == "x"
    assert os.readlink(out / "link") == "a.bin"
    assert (out.stat().st_mode & 0o777) == 0o750
    _no_leftovers(out)


def test_write_folder_whole_follows_a_link_to_the_folder(tmp_path: Path) -> None:
    real = tmp_path / "real"
    write_folder_whole(real, {"a": b"1"})
    (tmp_path / "alias").symlink_to(real)
    write_folder_whole(tmp_path / "alias", {"a": b"2"})
    assert (tmp_path / "alias").is_symlink() and (real / "a").read_bytes() == b"2"


def test_write_folder_whole_refuses_a_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(NotADirectoryError):
        write_folder_whole(tmp_path / "f", {"a": b"1"})


@pytest.mark.parametrize("exchange", [True, False])
def test_write_folder_whole_failure_leaves_old_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exchange: bool
) -> None:
    """An error while writing the second file (``ENOSPC``), before any rename, leaves the old
    folder untouched, with the atomic exchange and with the two-rename fallback alike (an error in
    the rename itself: :func:`test_write_folder_whole_failed_swap_leaves_old_folder`)."""
    out = tmp_path / "m"
    write_folder_whole(out, {"model.pt": b"old-weights", "config.json": "{}"})
    real = folders._write_new

    def failing(path: Path, content: bytes | str | os.PathLike[str], *like: object) -> None:
        if path.name == "config.json":
            path.write_bytes(b"{tru")
            raise OSError(28, "No space left on device")
        real(path, content, *like)

    if not exchange:
        monkeypatch.setattr(folders, "_RENAME_EXCHANGE", -1)  # EINVAL: the two renames
    monkeypatch.setattr(folders, "_write_new", failing)
    with pytest.raises(OSError, match="No space left"):
        write_folder_whole(out, {"model.pt": b"new-weights", "config.json": '{"a": 1}'})
    assert _snapshot(out) == {"config.json": b"{}", "model.pt": b"old-weights"}
    _no_leftovers(out)
    monkeypatch.setattr(folders, "_write_new", real)
    write_folder_whole(out, {"model.pt": b"new-weights", "config.json": '{"a": 1}'})
    assert _snapshot(out) == {"config.json": b'{"a": 1}', "model.pt": b"new-weights"}
    _no_leftovers(out)


class _FakeLibc:
    """A libc whose ``renameat2`` fails with ``err`` (as ``ctypes`` reports it), moving nothing."""

    def __init__(self, err: int) -> None:
        self.err = err

    def renameat2(self, *args: object) -> int:
        ctypes.set_errno(self.err)
        return -1


def _refuse_exchange(monkeypatch: pytest.MonkeyPatch, err: int) -> None:
    monkeypatch.setattr(folders.sys, "platform", "linux")
    monkeypatch.setattr(folders.ctypes, "CDLL", lambda *a, **k: _FakeLibc(err))


@pytest.mark.parametrize("exchange", [True, False])
def test_write_folder_whole_failed_swap_leaves_old_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exchange: bool
) -> None:
    """An error in the rename phase itself (``EIO``: the exchange, or the second of the two
    renames, which puts the new folder in place after the old one was moved aside) leaves the old
    folder in place and untouched, and no temporary folder beside it."""
    out = tmp_path / "m"
    write_folder_whole(out, {"model.pt": b"old-weights", "config.json": "{}"})
    if exchange:
        _refuse_exchange(monkeypatch, errno.EIO)
    else:
        monkeypatch.setattr(folders, "_RENAME_EXCHANGE", -1)  # EINVAL: the two renames
        rename = os.rename

        def second_fails(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
            if Path(src).name.endswith(".tmp"):  # the new folder, moved into place
                raise OSError(errno.EIO, os.strerror(errno.EIO))
            rename(src, dst)

        monkeypatch.setattr(os, "rename", second_fails)
    with pytest.raises(OSError) as err:
        write_folder_whole(out, {"model.pt": b"new-weights", "config.json": '{"a": 1}'})
    assert err.value.errno == errno.EIO
    monkeypatch.undo()
    assert _snapshot(out) == {"config.json": b"{}", "model.pt": b"old-weights"}
    _no_leftovers(out)


@pytest.mark.parametrize("err", [errno.EXDEV, errno.EPERM, errno.EBUSY])
def test_write_folder_whole_writes_in_place_where_folders_cannot_be_renamed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, err: int
) -> None:
    """overlayfs without ``redirect_dir`` answers ``EXDEV`` to the exchange and to a plain rename
    of a folder of an image's lower layer (kernel ``Documentation/filesystems/overlayfs.rst``,
    "Renaming directories"); a seccomp filter answers ``EPERM``, a mount point ``EBUSY``. The
    folder is then written file by file (each whole) rather than not at all."""
    out = tmp_path / "m"
    write_folder_whole(out, {"model.pt": b"old-weights", "NOTES.txt": "kept"})
    _refuse_exchange(monkeypatch, err)
    rename = os.rename

    def refused(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        if Path(src).is_dir():
            raise OSError(err, os.strerror(err))
        rename(src, dst)

    monkeypatch.setattr(os, "rename", refused)
    write_folder_whole(out, {"model.pt": b"new-weights", "config.json": "{}"})
    monkeypatch.undo()
    assert _snapshot(out) == {
        "NOTES.txt": b"kept",
        "config.json": b"{}",
        "model.pt": b"new-weights",
    }
    _no_leftovers(out)
    assert not [p for p in out.iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize("inside", ["", "sub"])
def test_write_folder_whole_of_the_working_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inside: str
) -> None:
    """A swap would leave the process in the removed old folder (``os.getcwd()`` fails, relative
    paths no longer resolve): the working folder, or one above it, is written file by file."""
    out = tmp_path / "m"
    write_folder_whole(out, {"model.pt": b"old-weights", "NOTES.txt": "kept"})
    (out / "sub").mkdir()
    monkeypatch.chdir(out / inside)
    write_folder_whole("." if not inside else "..", {"model.pt": b"new-weights"})
    assert os.getcwd() == str((out / inside).resolve())
    here = Path("." if not inside else "..")
    assert (here / "model.pt").read_bytes() == b"new-weights"
    assert (here / "NOTES.txt").read_text() == "kept"
    monkeypatch.undo()
    _no_leftovers(out)


def test_rca_fit_out_of_the_working_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``rca fit --out .`` used to end "not a fitted RCA model ... No such file" after writing the
    model: the swap removed the working folder, and the model was read back through it."""
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    make_system(tmp_path / "shop", n_services=12, normal_rows=240, issues=1, seed=3)
    (tmp_path / "m").mkdir()
    monkeypatch.chdir(tmp_path / "m")
    res = fit(FitArgs(scenario=str(tmp_path / "shop"), out=".", incidents=60, epochs=1, seed=0))
    assert res["out"] == "." and res["version"]
    assert os.getcwd() == str((tmp_path / "m").resolve()) and is_fit_artifact(".")


def test_rewritten_files_keep_their_bits_whatever_the_umask(tmp_path: Path) -> None:
    """A re-release under ``umask 077`` used to turn ``0644`` model files into ``0600`` (a service
    reading the models as another user could no longer read them); a new file follows the umask.
    Run as root, the old file's owner and group are kept too."""
    out = tmp_path / "m"
    write_folder_whole(out, {"model.pt": b"old-weights"})
    os.chmod(out / "model.pt", 0o644)
    owner = (12345, 12346) if os.geteuid() == 0 else None
    if owner:
        os.chown(out / "model.pt", *owner)
    before = os.umask(0o077)
    try:
        write_folder_whole(out, {"model.pt": b"new-weights", "config.json": "{}"})
    finally:
        os.umask(before)
    st = (out / "model.pt").stat()
    assert (out / "model.pt").read_bytes() == b"new-weights"
    assert st.st_mode & 0o7777 == 0o644
    assert (out / "config.json").stat().st_mode & 0o7777 == 0o600
    if owner:
        assert (st.st_uid, st.st_gid) == owner


def test_stale_temporary_folders_of_dead_writers_are_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write stopped by a crash leaves its new (``.tmp``) or old (``.old``) folder beside the
    model; the next write removes those of processes no longer running once they are older than
    :data:`~fleetmind.folders.STALE_AFTER_S` (by mtime and ctime: a rename sets ctime only, so a
    folder set aside a moment ago is young whatever its mtime), and only those."""
    out = tmp_path / "m"
    write_folder_whole(out, {"a": b"1"})
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], text=True,
                          capture_output=True, check=True)  # fmt: skip
    pid = int(dead.stdout)
    stale = [tmp_path / f".m.{pid}.0123abcd.tmp", tmp_path / f".m.{pid}.89abcdef.old"]
    kept = [
        tmp_path / f".m.{os.getppid()}.0123abcd.tmp",  # a running process's
        tmp_path / f".mm.{pid}.0123abcd.tmp",  # another folder's
        tmp_path / f".m.{pid}.0123abcd.bak",  # not one of ours
    ]
    for p in [*stale, *kept]:
        p.mkdir()
        (p / "x").write_text("x")
        long_ago = time.time() - 10 * folders.STALE_AFTER_S
        os.utime(p, (long_ago, long_ago))  # an old mtime, as a folder set aside keeps its own
    # young by ctime (just made): perhaps another PID namespace's writer, still at work
    write_folder_whole(out, {"a": b"2"})
    assert all(p.is_dir() for p in [*stale, *kept])
    later = time.time() + folders.STALE_AFTER_S + 60
    monkeypatch.setattr(folders, "time", SimpleNamespace(time=lambda: later))
    write_folder_whole(out, {"a": b"3"})
    assert [p for p in stale if p.exists()] == []
    assert all(p.is_dir() for p in kept)


RELEASE = """
import json, mlflow
from pathlib import Path
from fleetmind.training.recipes import dynamic, paired
def release(how, model_dir, rel):
    model_dir, rel = Path(model_dir), Path(rel)
    if how == "dynamic":
        dynamic.RELEASE_DIR = rel
        dynamic._release(model_dir, {"run_name": "r"})
    else:
        paired.DYNAMIC_RELEASE_DIR = rel
        mlflow.log_metrics = mlflow.log_artifacts = lambda *a, **k: None
        paired.publish_learner(model_dir, {"run_name": "r"}, 1.0, 2.0, True,
                               keep_out=frozenset({"skip.bin"}))
"""


def _learner_output(folder: Path, seed: int) -> Path:
    folder.mkdir()
    rng = np.random.default_rng(seed)
    (folder / "metadata.json").write_text(json.dumps({"seed": seed}))
    (folder / "policy.onnx").write_bytes(rng.bytes(800))
    (folder / "policy.pt").write_bytes(rng.bytes(5000))
    (folder / "skip.bin").write_bytes(b"not released")
    return folder


@pytest.mark.parametrize("how", ["dynamic", "paired"])
def test_dynamic_release_that_fails_midway_keeps_the_earlier_release(
    tmp_path: Path, how: str
) -> None:
    """The dynamic-mode releases (``sched train --mode dynamic --release``: ``_release``; the
    learners' ``publish_learner``) used to copy one file at a time into
    ``models/placement-dynamic/``: a failure left new files beside a truncated ``policy.pt``."""
    rel = tmp_path / "rel"
    first = _learner_output(tmp_path / "a1", 1)
    done = _run_limited(RELEASE + f"release({how!r}, {str(first)!r}, {str(rel)!r})\n")
    assert done.returncode == 0, done.stderr
    (rel / "NOTES.txt").write_text("kept\n")
    old = _snapshot(rel)
    names = {"metadata.json", "policy.onnx", "policy.pt", "train_summary.json", "NOTES.txt"}
    names |= {"skip.bin"} if how == "dynamic" else set()  # only the learners have a keep_out
    assert set(old) == names and old["policy.pt"] == (first / "policy.pt").read_bytes()
    second = _learner_output(tmp_path / "a2", 2)
    code = RELEASE + f"limit(1000)\nrelease({how!r}, {str(second)!r}, {str(rel)!r})\n"
    failed = _run_limited(code)
    assert failed.returncode != 0 and "File too large" in failed.stderr, failed.stderr
    assert _snapshot(rel) == old
    _no_leftovers(rel)
    done = _run_limited(RELEASE + f"release({how!r}, {str(second)!r}, {str(rel)!r})\n")
    assert done.returncode == 0, done.stderr
    new = _snapshot(rel)
    assert set(new) == names and new["NOTES.txt"] == b"kept\n"
    for name in ("metadata.json", "policy.onnx", "policy.pt"):
        assert new[name] == (second / name).read_bytes()
    summary = json.loads(new["train_summary.json"])
    assert summary == {"run_name": "r"}


def test_in_place_writes_stage_every_file_before_renaming_any(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The working folder is written file by file; a write that fails on the second file (a full
    disk) leaves every old file, not a new ``model.pt`` beside the old ``config.json``."""
    out = tmp_path / "m"
    out.mkdir()
    (out / "model.pt").write_bytes(b"old-model")
    (out / "config.json").write_text("old-config")
    staged = folders._staged_file
    calls = []

    def full_disk_on_the_second(path: Path, content: object) -> str:
        calls.append(path.name)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return staged(path, content)

    monkeypatch.setattr(folders, "_staged_file", full_disk_on_the_second)
    monkeypatch.chdir(out)
    with pytest.raises(OSError, match="No space"):
        write_folder_whole(out, {"model.pt": b"new-model", "config.json": "new-config"})
    assert (out / "model.pt").read_bytes() == b"old-model"
    assert (out / "config.json").read_text() == "old-config"
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.pt"]  # no temp file


@pytest.mark.parametrize("in_place", [False, True])
def test_a_link_in_the_old_folder_gives_the_new_file_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, in_place: bool
) -> None:
    out = tmp_path / "m"
    out.mkdir()
    secret = tmp_path / "secret"
    secret.write_text("s")
    os.chmod(secret, 0o4750)
    (out / "a").symlink_to(secret)
    if in_place:
        monkeypatch.chdir(out)
    old_umask = os.umask(0o022)
    try:
        write_folder_whole(out, {"a": b"new"})
    finally:
        os.umask(old_umask)
    st = os.lstat(out / "a")
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o644
    assert stat.S_IMODE(os.stat(secret).st_mode) == 0o4750  # the link's target untouched


@pytest.mark.parametrize("in_place", [False, True])
def test_new_content_is_never_more_readable_than_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, in_place: bool
) -> None:
    """Made ``0600`` and given the old bits only after the write: other users cannot read the new
    content while it is written (it was ``0666`` less the umask, or the old bits in place)."""
    out = tmp_path / "m"
    out.mkdir()
    (out / "model.pt").write_bytes(b"old")
    os.chmod(out / "model.pt", 0o644)  # made 0600 while written, whatever the old bits
    seen = []
    same = folders._same_owner_and_bits

    def record(fd: int, like: os.stat_result) -> None:
        seen.append(stat.S_IMODE(os.fstat(fd).st_mode))
        same(fd, like)

    monkeypatch.setattr(folders, "_same_owner_and_bits", record)
    if in_place:
        monkeypatch.chdir(out)
    old_umask = os.umask(0o022)
    try:
        write_folder_whole(out, {"model.pt": b"secret"})
    finally:
        os.umask(old_umask)
    assert seen == [0o600]
    assert stat.S_IMODE(os.stat(out / "model.pt").st_mode) == 0o644  # then the old bits


def test_set_id_bits_are_kept_only_with_the_owner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A set-user-ID file of the writer's own keeps the bit; one whose owner cannot be given back
    (a chown refused: ``EPERM``, or ``EINVAL`` for an owner a user namespace cannot map) loses
    set-user-ID and set-group-ID, as GNU ``cp -p`` does (coreutils ``copy.c``), and the write
    still succeeds."""
    out = tmp_path / "m"
    out.mkdir()
    (out / "own").write_bytes(b"old")
    os.chmod(out / "own", 0o4755)
    write_folder_whole(out, {"own": b"new"})
    assert stat.S_IMODE(os.stat(out / "own").st_mode) == 0o4755
    foreign = out / "foreign"
    foreign.write_bytes(b"old")
    os.chmod(foreign, 0o6755)
    uid = os.getuid()
    like = os.stat(foreign)
    fake = os.stat_result((like.st_mode, *like[1:4], uid + 1, like.st_gid + 1, *like[6:]))

    def refuse(*_: object) -> None:
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(folders, "_old_file", lambda path: fake if path.name == "foreign" else None)
    monkeypatch.setattr(folders.os, "fchown", refuse)
    write_folder_whole(out, {"foreign": b"new"})
    assert (out / "foreign").read_bytes() == b"new"
    assert stat.S_IMODE(os.stat(out / "foreign").st_mode) == 0o755
