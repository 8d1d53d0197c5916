"""The benchmarks folder: packages by area run as modules, no ``sys.path`` edits, one provenance
helper, and every file (the dated experiments too) still compiles and imports."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.provenance import AREAS as RESULT_AREAS
from benchmarks.provenance import RESULTS, provenance

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
FILES = sorted(p for p in BENCH.rglob("*.py") if "results" not in p.relative_to(BENCH).parts)
AREAS = ("rca", "placement", "dynamic", "serving")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_every_benchmark_file_compiles() -> None:
    for path in FILES:
        compile(path.read_text(), str(path), "exec")


def test_every_benchmark_module_imports() -> None:
    # the dated experiments are history, not maintained tools, but they must still import
    for path in FILES:
        importlib.import_module(module_name(path))


def test_benchmarks_are_packages_by_area_and_dated_experiments() -> None:
    folders = {p.parent for p in FILES}
    assert all((f / "__init__.py").is_file() for f in folders)
    assert {f.name for f in BENCH.iterdir() if f.is_dir()} >= {*AREAS, "experiments", "results"}
    for f in (BENCH / "experiments").iterdir():
        if f.is_dir() and f.name != "__pycache__":
            assert re.fullmatch(r"\d{4}-\d{2}-\d{2}-[a-z0-9-]+", f.name), f.name
    loose = [p.name for p in BENCH.glob("*.py")]
    assert sorted(loose) == ["__init__.py", "index.py", "provenance.py"]


def test_results_are_filed_by_area() -> None:
    # one folder per benchmark package; nothing lies loose in results/ (benchmarks/README.md)
    assert set(RESULT_AREAS) == set(AREAS)
    loose = sorted(p.name for p in RESULTS.iterdir() if p.is_file())
    assert not loose, loose
    folders = {p.name for p in RESULTS.iterdir() if p.is_dir()}
    assert folders == set(AREAS), folders
    assert all(list((RESULTS / a).glob("*.json")) for a in AREAS)


RELEASED_MODELS = (
    "models/placement/",
    "models/placement-dynamic/",
    "models/rca/",
    "models/rca_hard/",
)


FIXTURE_WEIGHTS = ("tests/data/rca_legacy_gat/",)
"""Weights a test needs as they are: the RCA release of 2026-12-01, which
``tests/test_gat_neighbours.py`` loads to check that an artifact saved before the neighbour
inputs existed still scores as it did (82 KB)."""


def test_git_holds_weights_of_released_models_only() -> None:
    # the runs that results compare keep their model cards in results/, their weights are rebuilt
    # by command (benchmarks/README.md, "Model files kept beside the results")
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    weights = [p for p in out.decode().split("\0") if p.endswith((".onnx", ".pt", ".pth", ".zip"))]
    assert weights, "no model weights tracked at all"
    stray = [p for p in weights if not p.startswith(RELEASED_MODELS + FIXTURE_WEIGHTS)]
    assert not stray, stray
    released = [p for p in weights if not p.startswith(FIXTURE_WEIGHTS)]
    assert {p.rsplit("/", 1)[0] + "/" for p in released} == set(RELEASED_MODELS)
    assert all(any(p.startswith(f) for p in weights) for f in FIXTURE_WEIGHTS)


def test_no_benchmark_or_test_edits_sys_path() -> None:
    for path in [*FILES, *sorted((ROOT / "tests").glob("*.py"))]:
        if path.name == "test_packaging.py":  # removes the checkout to prove the wheel alone works
            continue
        text = path.read_text()
        assert not re.search(r"sys\.path\.(insert|append)", text), path


def test_every_script_that_writes_json_uses_the_provenance_helper() -> None:
    for path in FILES:
        text = path.read_text()
        # rca_workload/ingest_alerts build request bodies; head_search and dynamic_relaxed are former
        # library modules (model files and simulators) that the experiment scripts beside them call
        exempt = ("rca_workload.py", "ingest_alerts.py", "head_search.py", "dynamic_relaxed.py")
        if "json.dumps" in text and path.name not in exempt:
            assert "provenance" in text, f"{path} writes JSON without benchmarks.provenance"


@pytest.mark.parametrize(
    "module",
    [
        "benchmarks.placement.fgd_fidelity",
        "benchmarks.experiments.2026-11-30-serving-queue-model.queue_model",
    ],
)
def test_runs_as_a_module_from_the_checkout_root(module: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", module, "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout


def test_provenance_names_command_commit_date_machine_versions() -> None:
    p = provenance("benchmarks.placement.fgd_fidelity", ["--workers", "2"], load_start=[0.1])
    assert p["command"] == "python -m benchmarks.placement.fgd_fidelity --workers 2"
    assert p["commit"] is None or re.fullmatch(r"[0-9a-f]{40}", p["commit"])
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\+00:00", p["date"])
    assert p["machine"]["loadavg_start"] == [0.1] and p["machine"]["cpu_count"]
    assert p["versions"]["python"] and "torch" in p["versions"] and "numpy" in p["versions"]
    assert RESULTS == BENCH / "results"


def test_every_runnable_script_parses_its_arguments() -> None:
    """``python -m benchmarks.<area>.<script> --help`` prints usage: a script that read
    ``sys.argv`` by hand ran the whole benchmark on ``--help`` and overwrote a committed result
    (or took ``--help`` for a file name)."""
    for path in FILES:
        text = path.read_text()
        if '__name__ == "__main__"' not in text:
            continue
        parses = "ArgumentParser(" in text or "probe_main(" in text
        assert parses, f"{path} runs without an argument parser"


def test_an_edited_script_or_cli_marks_the_code_modified(tmp_path: Path) -> None:
    """A result written by an edited benchmark script, or through an edited CLI, does not come
    from the commit it names; a new result file does not make the code modified."""
    from fleetmind.provenance import git_commit

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    for rel in ("benchmarks/placement/speed.py", "cli/main.py", "rca/model.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x = 1\n")
    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "-qm", "init")
    root = tmp_path.resolve()
    assert git_commit(root)["code_modified"] is False
    (tmp_path / "benchmarks" / "results").mkdir()
    (tmp_path / "benchmarks" / "results" / "new.json").write_text("{}\n")
    assert git_commit(root)["code_modified"] is False
    for rel in ("benchmarks/placement/speed.py", "cli/main.py"):
        (tmp_path / rel).write_text("x = 2\n")
        assert git_commit(root)["code_modified"] is True, rel
        git("checkout", "-q", "--", rel)
