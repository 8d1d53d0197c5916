"""fleetmind/MultiClusterPlacement-v0: env checkers, determinism, masks, rewards."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from dynamic_helpers import small_env_kwargs, small_trace, two_cluster_fleet

import fleetmind.envs  # noqa: F401  (registers the env ids)
from fleetmind.envs.multicluster_env import (
    N_CAND_FEATURES,
    N_GLOBAL_FEATURES,
    MultiClusterPlacementEnv,
)


def make_env(**kw) -> MultiClusterPlacementEnv:
    return MultiClusterPlacementEnv(**small_env_kwargs(**kw))


def rollout(env: MultiClusterPlacementEnv, seed: int, pick: str = "first"):
    obs, _ = env.reset(seed=seed)
    trajectory, rewards = [obs], []
    rng = np.random.default_rng(0)
    while True:
        valid = np.flatnonzero(env.action_masks())
        a = valid[0] if pick == "first" else rng.choice(valid)
        obs, r, term, trunc, info = env.step(a)
        trajectory.append(obs)
        rewards.append(r)
        if term or trunc:
            return np.array(trajectory), np.array(rewards), info


def test_gymnasium_env_checker() -> None:
    from gymnasium.utils.env_checker import check_env

    check_env(make_env(), skip_render_check=True)


def test_sb3_env_checker() -> None:
    from stable_baselines3.common.env_checker import check_env

    check_env(make_env(), warn=True)


def test_registered_and_layout() -> None:
    env = gym.make(
        "fleetmind/MultiClusterPlacement-v0",
        trace=small_trace(60),
        fleet=two_cluster_fleet(),
        node_fraction=1.0,
        n_jobs=20,
        n_candidates=3,
    )
    inner = env.unwrapped
    assert inner.n_candidates == 3
    assert inner.n_cand_features == N_CAND_FEATURES
    assert inner.n_global_features == N_GLOBAL_FEATURES
    assert env.observation_space.shape == (3 * N_CAND_FEATURES + N_GLOBAL_FEATURES,)
    obs, _ = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    mask = inner.action_masks()
    assert mask.shape == (3,) and mask.dtype == bool and mask[0]
    rows = obs[: 3 * N_CAND_FEATURES].reshape(3, N_CAND_FEATURES)
    np.testing.assert_array_equal(rows[:, 0] == 1.0, mask)  # feature 0 = distinct candidate
    k = int(mask.sum())
    np.testing.assert_array_equal(rows[k:, 1:], rows[np.arange(k, 3) % k, 1:])  # repeated rows


def test_determinism_by_seed() -> None:
    t1, r1, i1 = rollout(make_env(), seed=3, pick="random")
    t2, r2, i2 = rollout(make_env(), seed=3, pick="random")
    np.testing.assert_array_equal(t1, t2)
    np.testing.assert_array_equal(r1, r2)
    assert i1["metrics"] == i2["metrics"]
    t3, _, _ = rollout(make_env(), seed=4, pick="random")
    assert t3.shape != t1.shape or not np.array_equal(t1, t3)


def test_return_is_minus_scaled_sum_of_slowdowns() -> None:
    env = make_env(reward_scale=0.5)
    _, rewards, info = rollout(env, seed=1)
    m = info["metrics"]
    assert m["n_started"] == len(rewards)
    assert rewards.sum() == pytest.approx(-0.5 * m["n_started"] * (m["mean_slowdown"] - 1.0))
    assert (rewards <= 1e-9).all()


def test_invalid_actions_are_rejected() -> None:
    env = make_env(n_candidates=8)
    env.reset(seed=0)
    before = env.sim.state.allocated_gpu_milli
    for bad in (8, -1, 2.5):
        with pytest.raises(ValueError):
            env.step(bad)
    assert env.sim.state.allocated_gpu_milli == before  # nothing was placed
    env2 = make_env()
    with pytest.raises(RuntimeError):
        env2.step(0)  # before reset
    _, _, info = rollout(env2, seed=0)
    with pytest.raises(RuntimeError):
        env2.step(0)  # after the episode ended


def test_repeated_rows_place_the_candidate_they_repeat() -> None:
    env = make_env(n_candidates=16)  # the tiny fleet has 3 nodes: rows 3.. repeat
    env.reset(seed=5)
    mask = env.action_masks()
    k = int(mask.sum())
    assert k < 16
    nodes, gpus = env.candidates()
    j = env.current_job
    env.step(k)  # repeats candidate 0
    assert env.sim.node_of[j] == nodes[0]
    np.testing.assert_array_equal(env.sim.gpus_of[j], gpus[0])


def test_candidates_are_feasible_placements() -> None:
    env = make_env(n_candidates=6)
    env.reset(seed=2)
    for _ in range(30):
        nodes, gpus = env.candidates()
        mask = env.action_masks()
        j = env.current_job
        pod = env.sim.pod(j)
        feas = env.sim.feasible(j)
        for k in np.flatnonzero(mask):
            assert feas[nodes[k]]
            assert len(gpus[k]) == pod.num_gpu
        _, _, term, trunc, _ = env.step(int(np.flatnonzero(mask)[-1]))
        if term or trunc:
            break


def test_maskable_ppo_with_the_candidate_scorer_runs_on_the_env() -> None:
    from sb3_contrib import MaskablePPO

    from fleetmind.rl import policy as policy_mod

    env = make_env(n_jobs=20, target_util=0.5)
    model = MaskablePPO(
        policy_mod.CandidateScorerPolicy,
        env,
        n_steps=16,
        batch_size=16,
        n_epochs=1,
        policy_kwargs={
            "n_candidates": env.n_candidates,
            "n_cand_features": env.n_cand_features,
            "n_global_features": env.n_global_features,
            "hidden": 16,
        },
        seed=0,
        device="cpu",
    )
    model.learn(total_timesteps=32)
    obs, _ = env.reset(seed=9)
    action, _ = model.predict(obs, action_masks=env.action_masks(), deterministic=True)
    assert env.action_masks()[int(action)]
