"""A benchmark's progress bars stay off its log file: a benchmark run into a log (``python -m
benchmarks.rca.main_table > log 2>&1``) got dozens of ``\\r`` frames per bar, since a library
function's explicit ``progress=True`` draws wherever stderr goes (:mod:`fleetmind.progress`). The
benchmarks pass ``progress=show_bar()`` to those functions, as the CLI handlers do, which is true
on a terminal only (the other ``progress`` options, ``rca_fit.fit``'s, draw on a terminal only
themselves). Read with :mod:`ast` so that a violation names the file and line."""

from __future__ import annotations

import ast
from pathlib import Path

from fleetmind.data.paths import REPO_ROOT

DRAW_ANYWHERE = frozenset(
    {"evaluate_fgd", "evaluate_methods", "evaluate_scenario", "fit_calibration"}
)
"""The library functions whose ``progress=True`` draws wherever stderr goes
(:mod:`fleetmind.progress`)."""


def _name(func: ast.expr) -> str:
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _progress_true_calls(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [
        f"{path.relative_to(REPO_ROOT)}:{kw.value.lineno}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and _name(node.func) in DRAW_ANYWHERE
        for kw in node.keywords
        if kw.arg == "progress" and isinstance(kw.value, ast.Constant) and kw.value.value is True
    ]


def test_no_benchmark_passes_a_literal_progress_true() -> None:
    files = sorted((REPO_ROOT / "benchmarks").rglob("*.py"))
    assert files, "no benchmark sources found"
    bad = [where for path in files for where in _progress_true_calls(path)]
    assert not bad, "pass progress=show_bar() (fleetmind.progress) instead:\n" + "\n".join(bad)
