"""fleetmind/GpuPlacement-v0 candidate features stay exactly what the released PPO model saw.

``tests/data/envs_fgd_candidates.npz`` holds, for a few seeded runs on openb traces (whole-GPU,
GPU-sharing, CPU-only and multi-GPU heavy ones, and an FGD-prefix run that crosses episode
resets), the candidate nodes, the mask, each candidate's GPUs, the rewards and a SHA-256 digest of
every observation, recorded with the implementation the released model was trained on (commit
8963d09). Any change of the candidate set, their order, their GPUs, a feature value (by even one
bit) or the reward fails here. Actions are ``step % n_valid`` so that the runs leave FGD's path.

Regenerate (only for an intended change of the features, which also needs a retrained model)::

    .venv/bin/python tests/test_envs_fgd_candidates.py
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

REF = Path(__file__).resolve().parent / "data" / "envs_fgd_candidates.npz"

# (run name, trace, workload seeds in episode order, steps, every how many openb nodes, env kwargs)
RUNS: tuple[tuple[str, str, tuple[int, ...], int, int, dict], ...] = (
    ("default", "default", (42,), 250, 1, {}),
    ("gpushare100", "gpushare100", (44,), 250, 1, {}),
    ("cpu250", "cpu250", (45,), 250, 1, {}),
    ("multigpu40", "multigpu40", (46,), 250, 1, {}),
    # short episodes on every 8th node: the end of an episode, a fresh workload on the same state
    # object (state.reset) and a repeated workload restored from the FGD-prefix snapshot
    (
        "prefix",
        "default",
        (48, 148, 48),
        150,
        8,
        {"fgd_until_pct": 90.0, "stop_arrived_pct": 101.0},
    ),
)


def record(
    trace: str, seeds: tuple[int, ...], steps: int, every: int, kw: dict
) -> dict[str, np.ndarray]:
    """Run the env and collect the per-step candidate data (see the module docstring)."""
    from dataclasses import fields

    from fleetmind.data.openb import OpenbNodes, load_openb_nodes
    from fleetmind.envs.gpu_placement_env import GpuPlacementEnv

    nodes = load_openb_nodes()
    if every > 1:
        cut = {f.name: getattr(nodes, f.name) for f in fields(nodes)}
        nodes = OpenbNodes(
            **{k: v[::every] if isinstance(v, np.ndarray) else v for k, v in cut.items()}
        )
    env = GpuPlacementEnv(trace, nodes=nodes, **kw)
    n_episodes = 1
    ep = 0
    obs, _ = env.reset(options={"workload_seed": seeds[ep]})
    k = env.n_candidates
    nodes = np.zeros((steps, k), dtype=np.int16)
    gpus = np.zeros((steps, k), dtype=np.int16)  # bit g set: candidate uses GPU g
    mask = np.zeros((steps, k), dtype=bool)
    reward = np.zeros(steps)
    digest = hashlib.sha256()
    for t in range(steps):
        m = env.action_masks()
        mask[t] = m
        for a in range(k):
            node, g = env.candidate(a)
            nodes[t, a] = node
            gpus[t, a] = sum(1 << int(x) for x in g)
        digest.update(np.ascontiguousarray(obs, dtype=np.float32).tobytes())
        obs, reward[t], term, trunc, _ = env.step(t % int(m.sum()))
        if term or trunc:
            ep = (ep + 1) % len(seeds)
            n_episodes += 1
            obs, _ = env.reset(options={"workload_seed": seeds[ep]})
    return {
        "nodes": nodes,
        "gpus": gpus,
        "mask": mask,
        "reward": reward,
        "obs_sha256": np.array(digest.hexdigest()),
        "last_obs": obs.astype(np.float32),
        "n_episodes": np.array(n_episodes),
    }


@pytest.fixture(scope="module")
def reference(shared_data) -> dict[str, np.ndarray]:
    with np.load(REF) as z:
        return dict(z)


@pytest.mark.parametrize("run", RUNS, ids=[r[0] for r in RUNS])
def test_candidates_match_reference(run, reference):
    name, trace, seeds, steps, every, kw = run
    got = record(trace, seeds, steps, every, kw)
    assert int(got["n_episodes"]) == int(reference[f"{name}/n_episodes"])
    for key in ("nodes", "mask", "gpus"):
        np.testing.assert_array_equal(got[key], reference[f"{name}/{key}"], err_msg=f"{name} {key}")
    np.testing.assert_array_equal(got["reward"], reference[f"{name}/reward"])
    np.testing.assert_array_equal(got["last_obs"], reference[f"{name}/last_obs"])
    assert str(got["obs_sha256"]) == str(reference[f"{name}/obs_sha256"]), (
        f"{name}: an observation changed (candidates, GPUs and rewards are the same)"
    )


def main() -> None:
    out: dict[str, np.ndarray] = {}
    for name, trace, seeds, steps, every, kw in RUNS:
        for key, value in record(trace, seeds, steps, every, kw).items():
            out[f"{name}/{key}"] = value
        print(name, str(out[f"{name}/obs_sha256"])[:16], int(out[f"{name}/n_episodes"]), flush=True)
    REF.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(REF, **out)
    print(f"wrote {REF} ({REF.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
