"""``python -m benchmarks.dynamic.ppo_eval --ensemble``: the mean-probability vote of dynamic-mode actors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from benchmarks.dynamic.ppo_eval import EnsembleActor
from fleetmind.rl.dynamic_eval import load_dynamic_actor

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "benchmarks" / "results" / "dynamic" / "ppo_dynamic_multigpu_fix_models"

pytestmark = pytest.mark.skipif(
    not (MODELS / "seed0" / "policy.pt").is_file(), reason="multi-GPU fix models not present"
)


def _random_inputs(actor, n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    k = actor.n_candidates
    dim = int(actor.session.get_inputs()[0].shape[1])
    for _ in range(n):
        obs = rng.normal(size=dim).astype(np.float32)
        mask = rng.random(k) < 0.5
        mask[rng.integers(k)] = True
        yield obs, mask


def test_one_member_ensemble_is_that_member() -> None:
    ref = load_dynamic_actor(MODELS / "seed0" / "policy.onnx")
    one = EnsembleActor([MODELS / "seed0"], ref.n_candidates)
    for obs, mask in _random_inputs(ref, 200):
        assert one.predict(obs, mask) == int(ref.predict(obs, mask))


def test_ensemble_picks_only_allowed_candidates_and_is_a_vote() -> None:
    ref = load_dynamic_actor(MODELS / "seed0" / "policy.onnx")
    folders = [MODELS / f"seed{s}" for s in (0, 2, 4)]
    ens = EnsembleActor(folders, ref.n_candidates)
    members = [load_dynamic_actor(f / "policy.onnx") for f in folders]
    differs = 0
    for obs, mask in _random_inputs(ref, 300, seed=1):
        choice = ens.predict(obs, mask)
        assert mask[choice]
        votes = [int(m.predict(obs, mask)) for m in members]
        if len(set(votes)) == 1:  # unanimous members: the ensemble agrees with them
            assert choice == votes[0]
        differs += choice != votes[0]
    assert differs > 0  # it is not just the first member


def test_members_must_fit_the_env() -> None:
    from fleetmind.data.errors import ModelLoadError

    with pytest.raises(ModelLoadError, match="K="):
        EnsembleActor([MODELS / "seed0"], n_candidates=3)
