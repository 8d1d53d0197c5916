"""``rl.ppo.behaviour_clone``: the value term's weight (``--bc-value-coef``) and what it reaches."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fleetmind.rl.policy import CandidateScorerNet
from fleetmind.rl.ppo import TeacherData, behaviour_clone

K, F, G = 6, 5, 3


class _Policy(torch.nn.Module):
    """The two members ``behaviour_clone`` uses of an SB3 policy: ``mlp_extractor`` (the
    project's :class:`CandidateScorerNet`) and ``value_net``."""

    def __init__(self) -> None:
        super().__init__()
        self.mlp_extractor = CandidateScorerNet(K, F, G, hidden=16)
        self.value_net = torch.nn.Linear(16, 1)

    def set_training_mode(self, mode: bool) -> None:
        self.train(mode)


def _data(n: int = 768, return_scale: float = 1000.0) -> TeacherData:
    """A linear teacher over random candidate rows, with returns on dynamic mode's scale."""
    rng = np.random.default_rng(0)
    rows = rng.normal(size=(n, K, F)).astype(np.float32)
    rows[:, :, 0] = 1.0  # "valid" column, as the env writes it
    glob = rng.normal(size=(n, G)).astype(np.float32)
    masks = np.ones((n, K), dtype=bool)
    masks[:, -1] = rng.random(n) < 0.5
    score = rows[:, :, 1:] @ np.array([1.5, -1.0, 0.7, 0.3], dtype=np.float32)
    actions = np.where(masks, score, -np.inf).argmax(1)
    returns = (return_scale * rng.normal(size=n)).astype(np.float32)
    obs = np.concatenate([rows.reshape(n, -1), glob], axis=1)
    return TeacherData(obs, masks, actions.astype(np.int64), returns)


def _clone(value_coef: float, data: TeacherData) -> tuple[_Policy, dict[str, float]]:
    torch.manual_seed(0)
    policy = _Policy()
    stats = behaviour_clone(policy, data, epochs=15, seed=0, value_coef=value_coef, target_ce=0.0)
    return policy, stats


def test_value_coef_zero_leaves_the_critic_untouched() -> None:
    torch.manual_seed(0)
    before = {k: v.clone() for k, v in _Policy().state_dict().items()}
    policy, _ = _clone(0.0, _data(n=256))
    after = policy.state_dict()
    critic = [k for k in after if k.startswith(("mlp_extractor.critic_net", "value_net"))]
    actor = [k for k in after if k.startswith("mlp_extractor.row_net")]
    assert critic and actor
    assert all(torch.equal(before[k], after[k]) for k in critic)
    assert any(not torch.equal(before[k], after[k]) for k in actor)
    # with the default weight the critic is fitted too
    policy, _ = _clone(0.5, _data(n=256))
    assert any(not torch.equal(before[k], policy.state_dict()[k]) for k in critic)


def test_large_returns_no_longer_hold_back_the_actor() -> None:
    """With returns of dynamic mode's size the value term swamps the shared row trunk's gradient
    (the critic pools the actor's row embeddings): the actor alone fits the teacher better."""
    data = _data()
    _, shared = _clone(0.5, data)
    _, alone = _clone(0.0, data)
    assert alone["bc/accuracy"] > shared["bc/accuracy"] + 0.05
    assert alone["bc/ce"] < shared["bc/ce"]
    assert alone["bc/value_mse"] == pytest.approx(float(np.mean(data.returns**2)), rel=0.05)
