"""The benchmark modules keep the command line's error contract (:mod:`fleetmind.errors`,
:mod:`fleetmind.cli.runner`): a bad option or a bad input file is a one-line error,
``<prog>: error: <reason>``, with exit status 2, never a traceback.

Each case calls the module's ``main`` in-process through :func:`fleetmind.cli.runner.run_main`,
as its ``__main__`` block does, with options that fail before any real work. A count option out of
range is argparse's own usage error (status 2, the usage then one ``<module>: error:`` line); an
error the module finds (a :class:`fleetmind.errors.FleetMindError`, a path it cannot write) is exactly one
line. A static check makes every module under ``benchmarks/`` with a ``__main__`` block go through
``run_main``, so new benchmarks keep the contract.
"""

from __future__ import annotations

import ast
import errno
import importlib
import sys
from pathlib import Path

import pytest

from fleetmind.argtypes import nonnegative_int, positive_int
from fleetmind.cli.runner import run_main
from fleetmind.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def _main_block(tree: ast.Module) -> ast.If | None:
    for node in tree.body:
        if (
            isinstance(node, ast.If)
            and isinstance(node.test, ast.Compare)
            and isinstance(node.test.left, ast.Name)
            and node.test.left.id == "__name__"
        ):
            return node
    return None


ENTRY_POINTS = sorted(
    p
    for p in BENCH.rglob("*.py")
    if "results" not in p.relative_to(BENCH).parts and _main_block(ast.parse(p.read_text()))
)


def test_every_benchmark_entry_point_uses_run_main() -> None:
    assert len(ENTRY_POINTS) > 40  # the areas' modules and the dated experiments
    for path in ENTRY_POINTS:
        block = _main_block(ast.parse(path.read_text()))
        calls = [
            node
            for node in ast.walk(block)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "run_main"
        ]
        assert calls, f"{path.relative_to(ROOT)}: __main__ does not go through run_main"
        progs = [k.value.value for k in calls[0].keywords if k.arg == "prog"]
        assert progs == [_module_name(path)], f"{path.relative_to(ROOT)}: prog {progs}"


@pytest.fixture()
def bad_bin(tmp_path: Path) -> Path:
    path = tmp_path / "bad.bin"
    path.write_bytes(b"\xff\xfe\x00binary\x00")
    return path


# (module, argv); "{bad}" is a binary file, "{missing}" a path that does not exist
ARGPARSE_CASES = [
    ("benchmarks.dynamic.ablation", ["--workers", "-1"]),
    ("benchmarks.dynamic.window_probe", ["--workers", "0", "--json", "{tmp}/w.json"]),
    ("benchmarks.dynamic.window_probe", ["--depths", "-1", "--json", "{tmp}/w.json"]),
    ("benchmarks.rca.gat_dataset", ["--out", "{tmp}/d", "--train-per-graph", "-1"]),
    ("benchmarks.placement.fgd_speed", ["--decisions", "-1"]),
    ("benchmarks.placement.fgd_speed", ["--eval-seeds", "-1"]),
    ("benchmarks.placement.ppo_speed", ["--steps", "-1"]),
    ("benchmarks.placement.profile_env", ["--steps", "-1"]),
    ("benchmarks.placement.variant_fidelity", ["--seeds", "-1"]),
    ("benchmarks.placement.frozen_set", ["--write", "--dir", "{bad}"]),
    ("benchmarks.placement.frozen_set", ["--dir", "{missing}"]),
    ("benchmarks.rca.gat_speed", ["--incidents", "-1"]),
    ("benchmarks.rca.gat_speed", ["--nodes", "-1"]),
    ("benchmarks.rca.fit_scale", ["--rows", "-1"]),
    ("benchmarks.rca.fit_scale", ["--services", "-1"]),
    ("benchmarks.serving.cpu_loop", ["--reps", "-1"]),
    ("benchmarks.serving.cpu_loop", ["--batch", "-1"]),
    ("benchmarks.serving.cpu_loop", ["--incidents", "-1"]),
    ("benchmarks.serving.k8s", ["--nodes", "-1"]),
    ("benchmarks.serving.fuzz", ["--cases", "-1"]),
    # an output under a file: refused when the options are parsed, not after the run
    ("benchmarks.dynamic.heuristics", ["--out", "{bad}/x.json"]),
    ("benchmarks.placement.fgd_speed", ["--out", "{bad}/x.json"]),
    ("benchmarks.placement.variant_fidelity", ["--json", "{bad}/x.json"]),
    ("benchmarks.rca.fit_scale", ["--out", "{bad}/x.json"]),
    ("benchmarks.serving.k8s", ["--out", "{bad}/x.json"]),
    ("benchmarks.serving.cpu_loop", ["--out", "{bad}/x.json"]),
    ("benchmarks.placement.profile_env", ["--json", "{bad}/x.json"]),
    ("benchmarks.placement.fleet_speed", ["--out", "{bad}/x.json"]),
]

