"""``fleetmind sched train``'s flags are the recipe settings: generated from the dataclass fields
(training/recipes/flags.py), with the fields' defaults and docstrings, and parsed back into exactly
the settings the recipe runs with."""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys

import pytest

from fleetmind import argtypes
from fleetmind.cli.sched import _trace_seeds, register
from fleetmind.training.recipes.flags import PAIRED_FLAGS, TRAIN_FLAGS, field_docs, recipe_kwargs
from fleetmind.training.recipes.settings import (
    DYNAMIC_RELEASE_DIR,
    DynamicArgs,
    FgdArgs,
    PairedArgs,
    PPOArgs,
)


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


def train_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser()
    register(ap.add_subparsers(dest="group"), "sched", "placement")
    sched = ap._subparsers._group_actions[0].choices["sched"]  # type: ignore[union-attr]
    return sched._subparsers._group_actions[0].choices["train"]  # type: ignore[union-attr]


def test_help_is_the_field_docstring_with_its_mode_and_default() -> None:
    helps = {a.dest: a.help for a in train_parser()._actions}
    assert helps["timesteps"] == field_docs()[("PPOArgs", "timesteps")] + " (default 100000)"
    assert helps["dyn_jobs"].startswith("dynamic mode: jobs per episode")
    assert helps["cem_init"].startswith("fgd mode, teacher=cem: start the search")
    assert "%%" in helps["fgd_until_pct"]  # argparse renders it as one %
    assert PPOArgs.__dataclass_fields__["timesteps"].default == 100_000


def paired(argv: list[str]) -> PairedArgs:
    ns = parse(["--mode", "dynamic", "--algo", "paired", *argv])
    return PairedArgs(**recipe_kwargs(ns, PairedArgs, TRAIN_FLAGS + PAIRED_FLAGS))


def test_paired_without_flags_gets_its_own_defaults_not_the_ppo_recipes() -> None:
    # --out (runs/ppo) and --dyn-jobs (2048) are shared flags whose PPO default is not paired's
    assert paired(["--trace", "gpushare40"]) == PairedArgs(traces=["gpushare40"])
    assert PairedArgs().out == "runs/paired" and PairedArgs().dyn_jobs is None
    assert PairedArgs().init == str(DYNAMIC_RELEASE_DIR)


def test_every_paired_flag_sets_its_field_and_only_paired_reads_them() -> None:
    argv = ["--trace", "a", "--init", "m", "--iterations", "3", "--workloads-per-iter", "4"]
    argv += ["--group-size", "5", "--lr", "0.25", "--kl-coef", "0.5", "--baseline", "episode"]
    argv += ["--val-streams", "7", "--val-every", "2"]
    argv += ["--seed", "9", "--dyn-jobs", "48", "--max-minutes", "1.5", "--out", "o", "--release"]
    got = paired(argv)
    want = PairedArgs(
        traces=["a"],
        init="m",
        iterations=3,
        workloads_per_iter=4,
        group_size=5,
        learning_rate=0.25,
        kl_coef=0.5,
        baseline="episode",
        val_streams=7,
        val_every=2,
        seed=9,
        dyn_jobs=48,
        max_minutes=1.5,
        out="o",
        release=True,
    )
    assert got == want
    assert {s.field for s in PAIRED_FLAGS} <= {f.name for f in dataclasses.fields(PairedArgs)}
    # --lr is paired's: the PPO recipes' learning_rate is not a flag and keeps its default
    ns = parse(["--mode", "dynamic", "--trace", "a", "--lr", "0.25"])
    assert DynamicArgs(**recipe_kwargs(ns, DynamicArgs)).learning_rate == 1e-4


def test_paired_flags_are_one_help_group_with_the_field_docstrings() -> None:
    from fleetmind.rl.paired import BASELINES

    train = train_parser()
    group = next(g for g in train._action_groups if g.title == "--algo paired (dynamic mode)")
    actions = {a.dest: a for a in group._group_actions}
    assert list(actions) == ["init", "iterations", "workloads_per_iter", "group_size", "lr"] + [
        "kl_coef",
        "baseline",
        "val_streams",
        "val_every",
    ]
    doc = field_docs()
    assert actions["iterations"].help == doc[("PairedArgs", "iterations")] + " (default 40)"
    assert actions["lr"].help == "Adam step size (default 3e-05)"
    assert actions["lr"].type is argtypes.finite_float and actions["val_every"].default == 5
    assert tuple(actions["baseline"].choices) == BASELINES  # the Literal's values are the update's
    # --init's default is the released model, named rather than printed as this machine's path
    assert actions["init"].default is None and "models/placement-dynamic" in actions["init"].help
    assert not any(a.help.startswith("dynamic mode") for a in actions.values())
