"""``GpuPlacementEnv(reward="metric")``: the step rewards sum to minus the evaluation metric."""

from __future__ import annotations

import numpy as np
import pytest

from fleetmind.data.openb import nodes_from_arrays, trace_from_arrays
from fleetmind.envs.gpu_placement_env import GpuPlacementEnv


def _cluster():  # noqa: ANN202 - (OpenbNodes, PodTrace)
    n = 48
    nodes = nodes_from_arrays(
        cpu_milli=np.full(n, 64000),
        memory_mib=np.full(n, 262144),
        num_gpu=np.array([8] * (n // 2) + [4] * (n // 2)),
        model=np.array(["T4"] * n),
    )
    p = 120
    i = np.arange(p)
    trace = trace_from_arrays(
        name="tiny",
        cpu_milli=1000 + 1000 * (i % 4),
        memory_mib=np.full(p, 4096),
        num_gpu=np.array([0, 1, 1, 2, 1, 1])[i % 6],
        gpu_milli=np.array([0, 250, 1000, 1000, 500, 700])[i % 6],
    )
    return nodes, trace


@pytest.mark.parametrize("fgd_until_pct", [0.0, 60.0])
def test_step_rewards_sum_to_minus_the_metric(fgd_until_pct) -> None:
    nodes, trace = _cluster()
    env = GpuPlacementEnv(traces=[trace], nodes=nodes, reward="metric", fgd_until_pct=fgd_until_pct)
    rng = np.random.default_rng(0)
    for wseed in (1, 2):
        _, info = env.reset(options={"workload_seed": wseed})
        total, done, steps = 0.0, False, 0
        while not done:
            mask = env.action_masks()
            a = int(rng.choice(np.flatnonzero(mask)))  # any policy: the identity holds for all
            _, r, term, trunc, info = env.step(a)
            total += r
            steps += 1
            done = term or trunc
        metric = info["unallocated_gpu_pct_at_100"]
        assert np.isfinite(metric) and steps > 20
        assert abs(total + metric) <= 0.005 + 1e-9, (total, metric)


def test_unknown_reward_mode_is_rejected() -> None:
    nodes, trace = _cluster()
    with pytest.raises(Exception, match="reward must be"):
        GpuPlacementEnv(traces=[trace], nodes=nodes, reward="bogus")
