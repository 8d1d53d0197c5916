"""Paired, critic-free PPO over the dynamic-mode clone (``rl/paired.py``,
``fleetmind sched train --mode dynamic --algo paired``): it learns, its advantages are paired, its
workloads avoid the frozen evaluation set, and its export loads like any dynamic-mode model."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from dynamic_helpers import RecordingBar

from fleetmind import cli
from fleetmind.data.paths import MODELS_DIR
from fleetmind.envs.multicluster_env import MultiClusterPlacementEnv
from fleetmind.rl.dynamic_eval import Workload, load_dynamic_actor, model_config
from fleetmind.rl.export import OnnxActor
from fleetmind.rl.paired import (
    Episode,
    PairedHyperparams,
    greedy_metrics,
    group_advantages,
    load_clone,
    masked_logits,
    paired_iteration,
    paired_iteration_as_jobs,
    run_episode,
    trainable_copy,
)
from fleetmind.rl.scaleout import run_tasks

pytestmark = pytest.mark.filterwarnings("ignore:offered load:UserWarning")

RELEASED = MODELS_DIR / "placement-dynamic"


def _tiny_envs(n_jobs: int = 128) -> list:
    """Two tiny workloads: 3 % of the openb nodes, ``n_jobs`` jobs (queues form)."""
    from fleetmind.envs.multicluster_env import MultiClusterPlacementEnv

    cfg = replace(model_config(RELEASED), n_jobs=n_jobs, node_fraction=0.03)
    return [MultiClusterPlacementEnv(**cfg.env_kwargs(t)) for t in ("multigpu20", "gpushare40")]


@pytest.mark.parametrize("only_onnx", [False, True])
def test_clone_loads_with_the_logits_of_its_onnx_file(shared_data, tmp_path, only_onnx) -> None:
    """From the released folder (``policy.pt``, byte twin of ``clone.onnx``) and from a folder
    holding ``clone.onnx`` alone (its weights read from the graph)."""
    if only_onnx:
        shutil.copy2(RELEASED / "clone.onnx", tmp_path / "clone.onnx")
    clone = load_clone(tmp_path if only_onnx else RELEASED)
    cfg = clone.config
    dim = cfg["n_candidates"] * cfg["n_cand_features"] + cfg["n_global_features"]
    x = np.random.default_rng(1).uniform(0, 1, (8, dim)).astype(np.float32)
    m = np.ones((8, cfg["n_candidates"]), dtype=bool)
    m[:, 5:] = False
    ref = OnnxActor(RELEASED / "clone.onnx").session.run(["logits"], {"obs": x, "mask": m})[0]
    with torch.no_grad():
        got = masked_logits(clone, torch.as_tensor(x), torch.as_tensor(m)).numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-3)


def test_cost_to_go_sums_to_the_mean_slowdown_and_advantages_are_paired(shared_data) -> None:
    env = _tiny_envs(64)[0]
    clone = load_clone(RELEASED)
    ep = run_episode(env, 5, clone)
    # charging waiting as it accrues: from time 0 the cost-to-go is the episode's mean slowdown
    assert ep.cost_to_go(np.array([0.0]))[0] == pytest.approx(ep.metrics["mean_slowdown"])
    ctg = ep.cost_to_go(ep.times)
    assert np.all(np.diff(ctg) <= 1e-9) and ctg[-1] >= 0
    # the same actions on the same stream: every advantage is 0, under both baselines
    twin = run_episode(env, 5, clone)
    np.testing.assert_array_equal(twin.actions, ep.actions)
    for base in ("time", "episode"):
        for a in group_advantages([ep, twin], base):
            assert np.all(a == 0)
    # a better episode gets a positive advantage, a worse one a negative one
    worse = Episode(**{**ep.__dict__, "metrics": {"mean_slowdown": 9.0}})
    adv = group_advantages([ep, worse], "episode")
    assert adv[0][0] > 0 > adv[1][0]


def test_learner_beats_its_clone_on_its_training_workloads(shared_data) -> None:
    """Seeded: four iterations on two tiny workloads lower the greedy learner's mean slowdown
    below the clone's on each of them."""
    torch.manual_seed(0)
    envs = _tiny_envs()
    wl = [(envs[0], 11), (envs[1], 12)]
    clone = load_clone(RELEASED)
    actor = trainable_copy(clone)
    hp = PairedHyperparams(group_size=8, learning_rate=1e-3, batch_size=512, n_epochs=4)
    opt = torch.optim.Adam(actor.parameters(), lr=hp.learning_rate)
    rng, gen = np.random.default_rng(0), torch.Generator().manual_seed(0)
    before = [greedy_metrics(e, s, clone)["mean_slowdown"] for e, s in wl]
    for _ in range(4):
        res = paired_iteration(wl, actor, clone, opt, hp, rng, gen)
    after = [greedy_metrics(e, s, actor)["mean_slowdown"] for e, s in wl]
    assert all(a < b for a, b in zip(after, before, strict=True)), (before, after)
    assert np.mean(after) < 0.97 * np.mean(before)
    assert res.update["kl_clone"] > 0  # it moved away from the clone, and says how far
    # the frozen clone did not move
    again = [greedy_metrics(e, s, clone)["mean_slowdown"] for e, s in wl]
    assert again == before


