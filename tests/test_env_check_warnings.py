"""gymnasium's ``check_env`` passes both placement envs without a warning, and ``workload_seeds``
takes any sequence of integers.

``gymnasium/utils/passive_env_checker.py`` (``env_render_passive_checker``, gymnasium 1.x,
https://github.com/Farama-Foundation/Gymnasium/blob/main/gymnasium/utils/passive_env_checker.py)
warns "No render fps was declared in the environment" when ``metadata["render_modes"]`` is not
empty and ``metadata["render_fps"]`` is missing; ``MultiClusterPlacement-v0`` declares ``ansi``.
``GpuPlacementEnv(workload_seeds=np.array([...]))`` raised numpy's "truth value of an array ...
is ambiguous" ValueError.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import fleetmind.envs  # noqa: F401 - registers the env ids
from fleetmind.data.errors import ConfigError
from fleetmind.data.openb import load_openb_nodes, load_openb_trace
from fleetmind.envs.gpu_placement_env import GpuPlacementEnv

NODES = """sn,cpu_milli,memory_mib,gpu,model
n1,96000,786432,8,V100M32
n2,64000,262144,2,T4
n3,64000,262144,1,T4
n4,96000,524288,8,G2
"""
PODS = """name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec
p1,4000,8000,1,1000,
p2,8000,16000,8,1000,
p3,2000,4000,1,250,
p4,2000,4000,1,500,T4
p5,4000,8000,2,1000,
p6,2000,4000,1,500,
"""


def _env(tmp_path: Path, **kw: object) -> GpuPlacementEnv:
    (tmp_path / "nodes.csv").write_text(NODES)
    (tmp_path / "pods.csv").write_text(PODS)
    nodes = load_openb_nodes(tmp_path / "nodes.csv")
    trace = load_openb_trace(tmp_path / "pods.csv")
    return gym.make("fleetmind/GpuPlacement-v0", traces=trace, nodes=nodes, **kw).unwrapped


def test_gpu_placement_passes_check_env_without_warnings(tmp_path: Path) -> None:
    env = _env(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env)  # the render check included


def test_multicluster_passes_check_env_without_warnings() -> None:
    env = gym.make("fleetmind/MultiClusterPlacement-v0", node_fraction=0.05).unwrapped
    assert env.metadata["render_fps"] > 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env)
    ansi = gym.make(
        "fleetmind/MultiClusterPlacement-v0", node_fraction=0.05, render_mode="ansi"
    ).unwrapped
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(ansi)


@pytest.mark.parametrize(
    "seeds",
    [
        np.array([3, 5, 8]),
        np.array([3, 5, 8], dtype=np.uint16),
        (3, 5, 8),
        range(3, 9, 5),
        [3.0, 5, 8],
    ],
)
def test_workload_seeds_accepts_any_sequence_of_integers(tmp_path: Path, seeds: object) -> None:
    env = _env(tmp_path, workload_seeds=seeds)
    assert env.workload_seeds == [int(x) for x in seeds]  # type: ignore[attr-defined]
    assert all(type(x) is int for x in env.workload_seeds)
    env.reset(seed=0)  # draws from the list


def test_an_empty_array_means_no_seed_list(tmp_path: Path) -> None:
    assert _env(tmp_path, workload_seeds=np.array([], dtype=int)).workload_seeds is None


@pytest.mark.parametrize(
    ("seeds", "match"),
    [
        (np.array([1.5, 2.0]), "integers >= 0, got 1.5"),
        (["3", "4"], "integers >= 0, got '3'"),
        ([True, 2], "integers >= 0, got True"),
        (np.array([[1, 2]]), "integers >= 0"),
        (np.array([-1, 2]), "integers >= 0, got -1"),
        (7, "a sequence of integers"),
        ("12", "a sequence of integers"),
    ],
)
def test_workload_seeds_rejects_non_integers(tmp_path: Path, seeds: object, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        _env(tmp_path, workload_seeds=seeds)
