"""The fgd-mode model card's "Regenerate" command reruns the same training.

``training/recipes/fgd.py`` ``_command`` listed a fixed set of flags: ``--cem-init``,
``--cem-init-sd`` and ``--cem-multi-gpu-block`` (docs/ppo.md, the teacher search's options) were
dropped, and a path with a space was not quoted. Here the command is parsed back by the real
``fleetmind sched train`` parser (``shlex.split``, as a POSIX shell would) and gives the same
settings.
"""

from __future__ import annotations

import shlex
from dataclasses import asdict

from fleetmind.cli import build_parser
from fleetmind.training.recipes.fgd import _command
from fleetmind.training.recipes.flags import recipe_kwargs
from fleetmind.training.recipes.settings import FgdArgs

WHERE = ("out", "release", "register")  # where the run went: not in the command


def _round_trip(a: FgdArgs) -> FgdArgs:
    ns = build_parser().parse_args(["sched", "train", *shlex.split(_command(a))])
    assert ns.mode == "fgd"
    return FgdArgs(**recipe_kwargs(ns, FgdArgs))


def _what(a: FgdArgs) -> dict:
    return {k: v for k, v in asdict(a).items() if k not in WHERE}


def test_the_teacher_search_options_and_a_quoted_path_come_back() -> None:
    a = FgdArgs(
        traces=["default", "my traces/gpuspec10.csv"],
        teacher="cem",
        cem_init="/data/teachers/R base.json",
        cem_init_sd=0.25,
        cem_multi_gpu_block=True,
        cem_seeds=[1000, 1001],
        penalty_features=True,
        bc_value_coef=0.0,
        eval_traces=["gpuspec20"],
        eval_seeds=[42, 43],
        stop_arrived_pct=101.0,
        max_minutes=7.5,
        out="/tmp/somewhere else",
    )
    cmd = _command(a)
    assert "--cem-init '/data/teachers/R base.json'" in cmd and "--cem-multi-gpu-block" in cmd
    assert "--out" not in cmd
    assert _what(_round_trip(a)) == _what(a)


def test_the_defaults_round_trip() -> None:
    a = FgdArgs()
    assert _what(_round_trip(a)) == _what(a)