def test_episodes_as_jobs_give_the_same_update(shared_data) -> None:
    """``--workers``/``--ray-address``: every episode an ``episode_job`` in other processes, the
    same episodes, statistics and updated weights as in this process."""
    cfg = replace(model_config(RELEASED), n_jobs=48, node_fraction=0.03)
    pairs = [("multigpu20", 11), ("gpushare40", 12)]
    clone = load_clone(RELEASED)
    hp = PairedHyperparams(group_size=3, learning_rate=1e-3, batch_size=64)
    out = []
    for jobs in (False, True):
        actor = trainable_copy(clone)
        opt = torch.optim.Adam(actor.parameters(), lr=hp.learning_rate)
        rng, gen = np.random.default_rng(4), torch.Generator().manual_seed(4)
        if jobs:
            wl = [Workload.of(t, s, cfg) for t, s in pairs]
            run = partial(run_tasks, workers=2)
            res = paired_iteration_as_jobs(wl, str(RELEASED), actor, clone, opt, hp, rng, gen, run)
        else:
            envs = [MultiClusterPlacementEnv(**cfg.env_kwargs(t)) for t, _ in pairs]
            wl_here = [(e, s) for e, (_, s) in zip(envs, pairs, strict=True)]
            res = paired_iteration(wl_here, actor, clone, opt, hp, rng, gen)
        out.append((res, actor.state_dict()))
    (a, wa), (b, wb) = out
    assert a.clone == b.clone and a.sampled == b.sampled and a.update == b.update
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert a.update["kl_clone"] > 0


def test_workload_seeds_avoid_the_frozen_evaluation_set(repo_root) -> None:
    from fleetmind.training.recipes import paired as recipe

    man = yaml.safe_load((Path(repo_root) / "benchmarks/placement/frozen_set.yaml").read_text())
    frozen_gen = {int(t["seed"]) for t in man["traces"]}
    frozen_streams = set(man["eval_seeds"]) | set(range(42, 52))
    for base, width in ((recipe.TRAIN_GEN_SEED, 10**6), (recipe.VAL_GEN_SEED, 10**6)):
        assert not any(base <= s < base + width for s in frozen_gen)
    for base in (recipe.TRAIN_STREAM_SEED, recipe.VAL_STREAM_SEED):
        assert not any(base <= s < base + 10**5 for s in frozen_streams)
    specs = recipe.workload_specs(["default"], ["cpu", "multigpu"], 4, 5, np.random.default_rng(0))
    assert [s[1] for s in specs] == ["cpu", "multigpu", "cpu", "multigpu"]
    assert [s[3] for s in specs] == [5, 6, 7, 8]
    for _, kind, level, _ in specs:
        lo, hi = recipe.LEVEL_RANGE[kind]
        assert lo <= level <= hi


def test_recipe_exports_a_model_that_loads_as_ppo_and_clone(
    shared_data, tmp_path, monkeypatch
) -> None:
    from fleetmind.training.recipes import paired
    from fleetmind.training.recipes.paired import PairedArgs, run

    monkeypatch.setattr(paired, "tqdm", RecordingBar)
    RecordingBar.made = []
    summary = run(
        PairedArgs(
            traces=["default"],
            iterations=1,
            workloads_per_iter=1,
            group_size=2,
            dyn_jobs=48,
            val_jobs=48,
            val_streams=2,
            val_every=1,
            out=str(tmp_path / "runs"),
            tracking_uri=f"sqlite:///{tmp_path}/mlflow.db",
            progress=False,
        )
    )
    model_dir = Path(summary["artifact"])
    names = {p.name for p in model_dir.iterdir()}
    assert {"policy.pt", "policy.onnx", "clone.onnx", "clone.pt", "metadata.json"} <= names
    meta = json.loads((model_dir / "metadata.json").read_text())
    assert meta["algo"] == "paired" and meta["env_kwargs"]["n_jobs"] == 2048
    # the code and packages that made it, as RCA's config.json (fleetmind.provenance)
    assert {"commit", "code_modified", "versions"} <= set(meta["provenance"])
    assert meta["provenance"]["versions"]["numpy"] == np.__version__
    assert [v["iteration"] for v in summary["validation"]] == [0, 1]
    assert len(summary["history"]) == 1 and "kl_clone" in summary["history"][0]
    load_dynamic_actor(model_dir)  # what `sched evaluate --policies ppo --model DIR` loads
    load_dynamic_actor(model_dir / "clone.onnx")
    # the bar ends full: 1 x (2 + 1) training episodes, the clone's validation and the one after
    # the iteration, 2 streams each (paired.iterate); it counted a third validation that never ran
    (bar,) = RecordingBar.made
    assert bar.n == bar.total == 3 + 2 * 2


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--mode", "fgd"], "dynamic-mode recipe"),
        (["--mode", "dynamic", "--teacher", "cem"], "belong to --algo ppo"),
        (["--mode", "dynamic", "--group-size", "1"], "--group-size must be >= 2"),
    ],
)
def test_cli_refuses_bad_paired_settings(shared_data, capsys, extra, message) -> None:
    assert cli.main(["sched", "train", "--trace", "default", "--algo", "paired", *extra]) == 2
    err = capsys.readouterr().err
    assert "fleetmind: error:" in err and message in err


def test_workers_and_ray_address_reach_one_run_and_not_the_seeds(monkeypatch) -> None:
    """Without ``--seeds`` the run's episodes use ``--workers``/``--ray-address``; with it, they
    stay with the seeds' runs."""
    from fleetmind.training.recipes import paired as recipe

    seen = []
    monkeypatch.setattr(recipe, "run", lambda a: seen.append(a) or {"history": []})
    base = ["sched", "train", "--mode", "dynamic", "--algo", "paired", "--trace", "default"]
    assert cli.main([*base, "--workers", "2", "--ray-address", "local"]) == 0
    assert (seen[0].workers, seen[0].ray_address) == (2, "local")
    assert cli.main([*base, "--workers", "0"]) == 2
