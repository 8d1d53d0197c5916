"""fleetmind/GpuPlacement-v0: checkers, masking, FGD equivalence of candidate 0, determinism."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from ppo_helpers import load_tiny

import fleetmind.envs  # noqa: F401 - registers the env ids
from fleetmind.envs.candidates import N_CAND_FEATURES, N_GLOBAL_FEATURES
from fleetmind.envs.fgd_mode import run_fgd
from fleetmind.envs.gpu_placement_env import GpuPlacementEnv


@pytest.fixture()
def tiny(tmp_path):
    return load_tiny(tmp_path)


def make(tiny, **kw) -> GpuPlacementEnv:
    nodes, trace = tiny
    return GpuPlacementEnv(traces=trace, nodes=nodes, n_candidates=6, **kw)


def test_registered_and_checkers_pass(tiny):
    from gymnasium.utils.env_checker import check_env
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    nodes, trace = tiny
    env = gym.make("fleetmind/GpuPlacement-v0", traces=trace, nodes=nodes, n_candidates=6)
    check_env(env.unwrapped, skip_render_check=True)
    sb3_check_env(make(tiny), warn=True)
    u = env.unwrapped
    assert u.observation_space.shape == (6 * N_CAND_FEATURES + N_GLOBAL_FEATURES,)
    assert (u.n_candidates, u.n_cand_features, u.n_global_features) == (6, 18, 10)


def _assert_state_valid(env: GpuPlacementEnv) -> None:
    st = env.state
    assert (st.cpu_free >= 0).all() and (st.mem_free >= 0).all()
    assert (st.gpu_idle >= 0).all() and (st.gpu_idle <= 1000).all()
    assert (st.gpu_idle[~st.gpu_present] == 0).all()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_masked_actions_are_always_feasible(tiny, seed):
    env = make(tiny)
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    done = False
    steps = 0
    while not done:
        mask = env.action_masks()
        assert mask.any()
        assert (obs.reshape(-1)[: 6 * N_CAND_FEATURES].reshape(6, -1)[:, 0] == mask).all()
        a = int(rng.choice(np.flatnonzero(mask)))
        node, gpus = env.candidate(a)
        pod = env._pods[env._t]
        assert env.state.feasible(pod)[node]
        if pod.gpu_spec_mask != -1 and pod.num_gpu > 0:
            assert env.state.model_bit[node] & pod.gpu_spec_mask
        obs, r, term, trunc, info = env.step(a)
        assert np.isfinite(r) and env.observation_space.contains(obs)
        _assert_state_valid(env)
        done = term or trunc
        steps += 1
    assert steps > 5
    assert 0.0 <= info["unallocated_gpu_pct_at_100"] <= 100.0


def test_masked_action_places_the_candidate_it_repeats(tiny):
    """gymnasium's contract: every element of ``action_space`` is a valid ``step()`` input (its
    ``check_env`` steps with ``action_space.sample()``); padding action ``a`` places real
    candidate ``a % k``, as ``MultiClusterPlacement-v0`` does."""
    nodes, trace = tiny
    env = GpuPlacementEnv(traces=trace, nodes=nodes, n_candidates=len(nodes) + 4)
    twin = GpuPlacementEnv(traces=trace, nodes=nodes, n_candidates=len(nodes) + 4)
    env.reset(seed=0)
    twin.reset(seed=0)
    mask = env.action_masks()
    bad = np.flatnonzero(~mask)
    assert bad.size >= 4  # more slots than nodes: padding is always masked
    k = int(mask.sum())
    got, want = env.step(int(bad[0])), twin.step(int(bad[0]) % k)
    assert np.array_equal(got[0], want[0]) and got[1:] == want[1:]
    assert np.array_equal(env.action_masks(), twin.action_masks())  # masks are unchanged


@pytest.mark.parametrize("wseed", [42, 43])
def test_candidate_zero_is_fgd(tiny, wseed):
    """Always taking candidate 0 reproduces the FGD heuristic's run exactly."""
    nodes, trace = tiny
    env = make(tiny)
    env.reset(options={"workload_seed": wseed})
    done = False
    while not done:
        _, _, term, trunc, info = env.step(0)
        done = term or trunc
    ref = run_fgd(trace, "FGD", wseed, nodes)
    assert info["unallocated_gpu_pct_at_100"] == ref.unallocated[100]
    assert info["unallocated_gpu_pct_at_130"] == ref.unallocated[130]
    assert info["n_failed"] == ref.n_failed


def test_fgd_prefix_and_snapshot_cache(tiny):
    env = make(tiny, fgd_until_pct=60.0, workload_seeds=[5])
    obs1, _ = env.reset(seed=0)
    t1 = env._t
    obs2, _ = env.reset(seed=1)
    assert env._t == t1 and np.array_equal(obs1, obs2)


def test_reset_is_deterministic_by_seed(tiny):
    a, b = make(tiny), make(tiny)
    oa, _ = a.reset(seed=3)
    ob, _ = b.reset(seed=3)
    assert np.array_equal(oa, ob)
    for _ in range(5):
        oa, ra, *_ = a.step(0)
        ob, rb, *_ = b.step(0)
        assert np.array_equal(oa, ob) and ra == rb


def test_teacher_rollouts_skip_episodes_without_a_decision(tiny):
    """An FGD prefix that places every pod ends the episode at its reset: the teacher stepped it
    anyway (an AssertionError in the environment). Such episodes give no samples; none at all is
    a one-line error. A drawn workload without a decision is redrawn, so a prefix that places
    every pod of every workload is a DataError at reset (tests/test_env_degenerate_and_order.py)."""
    from fleetmind.data.errors import DataError
    from fleetmind.rl.ppo import collect_teacher

    env = make(tiny, fgd_until_pct=200)
    _, info = env.reset(options={"workload_seed": 0})
    assert info["n_decisions"] == 0  # a given workload seed: the reset's info is the final one
    with pytest.raises(DataError, match="gave the agent no decision"):
        collect_teacher(env, 2, 0, 0.99)
    data = collect_teacher(make(tiny), 1, 0, 0.99)
    assert len(data.actions) > 0 and len(data.actions) == len(data.returns)
