"""A result's provenance names no commit when ``fleetmind`` and its subpackages come from different
checkouts (``fleetmind.provenance.code_roots``).

Run from a second checkout's root with the first checkout's environment (an editable install, which
maps ``fleetmind.data``, ``fleetmind.serving``, ... to the first checkout's top-level folders,
``package-dir`` in ``pyproject.toml``), ``import fleetmind`` finds the second checkout's
``fleetmind/`` (the current folder is first on ``sys.path`` under ``python -c`` and ``python -m``)
while every subpackage still comes from the first: the JSON named the second checkout's commit for
code that mostly was not its own.
"""

from __future__ import annotations

import importlib.machinery
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fleetmind import provenance

ROOT = Path(__file__).resolve().parents[1]
PROBE = (
    "import json; from fleetmind.provenance import git_commit, code_root; "
    "print(json.dumps({'root': str(code_root()), **git_commit()}))"
)


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.email=t@example.com", "-c", "user.name=t", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()


def test_a_second_checkouts_fleetmind_over_this_ones_subpackages_names_no_commit(
    tmp_path: Path,
) -> None:
    import fleetmind.serving

    if Path(fleetmind.serving.__file__).resolve().parents[1] != ROOT:
        pytest.skip("fleetmind.serving is not mapped from this checkout (not an editable install)")
    if shutil.which("git") is None:
        pytest.skip("no git")
    other = tmp_path / "other"
    shutil.copytree(
        ROOT / "fleetmind", other / "fleetmind", ignore=shutil.ignore_patterns("__pycache__")
    )
    _git(other, "init", "-q", ".")
    _git(other, "add", "-A")
    _git(other, "commit", "-qm", "a second checkout")
    proc = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=other,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "MLFLOW_DISABLE_TELEMETRY": "true"},
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert Path(got["root"]) == other.resolve()  # fleetmind itself is the second checkout's
    assert got["commit"] is None and got["code_modified"] is None, got  # before: its HEAD
    assert got["mixed_checkouts"] == [str(other.resolve()), str(ROOT)]


def test_one_checkout_names_its_commit() -> None:
    got = provenance.git_commit()
    assert "mixed_checkouts" not in got
    assert provenance.code_roots() == [provenance.code_root()]


def test_subpackages_inside_the_package_folder_are_one_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wheel keeps ``fleetmind/data`` inside ``fleetmind/``: one root, the one above it."""
    site = tmp_path / "site-packages"
    pkg = site / "fleetmind"
    for name in provenance.MAPPED_PACKAGES:
        (pkg / name).mkdir(parents=True)
        (pkg / name / "__init__.py").write_text("")
    monkeypatch.setattr(provenance, "__file__", str(pkg / "provenance.py"))

    def find_spec(name: str) -> importlib.machinery.ModuleSpec:
        sub = name.split(".", 1)[1]
        return importlib.machinery.ModuleSpec(
            name, None, origin=str(pkg / sub / "__init__.py"), is_package=True
        )

    monkeypatch.setattr("importlib.util.find_spec", find_spec)
    assert provenance.code_roots() == [site.resolve()]
    # one subpackage from elsewhere (another checkout's serving/): two roots
    elsewhere = tmp_path / "checkout"
    (elsewhere / "serving").mkdir(parents=True)

    def find_spec_mixed(name: str) -> importlib.machinery.ModuleSpec:
        if name == "fleetmind.serving":
            origin = elsewhere / "serving" / "__init__.py"
            return importlib.machinery.ModuleSpec(name, None, origin=str(origin), is_package=True)
        return find_spec(name)

    monkeypatch.setattr("importlib.util.find_spec", find_spec_mixed)
    assert provenance.code_roots() == [site.resolve(), elsewhere.resolve()]
    got = provenance.git_commit()
    assert got["commit"] is None
    assert got["mixed_checkouts"] == [str(site.resolve()), str(elsewhere.resolve())]


def test_cpu_loop_refuses_mixed_checkouts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``benchmarks.serving.cpu_loop`` times "a checkout's code": from two checkouts it would time
    neither, under the first one's name (``repo``). One line, status 2, before any ranking."""
    from benchmarks.serving import cpu_loop
    from fleetmind.cli.runner import run_main

    roots = [tmp_path / "other", ROOT]
    monkeypatch.setattr(cpu_loop, "code_roots", lambda: roots)
    prog = "benchmarks.serving.cpu_loop"
    monkeypatch.setattr(sys, "argv", [prog, "--incidents", "1", "--reps", "1"])
    assert run_main(cpu_loop.main, prog=prog) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith(f"{prog}: error: fleetmind comes from {roots[0]} but some of its")