ONE_LINE_CASES = [
    ("benchmarks.dynamic.ablation", ["--eval-seeds", "-1"], "bad seed"),
    ("benchmarks.dynamic.ablation", ["--traces", "{bad}"], "not in the frozen set"),
    ("benchmarks.dynamic.heuristics", ["--trace", "{bad}"], "cannot read CSV"),
    ("benchmarks.placement.ablation", ["--traces", "{bad}"], "not in the frozen set"),
    ("benchmarks.placement.ablation", ["--eval-seeds", "-1"], "bad seed"),
    ("benchmarks.placement.release_audit", ["--data", "{bad}"], "not a folder"),
    ("benchmarks.placement.release_audit", ["--data", "{tmp}"], "no openb_pod_list_"),
    ("benchmarks.placement.release_audit", ["--seeds", "-1"], "bad seed"),
    ("benchmarks.rca.calibration", ["--data", "{missing}", "--json", "{tmp}/c.json"], "not found"),
    ("benchmarks.rca.generate_speed", ["--incidents", "1"], "--incidents must lie in"),
    ("benchmarks.rca.petshop_sensitivity", ["--scenario", "{missing}"], "scenario folder"),
]


def _call(module: str, argv: list[str], monkeypatch: pytest.MonkeyPatch) -> int:
    """Run ``module``'s ``main`` as its ``__main__`` block does, with ``argv`` as the command line;
    argparse's own exit comes back as its status."""
    mod = importlib.import_module(module)
    monkeypatch.setattr(sys, "argv", [module, *argv])  # the mains without an argv parameter
    try:
        return run_main(mod.main, prog=module)
    except SystemExit as exit_:  # argparse's usage error
        return int(exit_.code)


def _fill(argv: list[str], tmp_path: Path, bad: Path) -> list[str]:
    return [
        a.format(bad=bad, missing=tmp_path / "missing" / "x", tmp=tmp_path / "empty") for a in argv
    ]


@pytest.mark.parametrize(("module", "argv"), ARGPARSE_CASES, ids=lambda x: str(x))
def test_bad_count_or_folder_is_a_usage_error(
    module: str,
    argv: list[str],
    tmp_path: Path,
    bad_bin: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "empty").mkdir()
    status = _call(module, _fill(argv, tmp_path, bad_bin), monkeypatch)
    err = capsys.readouterr().err
    assert status == 2, err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.split(": error: ", 1)[0].endswith(module), err  # the module, not `x.py`
    reason = last.split(": error: ", 1)[1]
    options = [a for a in argv if a.startswith("--")]
    option = ([a for a in options if a != "--json"] or options)[-1]
    assert option in reason, err  # refused for the option under test, not for another reason


@pytest.mark.parametrize(("module", "argv", "reason"), ONE_LINE_CASES, ids=lambda x: str(x))
def test_bad_input_is_one_line(
    module: str,
    argv: list[str],
    reason: str,
    tmp_path: Path,
    bad_bin: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    status = _call(module, _fill(argv, tmp_path, bad_bin), monkeypatch)
    err = capsys.readouterr().err
    assert status == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith(f"{module}: error: "), err
    assert reason in lines[0], err


def test_run_main_contract(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_main(lambda: None, prog="p") == 0
    assert run_main(lambda: 3, prog="p") == 3

    def config() -> None:
        raise ConfigError("bad value\nsecond line")

    assert run_main(config, prog="benchmarks.x") == 2
    assert capsys.readouterr().err == "benchmarks.x: error: bad value second line\n"

    blocker = tmp_path / "file"
    blocker.write_text("")

    def out_under_a_file() -> None:
        (blocker / "out").mkdir(parents=True, exist_ok=True)

    assert run_main(out_under_a_file, prog="benchmarks.x") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"benchmarks.x: error: {blocker}"), err

    def interrupted() -> None:
        raise KeyboardInterrupt

    assert run_main(interrupted, prog="benchmarks.x") == 130
    assert capsys.readouterr().err == "benchmarks.x: interrupted\n"

    def bug() -> None:
        raise OSError(errno.EINVAL, "no path")  # not the user's: keeps its traceback

    with pytest.raises(OSError):
        run_main(bug, prog="benchmarks.x")


def test_count_types() -> None:
    import argparse

    assert positive_int("3") == 3
    assert nonnegative_int("0") == 0
    for bad in ("0", "-1", "x", "1.5"):
        with pytest.raises(argparse.ArgumentTypeError):
            positive_int(bad)
    for bad in ("-1", "x"):
        with pytest.raises(argparse.ArgumentTypeError):
            nonnegative_int(bad)


def test_a_console_scripts_path_stays_for_relaunchers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lightning's DDP relaunches a console script (``__main__.__spec__`` is None) as
    ``python sys.argv[0] ...``: run_main names the module in usage errors only under ``python -m``
    (``__spec__`` set, relaunched as ``-m``), never renaming a script's path."""
    import types

    script = types.ModuleType("__main__")
    script.__spec__ = None
    monkeypatch.setattr(sys, "modules", {**sys.modules, "__main__": script})
    monkeypatch.setattr(sys, "argv", ["/venv/bin/fleetmind", "rca", "train"])
    seen: list[str] = []
    assert run_main(lambda: seen.append(sys.argv[0]), prog="fleetmind") == 0
    assert seen == ["/venv/bin/fleetmind"]
    module = types.ModuleType("__main__")
    module.__spec__ = importlib.util.find_spec("benchmarks.serving.k8s")
    monkeypatch.setattr(sys, "modules", {**sys.modules, "__main__": module})
    assert run_main(lambda: seen.append(sys.argv[0]), prog="benchmarks.serving.k8s") == 0
    assert seen[-1] == "benchmarks.serving.k8s" and sys.argv[0] == "/venv/bin/fleetmind"
