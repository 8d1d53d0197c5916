"""``python -m benchmarks.dynamic.ppo_eval --ensemble``: the mean-probability vote of dynamic-mode actors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from benchmarks.dynamic.ppo_eval import EnsembleActor
from fleetmind.rl.dynamic_eval import load_dynamic_actor
from fleetmind.rl.export import load_torch, save_onnx

ROOT = Path(__file__).resolve().parents[1]
RELEASED = ROOT / "models" / "placement-dynamic"

pytestmark = pytest.mark.skipif(
    not (RELEASED / "policy.pt").is_file(), reason="released dynamic-mode model not present"
)


@pytest.fixture(scope="module")
def members(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Three actor folders: the released model and two copies with seeded noise on every weight
    (0.3 x each tensor's std), so that they disagree on some inputs the way separately trained
    seeds do, without keeping unreleased models in the repository."""
    folders = [RELEASED]
    for seed in (1, 2):
        actor = load_torch(RELEASED / "policy.pt")
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for w in actor.parameters():
                scale = 0.3 * float(w.std()) if w.numel() > 1 else 0.3
                w.add_(scale * torch.randn(w.shape, generator=gen))
        folder = tmp_path_factory.mktemp(f"noisy{seed}")
        save_onnx(actor, folder / "policy.onnx")
        folders.append(folder)
    return folders


def _random_inputs(actor, n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    k = actor.n_candidates
    dim = int(actor.session.get_inputs()[0].shape[1])
    for _ in range(n):
        obs = rng.normal(size=dim).astype(np.float32)
        mask = rng.random(k) < 0.5
        mask[rng.integers(k)] = True
        yield obs, mask


def test_one_member_ensemble_is_that_member(members: list[Path]) -> None:
    ref = load_dynamic_actor(members[0] / "policy.onnx")
    one = EnsembleActor(members[:1], ref.n_candidates)
    for obs, mask in _random_inputs(ref, 200):
        assert one.predict(obs, mask) == int(ref.predict(obs, mask))


def test_ensemble_picks_only_allowed_candidates_and_is_a_vote(members: list[Path]) -> None:
    ref = load_dynamic_actor(members[0] / "policy.onnx")
    folders = members
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


def test_members_must_fit_the_env(members: list[Path]) -> None:
    from fleetmind.data.errors import ModelLoadError

    with pytest.raises(ModelLoadError, match="K="):
        EnsembleActor(members[:1], n_candidates=3)
