"""Input errors that the benchmark modules find themselves keep the command line's error contract
(benchmarks/README.md): one line, ``benchmarks.<area>.<name>: error: <reason>``, status 2.

They left through ``sys.exit(str)`` or ``raise SystemExit(str)``, which Python prints as the bare
message with status 1 (https://docs.python.org/3/library/exceptions.html#SystemExit: "if it is
another type (such as a string), the object's value is printed and the exit status is one").
Each case fails before any simulation or training. A static check keeps a string from reaching
``sys.exit``/``SystemExit`` anywhere under ``benchmarks/``.
"""

from __future__ import annotations

import ast
import importlib
import json
import sys
from pathlib import Path

import pytest

from fleetmind.cli.runner import run_main

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
TEACHER_SEARCH = "benchmarks.experiments.2026-11-29-placement-teacher-search.teacher_search"

# (module, argv, reason); "{tmp}" is an empty folder, "{prev}" an earlier ppo_heldout output,
# "{badruns}" a JSON object whose runs lack a seed
CASES = [
    (
        "benchmarks.placement.ppo_heldout",
        [
            "--traces",
            "cpu050",
            "--seeds",
            "42",
            "--model",
            "{tmp}/missing",
            "--out",
            "{tmp}/a.json",
        ],
        "placement model not found: ",
    ),
    (
        "benchmarks.placement.ppo_heldout",
        ["--traces", "cpu050", "--seeds", "42", "--model", "{tmp}", "--out", "{tmp}/a.json"],
        "has no metadata.json (the model's train_traces)",
    ),
    (
        "benchmarks.placement.ppo_heldout",
        ["--traces", "cpu050", "--seeds", "43", "--heuristics-from", "{prev}"]
        + ["--out", "{tmp}/a.json"],
        "has seeds [42], this run [43]",
    ),
    (
        "benchmarks.placement.ablation",
        ["--recipe", "onlylabel", "--json", "{tmp}/a.json"],
        "--recipe needs a label and at least one model folder",
    ),
    (
        "benchmarks.dynamic.ablation",
        ["--scratch", "onlylabel", "--json", "{tmp}/a.json"],
        "--scratch needs a label and at least one model folder",
    ),
    (
        "benchmarks.placement.failure_causes",
        ["--traces", "nosuchtrace", "--out", "{tmp}/a.json"],
        "unknown openb trace 'nosuchtrace'",
    ),
    (
        TEACHER_SEARCH,
        ["search", "--episode", "bad", "--out", "{tmp}/ts"],
        "--episode wants TRACE:SEED, got 'bad'",
    ),
    # --merge is read before any simulation (the run used to fail only after all of them)
    (
        "benchmarks.dynamic.distill_eval",
        ["--model", "models/placement-dynamic", "--merge", "{tmp}/missing.json"]
        + ["--json", "{tmp}/d.json"],
        "--merge {tmp}/missing.json: cannot read it: No such file or directory",
    ),
    (
        "benchmarks.dynamic.distill_eval",
        ["--model", "models/placement-dynamic", "--merge", "{prev}", "--json", "{tmp}/d.json"],
        "not an output of this script (no 'runs' list)",
    ),
    (
        "benchmarks.dynamic.distill_eval",
        ["--model", "models/placement-dynamic", "--merge", "{badruns}", "--json", "{tmp}/d.json"],
        "runs[0] is not an object with a trace and a seed",
    ),
    (
        "benchmarks.serving.incident_worker",
        ["--alerts", "10"],
        "--alerts must be at least 50 (one webhook)",
    ),
]


@pytest.mark.parametrize(
    ("module", "argv", "reason"),
    CASES,
    ids=[f"{c[0].rsplit('.', 1)[1]}-{i}" for i, c in enumerate(CASES)],
)
def test_an_input_error_is_one_line_with_status_2(
    module: str,
    argv: list[str],
    reason: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    empty = tmp_path / "empty"
    empty.mkdir()
    prev = tmp_path / "prev.json"
    prev.write_text(json.dumps({"seeds": [42], "traces": {"cpu050": {"policies": {}}}}))
    badruns = tmp_path / "badruns.json"
    badruns.write_text(json.dumps({"runs": [{"trace": "frozen-cpu150"}]}))
    args = [a.format(tmp=empty, prev=prev, badruns=badruns) for a in argv]
    reason = reason.format(tmp=empty)
    # a model folder with metadata.json, so --heuristics-from is what is checked
    if "--heuristics-from" in args:
        model = tmp_path / "model"
        model.mkdir()
        (model / "metadata.json").write_text("{}")
        (model / "policy.onnx").write_bytes(b"")
        args += ["--model", str(model)]
    mod = importlib.import_module(module)
    monkeypatch.setattr(sys, "argv", [module, *args])
    try:
        status = run_main(mod.main, prog=module)
    except SystemExit as exit_:  # argparse's usage error (ap.error)
        status = exit_.code  # type: ignore[assignment]
    err = capsys.readouterr().err
    assert status == 2, err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"{module}: error: ") and reason in last, err
    if "usage:" not in err:  # not argparse's usage error: exactly one line
        assert err.count("\n") == 1, err


def _exits_with_text(node: ast.AST) -> bool:
    """A call ``sys.exit(x)`` or ``SystemExit(x)`` whose argument is text (a string, an f-string,
    ``str(...)``) rather than a status."""
    if not isinstance(node, ast.Call) or not node.args:
        return False
    f = node.func
    named = (isinstance(f, ast.Name) and f.id == "SystemExit") or (
        isinstance(f, ast.Attribute)
        and f.attr == "exit"
        and isinstance(f.value, ast.Name)
        and f.value.id == "sys"
    )
    arg = node.args[0]
    text = (
        isinstance(arg, ast.JoinedStr)
        or (isinstance(arg, ast.Constant) and isinstance(arg.value, str))
        or (isinstance(arg, ast.Call) and isinstance(arg.func, ast.Name) and arg.func.id == "str")
    )
    return named and text


def test_no_benchmark_exits_with_a_message() -> None:
    found = [
        f"{p.relative_to(ROOT)}:{node.lineno}"
        for p in sorted(BENCH.rglob("*.py"))
        if "results" not in p.relative_to(BENCH).parts
        for node in ast.walk(ast.parse(p.read_text()))
        if _exits_with_text(node)
    ]
    assert found == [], "raise ConfigError (one line, status 2) instead: " + ", ".join(found)
