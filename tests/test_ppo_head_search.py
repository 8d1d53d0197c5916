"""Search of the released network's logit head (the 2026-12-01 head-search experiment): parity, search, export."""

from __future__ import annotations

import importlib
import json

import numpy as np
import pytest
import torch
from ppo_helpers import load_tiny

from fleetmind.data.errors import ModelLoadError
from fleetmind.data.paths import MODELS_DIR
from fleetmind.envs.gpu_placement_env import GpuPlacementEnv
from fleetmind.rl.export import OnnxActor, load_sb3_model, load_torch
from fleetmind.rl.teacher import LinearScorer, episode_metric

# The experiment is not installed: it imports from the checkout root (python -m pytest puts it on
# sys.path); its dated folder name is no identifier, hence importlib.
_exp = importlib.import_module(
    "benchmarks.experiments.2026-11-29-placement-teacher-search.head_search"
)
HeadScorer = _exp.HeadScorer
export_head = _exp.export_head
head_cem_search = _exp.head_cem_search
load_scorer = _exp.load_scorer
mean_gap_objective = _exp.mean_gap_objective
released_head = _exp.released_head

RELEASED = MODELS_DIR / "placement"
pytestmark = pytest.mark.skipif(
    not (RELEASED / "policy.pt").is_file(), reason="released placement model absent"
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    torch.set_num_threads(1)
    nodes, trace = load_tiny(tmp_path_factory.mktemp("head"))
    env = GpuPlacementEnv(traces=[trace], nodes=nodes, n_candidates=16)
    return env, trace


def _observations(env, trace, scorer, seeds, explore: float = 0.3):
    """Observations and masks along episodes that mix the scorer's and random valid actions."""
    rng = np.random.default_rng(0)
    obs_l, mask_l = [], []
    for seed in seeds:
        obs, _ = env.reset(options={"trace": trace.name, "workload_seed": seed})
        done = False
        while not done:
            mask = env.action_masks()
            obs_l.append(obs.copy())
            mask_l.append(mask.copy())
            a = scorer(obs, mask)
            if rng.random() < explore:
                a = int(rng.choice(np.flatnonzero(mask)))
            obs, _, term, trunc, _ = env.step(a)
            done = term or trunc
    return np.asarray(obs_l), np.asarray(mask_l)


def test_released_head_reproduces_the_released_model(tiny):

    env, trace = tiny
    scorer = HeadScorer.from_model_dir(RELEASED)
    obs, masks = _observations(env, trace, scorer, seeds=[1, 2, 3])
    assert len(obs) >= 200
    mine = np.array([scorer(o, m) for o, m in zip(obs, masks, strict=True)])
    assert all(masks[i, a] for i, a in enumerate(mine))
    actor = load_torch(RELEASED / "policy.pt")
    np.testing.assert_array_equal(mine, actor.predict(obs, masks))
    model = load_sb3_model(RELEASED / "ppo.zip")  # the SB3 file holds the released actor too
    ppo = [
        int(model.predict(o, action_masks=m, deterministic=True)[0])
        for o, m in zip(obs, masks, strict=True)
    ]
    np.testing.assert_array_equal(mine, ppo)
    # the decisions are not trivially FGD's: the network deviates from candidate 0 somewhere
    assert (mine != 0).any()


def test_head_search_is_deterministic_keeps_scale_and_never_worse(tiny):
    env, trace = tiny
    start = HeadScorer.from_model_dir(RELEASED)
    eps = [(trace.name, 1), (trace.name, 2)]
    kw = dict(generations=2, population=3, n_elite=2, init_sd_rel=1.0, seed=5)
    seen, started = [], []
    a = head_cem_search(
        env,
        start,
        eps,
        on_generation=lambda *x: seen.append(x[2]),
        on_start=lambda f, i: started.append((f, i)),
        **kw,
    )
    assert started == [(a.fgd_metrics, a.init_metrics)]
    b = head_cem_search(env, start, eps, **kw)
    assert np.array_equal(a.best.head, b.best.head) and a.history == b.history
    assert len(seen) == 2 and seen[-1] == a.history
    assert a.best_score <= a.init_score
    # the reported score is the best head's real score on its episodes
    real = np.mean([episode_metric(env, a.best, t, s) for t, s in eps])
    assert real == pytest.approx(a.best_score)
    fgd = np.mean([episode_metric(env, lambda o, m: 0, t, s) for t, s in eps])
    assert a.fgd_score == pytest.approx(fgd)
    # the bias is not searched and every stored head keeps the released norm
    h = start.hidden
    for s in (a.best, a.final_mean):
        assert s.head[h] == start.head[h]
        assert np.linalg.norm(s.head[:h]) == pytest.approx(np.linalg.norm(start.head[:h]))
    assert not np.allclose(a.final_mean.head, start.head)
    assert a.init_sd == pytest.approx(np.linalg.norm(start.head[:h]) / np.sqrt(h))


def test_exported_copy_picks_the_scorers_actions(tiny, tmp_path):
    from sb3_contrib import MaskablePPO

    from fleetmind.rl.policy_adapter import load_ppo_policy

    env, trace = tiny
    start = HeadScorer.from_model_dir(RELEASED)
    rng = np.random.default_rng(1)
    head = start.head.copy()
    head[: start.hidden] += (
        0.8 * np.abs(head[: start.hidden]).mean() * rng.normal(size=start.hidden)
    )
    searched = start.with_head(head)
    paths = export_head(head, RELEASED, tmp_path / "m", note={"round": "head-search-test"})
    obs, masks = _observations(env, trace, searched, seeds=[4, 5])
    mine = np.array([searched(o, m) for o, m in zip(obs, masks, strict=True)])
    released = np.array([start(o, m) for o, m in zip(obs, masks, strict=True)])
    assert (mine != released).any()  # the perturbed head really decides differently
    np.testing.assert_array_equal(load_torch(paths["torch"]).predict(obs, masks), mine)
    np.testing.assert_array_equal(OnnxActor(paths["onnx"]).predict(obs, masks), mine)
    model = MaskablePPO.load(paths["ppo"], device="cpu")
    ppo = [
        int(model.predict(o, action_masks=m, deterministic=True)[0])
        for o, m in zip(obs, masks, strict=True)
    ]
    np.testing.assert_array_equal(ppo, mine)
    # the row MLP and critic are the released ones
    src = load_torch(RELEASED / "policy.pt").scorer.state_dict()
    dst = load_torch(paths["torch"]).scorer.state_dict()
    for k in src:
        if not k.startswith("logit_head"):
            assert torch.equal(src[k], dst[k])
    meta = json.loads(paths["metadata"].read_text())
    assert meta["head_search"]["round"] == "head-search-test" and meta["version"].endswith("+head")
    again = load_scorer(paths["head"])
    assert isinstance(again, HeadScorer) and np.allclose(again.head, head)
    assert np.allclose(released_head(load_torch(paths["torch"])), head)
    pol = load_ppo_policy(paths["onnx"].parent)
    assert pol.version == meta["version"]


def test_mean_gap_objective_weighs_trace_families_equally():
    obj = mean_gap_objective(["a", "a", "a", "b"])
    fgd = np.array([4.0, 4.0, 4.0, 10.0])
    assert obj(fgd, fgd) == 0.0
    # a: mean 3 vs 4 (-25 %), b: 11 vs 10 (+10 %) -> mean -7.5 %
    assert obj(np.array([3.0, 3.0, 3.0, 11.0]), fgd) == pytest.approx(-0.075)
    with pytest.raises(ValueError, match="expected 4"):
        obj(np.ones(3), fgd)


def test_scorer_files_and_bad_heads(tmp_path):
    start = HeadScorer.from_model_dir(RELEASED)
    p = start.save(tmp_path / "h.json")
    assert isinstance(load_scorer(p), HeadScorer)
    lin = LinearScorer.fgd(16, 18).save(tmp_path / "lin.json")
    assert isinstance(load_scorer(lin), LinearScorer)
    with pytest.raises(ValueError, match="shape"):
        start.with_head(np.zeros(3))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "fleetmind-head-scorer/1", "model_dir": str(RELEASED)}))
    with pytest.raises(ModelLoadError, match="bad.json"):
        HeadScorer.load(bad)
    with pytest.raises(ModelLoadError, match="does not exist"):
        HeadScorer.load(tmp_path / "none.json")
