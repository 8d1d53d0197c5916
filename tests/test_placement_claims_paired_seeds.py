"""Paired PPO's training workloads never meet its validation or the frozen test workloads.

With a plain ``100_000 * seed`` offset, ``--seed 1`` drew its training streams 700,000-... (the
validation streams) and ``--seed 10`` its generator seeds 32,000,000-... (the validation
generator seeds). Seed 0's ranges must stay as they were (its documented results stand).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import yaml

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

from fleetmind.data.errors import ConfigError  # noqa: E402
from fleetmind.training.recipes import paired as P  # noqa: E402
from fleetmind.training.recipes.settings import PairedArgs  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _train(seed: int, iterations: int = 40, per_iter: int = 2) -> tuple[set[int], set[int]]:
    a = PairedArgs(
        traces=["default"], seed=seed, iterations=iterations, workloads_per_iter=per_iter
    )
    rng = np.random.default_rng([seed, 2])
    gens: set[int] = set()
    streams: set[int] = set()
    for it in range(1, a.iterations + 1):
        base, specs = P.iteration_specs(a, it, P.TRAIN_GEN_SEED, rng, shift=P.PAIRED_SEED_SHIFT)
        gens |= {s[3] for s in specs}
        streams |= {P.TRAIN_STREAM_SEED + base + i for i in range(len(specs))}
    return gens, streams


def test_seed_zero_ranges_unchanged() -> None:
    gens, streams = _train(0)
    assert streams == set(range(600_000, 600_080))
    assert gens == set(range(31_000_000, 31_000_080))


def test_train_validation_and_frozen_seeds_never_meet_for_seeds_0_to_50() -> None:
    man = yaml.safe_load((ROOT / "benchmarks/placement/frozen_set.yaml").read_text())
    frozen_gen = {int(t["seed"]) for t in man["traces"]}
    frozen_streams = set(man["eval_seeds"]) | set(range(42, 52))
    # the widest validation and training a run may ask for (``_check`` refuses wider)
    val_gen = set(range(P.VAL_GEN_SEED, P.VAL_GEN_SEED + P.SEED_BLOCK))
    val_streams = set(range(P.VAL_STREAM_SEED, P.VAL_STREAM_SEED + P.SEED_BLOCK))
    seen_gen: set[int] = set()
    seen_streams: set[int] = set()
    for seed in range(51):
        off = P.seed_offset(seed, P.PAIRED_SEED_SHIFT)
        gens = set(range(P.TRAIN_GEN_SEED + off, P.TRAIN_GEN_SEED + off + P.SEED_BLOCK))
        streams = set(range(P.TRAIN_STREAM_SEED + off, P.TRAIN_STREAM_SEED + off + P.SEED_BLOCK))
        assert not gens & (val_gen | frozen_gen), seed
        assert not streams & (val_streams | frozen_streams), seed
        assert not gens & seen_gen and not streams & seen_streams, seed  # seeds apart too
        seen_gen |= gens
        seen_streams |= streams
        # the seeds the recipe itself draws (default-size run) lie in those ranges
        g, s = _train(seed, iterations=3)
        assert g <= gens and s <= streams


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"iterations": 50_001, "workloads_per_iter": 2}, "--iterations x --workloads-per-iter"),
        ({"val_streams": 100_001}, "--val-streams"),
        ({"seed": -1}, "--seed"),
    ],
)
def test_runs_that_would_leave_their_range_are_refused(change: dict, match: str) -> None:
    a = PairedArgs(traces=["default"], **change)
    with pytest.raises(ConfigError, match=match):
        P._check(a)  # noqa: SLF001
