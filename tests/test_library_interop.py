"""The library as researchers drive it: SB3's vector-env helper, environments given odd actions or
traces that share a name, one RCA model called from two threads, one split named as a string."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from fleetmind.data.openb import _resolve, load_openb_nodes, load_openb_trace
from fleetmind.envs.gpu_placement_env import GpuPlacementEnv


@pytest.mark.parametrize(
    "env_id", ["fleetmind/GpuPlacement-v0", "fleetmind/MultiClusterPlacement-v0"]
)
def test_sb3_make_vec_env_builds_every_registered_env(env_id: str) -> None:
    """``make_vec_env(env_id)`` asks for ``render_mode="rgb_array"`` and falls back to none only on
    a ``TypeError`` (stable_baselines3/common/env_util.py); a ConfigError stopped it."""
    from stable_baselines3.common.env_util import make_vec_env

    import fleetmind.envs  # noqa: F401  (registers the ids)

    with pytest.warns(UserWarning, match="render_mode"):  # gymnasium's own note on the ask
        venv = make_vec_env(env_id, n_envs=2, seed=0)
    try:
        obs = venv.reset()
        assert obs.shape[0] == 2 and np.isfinite(obs).all()
    finally:
        venv.close()


def _small(tmp_path: Path) -> tuple[object, object, object]:
    """Two different traces with the same name (a variant saved as the real file's name in
    another folder) and a node list of 40 nodes."""
    lines = Path(_resolve("default", "trace")).read_text().splitlines()
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    (a / "openb_pod_list_default.csv").write_text("\n".join(lines[:401]) + "\n")
    (b / "openb_pod_list_default.csv").write_text("\n".join([lines[0], *lines[1:401:2]]) + "\n")
    node_lines = Path(load_openb_nodes().source).read_text().splitlines()
    (tmp_path / "nodes.csv").write_text("\n".join(node_lines[:41]) + "\n")
    ta = load_openb_trace(a / "openb_pod_list_default.csv")
    tb = load_openb_trace(b / "openb_pod_list_default.csv")
    assert ta.name == tb.name and len(ta) != len(tb)
    return ta, tb, load_openb_nodes(tmp_path / "nodes.csv")


def test_traces_that_share_a_name_do_not_share_a_cached_prefix(tmp_path: Path) -> None:
    """The FGD prefix is cached per trace: keyed on the name, trace B started from trace A's
    state, silently."""
    ta, tb, nodes = _small(tmp_path)
    kw = {"traces": [ta, tb], "nodes": nodes, "fgd_until_pct": 50}
    cached, fresh = GpuPlacementEnv(**kw), GpuPlacementEnv(**kw, cache_prefix=False)
    opts = {"workload_seed": 5}
    cached.reset(options={"trace": ta, **opts})
    got, _ = cached.reset(options={"trace": tb, **opts})
    want, _ = fresh.reset(options={"trace": tb, **opts})
    assert np.array_equal(got, want)
    assert cached.state.allocated_gpu_milli == fresh.state.allocated_gpu_milli


def test_bad_actions_are_errors_not_asserts(tmp_path: Path) -> None:
    """``assert`` vanishes under ``python -O``, and ``int(1.7)`` took a float action as 1."""
    ta, _, nodes = _small(tmp_path)
    env = GpuPlacementEnv(traces=[ta], nodes=nodes)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(0)
    env.reset(seed=0)
    mask = env.action_masks()
    with pytest.raises(ValueError, match="not one of"):
        env.step(1.7)
    with pytest.raises(ValueError, match="not one of"):
        env.step(env.n_candidates)
    env.step(np.int64(np.flatnonzero(mask)[0]))  # NumPy integers, as SB3 passes them


def test_the_gat_gives_torch_its_thread_count_back_under_concurrent_calls(tmp_path: Path) -> None:
    """Each call saved and restored ``torch.set_num_threads`` (process-wide) around itself: two
    overlapping calls left the process at one thread for good."""
    import torch

    from fleetmind.data.rca_dataset import load_dataset
    from fleetmind.data.rca_gen.generate import DatasetSpec, generate_dataset
    from fleetmind.rca.gat_analyzer import GATAnalyzer

    spec = DatasetSpec(n_incidents=12, seed=3, n_graphs=(1, 1, 1), large_fraction=0, workers=1)
    generate_dataset(tmp_path / "ds", spec)
    ds = load_dataset(tmp_path / "ds", splits="test")  # one split as a string
    inc = ds.split("test")[0]
    graph = ds.graph_of(inc)
    gat = GATAnalyzer.load(None)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        for _ in range(30):
            barrier = threading.Barrier(2)

            def work(barrier: threading.Barrier = barrier) -> None:
                barrier.wait()
                gat.find_root_causes(graph, inc["alerts"], top_k=3)

            threads = [threading.Thread(target=work) for _ in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
