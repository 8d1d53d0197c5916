"""fleetmind/GpuPlacement-v0 on a fleet with fewer feasible nodes than ``K``: every action steps.

gymnasium's contract (``gymnasium/core.py``, ``Env.step``; ``gymnasium/utils/env_checker.py``,
``check_env`` -> ``env_reset_passive_checker``/``env_step_passive_checker`` with
``action_space.sample()``) and SB3's ``stable_baselines3/common/env_checker.py`` (``_check_returned_
values`` steps ``env.action_space.sample()``) both take any element of the action space as a valid
``step()`` input. Padding actions place the real candidate they repeat (``a % k``), the rule of the
sibling ``MultiClusterPlacement-v0`` (``docs/dynamic.md``), while the mask stays as it was, so a
masked policy behaves exactly as before.
"""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
from gymnasium.utils.env_checker import check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

import fleetmind.envs  # noqa: F401 - registers the env ids
from fleetmind.data.openb import load_openb_nodes, load_openb_trace
from fleetmind.envs.gpu_placement_env import GpuPlacementEnv

NODES = """sn,cpu_milli,memory_mib,gpu,model
n0,32000,131072,0,
n1,96000,786432,8,V100M32
n2,64000,262144,2,T4
n3,64000,262144,1,T4
n4,96000,524288,8,G2
n5,32000,131072,4,P100
"""
"""Six nodes, one without GPUs: never more than 6 feasible nodes against the default K = 16."""
PODS = """name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec
p1,4000,8000,1,1000,
p2,8000,16000,8,1000,
p3,2000,4000,1,250,
p4,2000,4000,1,500,T4
p5,1000,2000,0,0,
p6,4000,8000,2,1000,
p7,2000,4000,1,500,
p8,8000,16000,4,1000,
"""


def _env(tmp_path: Path, **kw: object) -> GpuPlacementEnv:
    (tmp_path / "nodes.csv").write_text(NODES)
    (tmp_path / "pods.csv").write_text(PODS)
    nodes = load_openb_nodes(tmp_path / "nodes.csv", gpu_only=False)  # keep the CPU-only node
    trace = load_openb_trace(tmp_path / "pods.csv")
    env = gym.make("fleetmind/GpuPlacement-v0", traces=trace, nodes=nodes, **kw)
    return env.unwrapped


def test_both_checkers_pass_with_fewer_feasible_nodes_than_k(tmp_path: Path) -> None:
    env = _env(tmp_path)
    assert env.n_candidates == 16 and env.state.n_nodes == 6
    check_env(env, skip_render_check=True)
    sb3_check_env(_env(tmp_path), warn=True)


def test_random_actions_run_whole_episodes(tmp_path: Path) -> None:
    """Unmasked random play: each padding action places a real candidate (a % k)."""
    env = _env(tmp_path)
    env.action_space.seed(3)
    padded = 0
    for seed in range(4):
        env.reset(seed=seed)
        done = False
        while not done:
            a = int(env.action_space.sample())
            mask = env.action_masks()
            k = int(mask.sum())
            assert mask[:k].all() and not mask[k:].any()  # real rows first
            padded += not mask[a]
            want = env.candidate(a % k if not mask[a] else a)
            assert env.real_action(a) == (a if mask[a] else a % k)
            assert env.candidate(env.real_action(a))[0] == want[0]
            _, r, term, trunc, info = env.step(a)
            assert np.isfinite(r)
            done = term or trunc
        assert term and info["n_pods"] == env._n and info["n_decisions"] > 0  # whole workload
    assert padded > 0  # padding actions were taken, not just real ones
