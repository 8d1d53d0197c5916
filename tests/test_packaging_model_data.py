"""The wheel's ``fleetmind.models`` package data: every released model file, and nothing a used
checkout leaves next to them (``__pycache__/``, a stray folder)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from fleetmind.data.paths import REPO_ROOT


def _tracked_files() -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, check=True
    ).stdout
    return [name for name in out.decode().split("\0") if name and (REPO_ROOT / name).is_file()]


def test_wheel_ships_exactly_the_tracked_model_files(tmp_path: Path) -> None:
    src = tmp_path / "src"
    tracked = _tracked_files()
    for name in tracked:
        if name.startswith(("benchmarks/results/", "docs/img/", "notebooks/")):
            continue  # not package data, and the bulk of the checkout
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / name, src / name)
    # what a used checkout holds besides the released files (both are git-ignored or untracked)
    (src / "models" / "__pycache__").mkdir(exist_ok=True)
    (src / "models" / "__pycache__" / "__init__.cpython-311.pyc").write_bytes(b"\0")
    (src / "models" / "scratch-run").mkdir()
    (src / "models" / "scratch-run" / "policy.pt").write_bytes(b"\0")
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), "."],
        cwd=src,
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = dist.glob("fleetmind-*.whl")
    shipped = {
        name.removeprefix("fleetmind/")
        for name in zipfile.ZipFile(wheel).namelist()
        if name.startswith("fleetmind/models/")
    }
    expected = {name for name in tracked if name.startswith("models/")}
    assert shipped == expected, (sorted(shipped - expected), sorted(expected - shipped))
