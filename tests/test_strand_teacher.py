"""The host-stranding signal (envs) and the strand-penalty teacher (rl/teacher.py)."""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import numpy as np
import pytest
from ppo_helpers import load_tiny

from fleetmind.data.errors import ModelLoadError
from fleetmind.envs.candidates import host_demand_per_gpu_milli, stranded_gpu_milli
from fleetmind.envs.gpu_placement_env import GpuPlacementEnv
from fleetmind.rl.ppo import collect_teacher
from fleetmind.rl.teacher import LinearScorer, StrandPenaltyScorer, episode_metric, load_teacher


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The tiny fleet with its pods' CPU requests x 4, so that host resources strand GPUs often
    (with the plain tiny trace, CPU is plentiful and candidates rarely differ)."""
    nodes, trace = load_tiny(tmp_path_factory.mktemp("strand"))
    trace = dataclasses.replace(trace, name="tiny-cpu-x4", cpu_milli=trace.cpu_milli * 4)
    env = GpuPlacementEnv(traces=[trace], nodes=nodes, n_candidates=8)
    return env, trace


def test_stranded_gpu_milli_by_hand() -> None:
    # 4 idle GPUs; 10 mCPU and 2 MiB per milli-GPU: 20,000 mCPU serves 2,000 milli
    got = stranded_gpu_milli(
        np.array([4000, 4000, 4000, 0]),
        np.array([20000, 80000, 80000, 0]),
        np.array([10**9, 10**9, 6000, 0]),
        10.0,
        2.0,
    )
    np.testing.assert_allclose(got, [2000, 0, 1000, 0])
    # no host demand: nothing is ever stranded; negative free resources count as none
    np.testing.assert_allclose(stranded_gpu_milli(4000, 0, 0, 0.0, 0.0), 0)
    np.testing.assert_allclose(stranded_gpu_milli(1000, -5, 10**9, 1.0, 1.0), 1000)


def test_host_demand_counts_gpu_pods_only(tiny) -> None:
    _, trace = tiny
    c, m = host_demand_per_gpu_milli(trace)
    gpu = trace.gpu_request > 0
    assert c == pytest.approx(trace.cpu_milli[gpu].sum() / trace.gpu_request[gpu].sum())
    assert m == pytest.approx(trace.memory_mib[gpu].sum() / trace.gpu_request[gpu].sum())
    assert trace.cpu_milli[~gpu].sum() > 0  # CPU-only pods exist and were left out


def test_env_deltas_match_a_recomputation(tiny) -> None:
    env, trace = tiny
    with pytest.raises(RuntimeError, match="reset"):
        GpuPlacementEnv(traces=[trace], nodes=env.nodes, n_candidates=8).host_stranding_deltas()
    obs, _ = env.reset(options={"trace": trace.name, "workload_seed": 5})
    c, m = env._host_demand  # noqa: SLF001 - checked against the workload below
    seen_nonzero = False
    for _ in range(40):
        d = env.host_stranding_deltas()
        mask = env.action_masks()
        assert d.shape == (8,) and (d[~mask] == 0).all()
        st, pod = env.state, env._pods[env._t]  # noqa: SLF001
        for k in np.flatnonzero(mask):
            n = env._cand.nodes[k]  # noqa: SLF001
            idle = st.gpu_idle[n].sum()
            before = stranded_gpu_milli(idle, st.cpu_free[n], st.mem_free[n], c, m)
            after = stranded_gpu_milli(
                idle - pod.gpu_request,
                st.cpu_free[n] - pod.cpu_milli,
                st.mem_free[n] - pod.memory_mib,
                c,
                m,
            )
            assert d[k] == pytest.approx((after - before) / 1000.0)
        seen_nonzero |= bool(np.abs(d).max() > 0)
        obs, _, term, trunc, _ = env.step(int(np.flatnonzero(mask)[0]))
        if term or trunc:
            break
    assert seen_nonzero  # the tiny fleet does strand GPUs: the test has teeth


def test_strand_scorer_penalises_stranding_and_round_trips(tiny, tmp_path) -> None:
    env, trace = tiny
    base = LinearScorer.fgd(8, env.n_cand_features)
    # alpha 0 is the base scorer, without binding
    zero = StrandPenaltyScorer(base, 0.0)
    assert episode_metric(env, zero, trace.name, 7) == episode_metric(env, base, trace.name, 7)
    strand = StrandPenaltyScorer(base, 50.0)
    obs, _ = env.reset(options={"trace": trace.name, "workload_seed": 7})
    with pytest.raises(RuntimeError, match="bind"):
        strand(obs, env.action_masks())
    strand.bind(env)
    differs = 0
    done = False
    while not done:
        mask = env.action_masks()
        a = strand(obs, mask)
        assert mask[a]
        d = env.host_stranding_deltas()
        # with a large alpha the choice strands no more than any other valid candidate
        assert d[a] <= d[mask].min() + 1.0 / 50.0 + 1e-9
        differs += a != base(obs, mask)
        obs, _, term, trunc, _ = env.step(a)
        done = term or trunc
    assert differs > 0
    path = strand.save(tmp_path / "strand.json")
    again = load_teacher(path)
    assert isinstance(again, StrandPenaltyScorer) and again.alpha == 50.0
    np.testing.assert_array_equal(again.base.weights, base.weights)
    assert isinstance(load_teacher(base.save(tmp_path / "lin.json")), LinearScorer)
    data = collect_teacher(env, 1, 0, 0.99, teacher=again.bind(env))
    assert len(data.actions) > 20 and data.masks[np.arange(len(data.actions)), data.actions].all()


def test_strand_scorer_bad_input(tiny, tmp_path) -> None:
    env, _ = tiny
    base = LinearScorer.fgd(8, env.n_cand_features)
    with pytest.raises(ValueError, match="alpha"):
        StrandPenaltyScorer(base, -1.0)
    with pytest.raises(TypeError, match="host_stranding_deltas"):
        StrandPenaltyScorer(base, 1.0).bind(SimpleNamespace())
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "fleetmind-strand-scorer/1", "alpha": 1.0}))
    with pytest.raises(ModelLoadError, match="not a fleetmind strand scorer"):
        load_teacher(bad)
    bad.write_text("{not json")
    with pytest.raises(ModelLoadError, match="not a JSON teacher file"):
        load_teacher(bad)
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_teacher(tmp_path / "missing.json")


def test_restricted_model_scarcity_by_hand() -> None:
    from fleetmind.envs.candidates import restricted_model_scarcity
    from fleetmind.envs.core import ClusterState

    # model 0: 2 GPUs (2,000 milli); model 1: 4 GPUs (4,000 milli)
    st = ClusterState(
        cpu_milli=np.array([8000, 8000]),
        memory_mib=np.array([1024, 1024]),
        num_gpu=np.array([2, 4]),
        model_id=np.array([0, 1]),
    )
    trace = SimpleNamespace(
        gpu_request=np.array([3000, 600, 1000, 0]),
        gpu_spec_mask=np.array([0b01, 0b11, -1, 0b10]),  # the last asks for no GPU
    )
    r = restricted_model_scarcity(trace, st)
    # 3,000 on model 0 alone; 600 spread 1:2 over both; the unrestricted and CPU-only pods count 0
    np.testing.assert_allclose(r, [(3000 + 200) / 2000, 400 / 4000])


def test_env_scarcity_penalties_and_the_beta_scorer(tiny, tmp_path) -> None:
    env, trace = tiny  # 10 % of its GPU pods may use V100M32 or T4 only
    obs, _ = env.reset(options={"trace": trace.name, "workload_seed": 11})
    r = env._scarcity  # noqa: SLF001
    assert r.max() > 0
    base = LinearScorer.fgd(8, env.n_cand_features)
    scorer = StrandPenaltyScorer(base, 0.0, 100.0).bind(env)
    seen = {"restricted": 0, "free": 0}
    done = False
    while not done:
        mask = env.action_masks()
        pen = env.model_scarcity_penalties()
        pod = env._pods[env._t]  # noqa: SLF001
        if pod.num_gpu == 0 or pod.gpu_spec_mask != -1:
            assert not pen.any()
            seen["restricted"] += pod.num_gpu > 0
        else:
            nodes = env._cand.nodes[mask]  # noqa: SLF001
            want = r[env.state.model_id[nodes]] * pod.gpu_request / 1000.0
            np.testing.assert_allclose(pen[mask], want)
            seen["free"] += 1
            a = scorer(obs, mask)
            assert pen[a] <= pen[mask].min() + 1.0 / 100.0 + 1e-9
        obs, _, term, trunc, _ = env.step(int(scorer(obs, mask)))
        done = term or trunc
    assert seen["restricted"] > 0 and seen["free"] > 0
    again = load_teacher(scorer.save(tmp_path / "s.json"))
    assert (again.alpha, again.beta) == (0.0, 100.0)
    old = json.loads((tmp_path / "s.json").read_text())
    del old["beta"]  # a file of the first strand teacher: no beta key
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert load_teacher(tmp_path / "old.json").beta == 0.0
    with pytest.raises(ValueError, match="beta"):
        StrandPenaltyScorer(base, 1.0, -2.0)
