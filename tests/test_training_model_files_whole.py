"""Model folders are written whole: a write that fails midway (a full disk; here a file-size
limit, ``RLIMIT_FSIZE``, setrlimit(2)) leaves the earlier model as it was and loadable.

Covers ``rca fit`` re-fitting into an existing fit folder (``save_fit_artifact``), ``rca
calibrate --write`` (``write_calibration``), ``rca train --release`` (``release``) and the helper
they share, :func:`fleetmind.folders.write_folder_whole`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fleetmind import folders
from fleetmind.folders import write_folder_whole

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
    """An error while writing the second file (``ENOSPC``) leaves the old folder untouched, with
    the atomic exchange and with the two-rename fallback alike."""
    out = tmp_path / "m"
    write_folder_whole(out, {"model.pt": b"old-weights", "config.json": "{}"})
    real = folders._write_new

    def failing(path: Path, content: bytes | str | os.PathLike[str]) -> None:
        if path.name == "config.json":
            path.write_bytes(b"{tru")
            raise OSError(28, "No space left on device")
        real(path, content)

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
