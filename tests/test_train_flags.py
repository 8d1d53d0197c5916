"""``fleetmind sched train``'s flags are the recipe settings: generated from the dataclass fields
(training/recipes/flags.py), with the fields' defaults and docstrings, and parsed back into exactly
the settings the recipe runs with."""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys

import pytest

from fleetmind.cli.sched import _trace_seeds, register
from fleetmind.training.recipes.flags import TRAIN_FLAGS, field_docs, recipe_kwargs
from fleetmind.training.recipes.settings import DynamicArgs, FgdArgs, PPOArgs


def parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    register(ap.add_subparsers(dest="group"), "sched", "placement")
    return ap.parse_args(["sched", "train", *argv])


def settings(cls: type, argv: list[str]) -> object:
    ns = parse(argv)
    return cls(**recipe_kwargs(ns, cls, convert={"cem_trace_seeds": _trace_seeds}))


def test_building_the_parser_loads_no_heavy_module() -> None:
    # the whole CLI's parser is built for `fleetmind --help`: the settings must stay light
    # (checked in a fresh interpreter; other tests load torch into this one)
    code = (
        "import sys, argparse;"
        "from fleetmind.cli.sched import register;"
        "ap = argparse.ArgumentParser(); register(ap.add_subparsers(), 's', 'p');"
        "print(sorted(m for m in ('torch', 'mlflow', 'stable_baselines3') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("cls,mode", [(FgdArgs, "fgd"), (DynamicArgs, "dynamic")])
def test_no_flags_give_the_dataclass_defaults(cls: type, mode: str) -> None:
    got = settings(cls, ["--mode", mode, "--trace", "gpushare40"])
    want = cls(traces=["gpushare40"])
    if cls is FgdArgs:
        want = FgdArgs(traces=["gpushare40"], eval_traces=["gpushare40"])  # the first --trace
    assert got == want


def test_every_flag_sets_its_field() -> None:
    argv = ["--trace", "a", "--trace", "b", "--eval-trace", "c", "--no-register"]
    changed: dict[str, object] = {"traces": ["a", "b"], "eval_traces": ["c"], "register": False}
    for spec in TRAIN_FLAGS:
        if spec.field in changed or spec.field == "cem_trace_seeds":
            continue
        owner = FgdArgs if spec.field in {f.name for f in dataclasses.fields(FgdArgs)} else None
        f = next(f for f in dataclasses.fields(owner or DynamicArgs) if f.name == spec.field)
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        value: object
        if isinstance(default, bool):
            argv.append(spec.flag)
            value = True
        elif spec.field == "reward":
            argv += [spec.flag, "metric"]
            value = "metric"
        elif isinstance(default, list):
            value = [7, 8] if spec.field.endswith("seeds") else ["gpu_used_after"]
            argv += [spec.flag, *map(str, value)]
        elif spec.field in ("teacher", "out", "cem_init"):
            value = f"x-{spec.field}"
            argv += [spec.flag, value]
        else:  # numbers (None-defaulted ones are floats)
            value = 3 if isinstance(default, int) else 2.5
            argv += [spec.flag, str(value)]
        changed[spec.field] = value
    argv += ["--cem-trace-seeds", "b=1-2"]
    changed["cem_trace_seeds"] = {"b": [1, 2]}
    for cls in (FgdArgs, DynamicArgs):
        got = dataclasses.asdict(settings(cls, argv))
        mine = {k: v for k, v in changed.items() if k in got}
        assert {k: got[k] for k in mine} == mine
    covered = {f.name for c in (FgdArgs, DynamicArgs) for f in dataclasses.fields(c)} & set(changed)
    assert covered == {s.field for s in TRAIN_FLAGS}


def test_help_is_the_field_docstring_with_its_mode_and_default() -> None:
    ap = argparse.ArgumentParser()
    register(ap.add_subparsers(dest="group"), "sched", "placement")
    train = ap._subparsers._group_actions[0].choices["sched"]  # type: ignore[union-attr]
    train = train._subparsers._group_actions[0].choices["train"]  # type: ignore[union-attr]
    helps = {a.dest: a.help for a in train._actions}
    assert helps["timesteps"] == field_docs()[("PPOArgs", "timesteps")] + " (default 100000)"
    assert helps["dyn_jobs"].startswith("dynamic mode: jobs per episode")
    assert helps["cem_init"].startswith("fgd mode, teacher=cem: start the search")
    assert "%%" in helps["fgd_until_pct"]  # argparse renders it as one %
    assert PPOArgs.__dataclass_fields__["timesteps"].default == 100_000
