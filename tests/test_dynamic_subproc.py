"""Dynamic-mode training rollouts run in parallel processes (``SubprocVecEnv``) like fgd mode's,
and give the same rollouts as the in-process ``DummyVecEnv``."""

from __future__ import annotations

import numpy as np
import pytest
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

from fleetmind.training.recipes.dynamic import make_dyn_vec_env


def _rollout(venv, steps: int) -> tuple[np.ndarray, np.ndarray]:  # noqa: ANN001
    obs = venv.reset()
    rewards = []
    for _ in range(steps):
        masks = np.stack(venv.env_method("action_masks"))
        obs, r, _, _ = venv.step(masks.argmax(axis=1))
        rewards.append(r)
    return obs, np.array(rewards)


@pytest.mark.filterwarnings("ignore:offered load:UserWarning")  # tiny streams on purpose
def test_two_envs_run_in_subprocesses_with_the_same_rollouts(shared_data) -> None:
    kw = {"n_jobs": 48, "node_fraction": 0.05}
    par = make_dyn_vec_env(["default"], kw, n_envs=2, seed=3)
    one = [make_dyn_vec_env(["default"], kw, n_envs=1, seed=3 + i) for i in range(2)]
    try:
        assert isinstance(par.venv, SubprocVecEnv)
        assert all(isinstance(v.venv, DummyVecEnv) for v in one)
        obs_p, rew_p = _rollout(par, 20)
        for i, v in enumerate(one):
            obs_1, rew_1 = _rollout(v, 20)
            assert np.array_equal(obs_p[i], obs_1[0])
            assert np.array_equal(rew_p[:, i].astype(np.float32), rew_1[:, 0].astype(np.float32))
    finally:
        par.close()
        for v in one:
            v.close()
