"""Run metadata for placement benchmark JSON: machine, package versions, command, commit."""

from __future__ import annotations

import importlib.metadata as md
import os
import platform
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def commit() -> str | None:
    """``git rev-parse HEAD`` of the repository (None outside git); ``+dirty`` if the tree differs."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+dirty" if dirty else "")


def meta(extra_packages: tuple[str, ...] = ()) -> dict:
    """Machine, Python and package versions, the command line and the commit."""
    packages = {}
    for pkg in (
        "numpy",
        "torch",
        "stable-baselines3",
        "sb3-contrib",
        "ray",
        "cma",
        *extra_packages,
    ):
        try:
            packages[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            packages[pkg] = None
    return {
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "packages": packages,
        "command": "python -m benchmarks.placement."
        + " ".join([Path(sys.argv[0]).stem, *sys.argv[1:]])
        if sys.argv and sys.argv[0]
        else None,
        "commit": commit(),
    }
