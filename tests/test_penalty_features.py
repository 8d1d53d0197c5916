"""The stranding and model-scarcity signals as candidate features (``penalty_features=True``).

The teacher of the fgd-mode release subtracts two hand-set penalties read from the env; with this
option the same two signals are columns 18 and 19 of every candidate row, so that a network (and
PPO) can weigh them from the observation alone, in training and in the exported policy.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from ppo_helpers import load_tiny, write_tiny

from fleetmind.data.errors import ConfigError, ModelLoadError
from fleetmind.envs.candidates import (
    N_CAND_FEATURES,
    N_PENALTY_FEATURES,
    SCARCITY_FEATURE_SCALE,
    STRAND_FEATURE_SCALE,
    PenaltyContext,
    model_scarcity_penalties,
    stranding_deltas,
)
from fleetmind.envs.fgd_mode import evaluate_fgd
from fleetmind.envs.gpu_placement_env import GpuPlacementEnv
from fleetmind.rl.teacher import LinearScorer, StrandPenaltyScorer

K = 8


def _envs(tmp_path):  # noqa: ANN001, ANN202 - test helper
    nodes, trace = load_tiny(tmp_path)
    kw = dict(traces=[trace], nodes=nodes, n_candidates=K)
    return GpuPlacementEnv(**kw), GpuPlacementEnv(**kw, penalty_features=True), trace


def test_columns_are_the_two_signals_and_the_rest_is_unchanged(tmp_path):
    narrow, wide, trace = _envs(tmp_path)
    f = N_CAND_FEATURES + N_PENALTY_FEATURES
    assert wide.n_cand_features == f and wide.observation_space.shape == (K * f + 10,)
    o18, _ = narrow.reset(options={"workload_seed": 3})
    o20, _ = wide.reset(options={"workload_seed": 3})
    ctx = PenaltyContext.from_trace(trace, wide.state)
    seen_strand = seen_scarce = 0
    rng = np.random.default_rng(0)
    for _ in range(60):
        m = wide.action_masks()
        assert np.array_equal(m, narrow.action_masks())
        rows = o20[: K * f].reshape(K, f)
        # the first 18 columns and the globals are exactly the narrow env's observation
        np.testing.assert_array_equal(rows[:, :N_CAND_FEATURES], o18[: K * 18].reshape(K, 18))
        np.testing.assert_array_equal(o20[K * f :], o18[K * 18 :])
        pod = wide._pods[wide._t]  # noqa: SLF001
        nodes = wide._cand.nodes[m]  # noqa: SLF001
        strand = stranding_deltas(wide.state, pod, nodes, ctx.cpu_per_milli, ctx.mem_per_milli)
        scarce = model_scarcity_penalties(wide.state, pod, nodes, ctx.scarcity)
        np.testing.assert_allclose(
            rows[m, 18], np.clip(strand / STRAND_FEATURE_SCALE, -1, 4), rtol=1e-6, atol=1e-7
        )
        np.testing.assert_allclose(
            rows[m, 19], scarce / SCARCITY_FEATURE_SCALE, rtol=1e-6, atol=1e-7
        )
        assert not rows[~m].any()  # padding rows stay zero
        seen_strand += int(np.any(rows[m, 18] != 0))
        seen_scarce += int(np.any(rows[m, 19] != 0))
        a = int(rng.choice(np.flatnonzero(m)))
        o18, _, done, trunc, _ = narrow.step(a)
        o20, _, done2, trunc2, _ = wide.step(a)
        assert (done, trunc) == (done2, trunc2)
        if done or trunc:
            break
    # the tiny trace has model-restricted pods and tight hosts: both signals really vary
    assert seen_strand > 0 and seen_scarce > 0


def test_scarcity_does_not_depend_on_the_trace_file_size(tmp_path):
    """fgd mode resamples every trace to 1.3x capacity, so the context rescales to that total."""
    nodes, trace = load_tiny(tmp_path)
    env = GpuPlacementEnv(traces=[trace], nodes=nodes, n_candidates=K)
    idx = np.arange(len(trace))
    twice = trace.take(np.concatenate([idx, idx]))  # the same pod mix in a file twice as long
    a = PenaltyContext.from_trace(trace, env.state).scarcity
    b = PenaltyContext.from_trace(twice, env.state).scarcity
    assert a.any()
    np.testing.assert_allclose(b, a, rtol=1e-12)
    # and it is the resampled workload's scarcity: demand scaled to 1.3x capacity
    from fleetmind.envs.candidates import restricted_model_scarcity

    raw = restricted_model_scarcity(trace, env.state)
    scale = 1.3 * env.state.gpu_capacity_milli / trace.gpu_request.sum()
    np.testing.assert_allclose(a, raw * scale)


def test_widened_teacher_chooses_exactly_as_before(tmp_path):
    narrow, wide, _ = _envs(tmp_path)
    rng = np.random.default_rng(1)
    lin = LinearScorer(rng.normal(size=3 * 18), K, 18)
    strand = StrandPenaltyScorer(lin, 4.0, 4.0)
    wlin, wstrand = lin.widen(20), strand.widen(20)
    assert wlin.n_cand_features == 20 and np.count_nonzero(wlin.weights) == 3 * 18
    with pytest.raises(ValueError, match="narrow"):
        wlin.widen(18)
    strand.bind(narrow)
    wstrand.bind(wide)
    o18, _ = narrow.reset(options={"workload_seed": 5})
    o20, _ = wide.reset(options={"workload_seed": 5})
    for _ in range(40):
        m = narrow.action_masks()
        np.testing.assert_allclose(wlin.scores(o20), lin.scores(o18))
        a = strand(o18, m)
        assert wstrand(o20, m) == a
        o18, _, done, trunc, _ = narrow.step(a)
        o20, *_ = wide.step(a)
        if done or trunc:
            break


def test_context_json_round_trip_and_malformed_input(tmp_path):
    nodes, trace = load_tiny(tmp_path)
    env = GpuPlacementEnv(traces=[trace], nodes=nodes, n_candidates=K)
    ctx = PenaltyContext.from_trace(trace, env.state)
    back = PenaltyContext.from_json(json.loads(json.dumps(ctx.to_json())))
    assert back.cpu_per_milli == ctx.cpu_per_milli and np.array_equal(back.scarcity, ctx.scarcity)
    for bad in (
        {},
        {"cpu_per_milli": 1, "mem_per_milli": 1, "scarcity": ["x"]},
        {"cpu_per_milli": float("nan"), "mem_per_milli": 1, "scarcity": [0.1]},
    ):
        with pytest.raises(ValueError, match="malformed penalty context"):
            PenaltyContext.from_json(bad)


@pytest.fixture(scope="module")
def wide_model(tmp_path_factory):
    """A short fgd-mode run with --penalty-features (clone of a strand teacher + 64 PPO steps)."""
    from test_ppo_train import tiny_args

    from fleetmind.training.recipes.fgd import run

    folder = tmp_path_factory.mktemp("wide")
    nodes, pods = write_tiny(folder)
    strand = StrandPenaltyScorer(LinearScorer.fgd(K, 18), 4.0, 4.0).save(folder / "strand.json")
    summary = run(
        tiny_args(
            folder,
            nodes,
            pods,
            timesteps=64,
            workload_seeds=[1],
            bc_epochs=2,
            teacher=str(strand),
            register=False,
            reward="metric",
            penalty_features=True,
        )
    )
    return summary, nodes, pods


def test_trained_model_records_the_features_and_evaluates(wide_model):
    from pathlib import Path

    from fleetmind.data.openb import load_openb_nodes, load_openb_trace
    from fleetmind.rl.policy_adapter import load_ppo_policy

    summary, nodes, pods = wide_model
    art = Path(summary["artifact"])
    meta = json.loads((art / "metadata.json").read_text())
    assert meta["builder"] == {"penalty_features": True}
    assert PenaltyContext.from_json(meta["penalty_context"]).scarcity.any()
    # the teacher file keeps F = 18 (it reads nothing else); the card names the option
    assert json.loads((art / "teacher.json").read_text())["n_cand_features"] == 18
    card = (art / "model_card.md").read_text()
    assert "--penalty-features" in card and "--reward metric" in card
    n, t = load_openb_nodes(nodes), load_openb_trace(pods)
    for name in ("policy.onnx", "clone.onnx"):
        pol = load_ppo_policy(art / name)
        assert pol.builder.n_cand_features == 20
        res = evaluate_fgd(t, {"ppo": pol}, [42], nodes=n)
        v = res["policies"]["ppo"]["per_seed"]
        assert all(0.0 <= x["unallocated_gpu_pct_at_100"] <= 100.0 for x in v.values())


def test_mismatched_metadata_is_a_clear_load_error(wide_model, tmp_path):
    import shutil
    from pathlib import Path

    from fleetmind.rl.policy_adapter import load_ppo_policy

    art = Path(wide_model[0]["artifact"])
    bad = tmp_path / "m"
    shutil.copytree(art, bad)
    meta = json.loads((bad / "metadata.json").read_text())
    for backend in ("onnx", "torch"):  # F = 20 actor, metadata without the builder option
        (bad / "metadata.json").write_text(json.dumps({**meta, "builder": {}}))
        with pytest.raises(ModelLoadError, match="observation values"):
            load_ppo_policy(bad, backend=backend)
    for builder in ({"bogus": 1}, {"penalty_features": "yes"}, {"n_fgd": "6"}, [1]):
        (bad / "metadata.json").write_text(json.dumps({**meta, "builder": builder}))
        with pytest.raises(ModelLoadError, match="builder"):
            load_ppo_policy(bad)
    (bad / "metadata.json").write_text(json.dumps({**meta, "penalty_context": {"x": 1}}))
    with pytest.raises(ModelLoadError, match="malformed penalty context"):
        load_ppo_policy(bad)
    # without a trace (the service) the stored context is required
    no_ctx = {k: v for k, v in meta.items() if k != "penalty_context"}
    (bad / "metadata.json").write_text(json.dumps(no_ctx))
    pol = load_ppo_policy(bad)
    from fleetmind.envs.core import ClusterState

    with pytest.raises(ConfigError, match="penalty"):
        pol.reset(ClusterState.from_openb(_tiny_nodes(tmp_path)))


def _tiny_nodes(folder):  # noqa: ANN001, ANN202 - test helper
    from fleetmind.data.openb import load_openb_nodes

    nodes, _ = write_tiny(folder)
    return load_openb_nodes(nodes)


def test_cli_refuses_penalty_features_in_dynamic_mode(capsys):
    from fleetmind.cli import main

    rc = main(["sched", "train", "--mode", "dynamic", "--trace", "default", "--penalty-features"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "--penalty-features" in err and "Traceback" not in err


def test_service_places_with_a_penalty_feature_model(wide_model, tmp_path):
    """The service has no workload trace: the model's stored penalty context feeds columns 18-19."""
    from pathlib import Path

    from fastapi.testclient import TestClient

    from fleetmind.serving.app import create_app
    from fleetmind.serving.settings import Settings

    art = Path(wide_model[0]["artifact"])
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/fm.db",
        rca_model="baseline:upstream-coverage",
        placement_model=str(art),
        incident_worker=False,
    )
    with TestClient(create_app(settings)) as c:
        r = c.post("/api/v1/placements", json={"num_gpu": 1})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["policy"] == "ppo" and body["fallback_reason"] is None, body
        assert body["model_version"].startswith("GpuPlacement-v0"), body
