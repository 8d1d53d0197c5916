"""Distillation of rollout-improved decisions over the dynamic-mode clone (``rl/distill.py``,
``fleetmind sched train --mode dynamic --algo distill``): it learns on its training workloads, its
labels are the improver's best candidates, its workloads avoid the frozen evaluation set, its
flags come from the settings dataclass, and its export loads like any dynamic-mode model."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from fleetmind import cli
from fleetmind.data.paths import MODELS_DIR
from fleetmind.rl.distill import (
    Aggregate,
    DistillHyperparams,
    distill_iteration,
    kl_to_clone,
    label_job,
    label_workload,
)
from fleetmind.rl.dynamic_eval import Workload, load_dynamic_actor, model_config
from fleetmind.rl.export import OnnxActor
from fleetmind.rl.paired import greedy_metrics, load_clone, trainable_copy
from fleetmind.rl.scaleout import run_tasks

pytestmark = pytest.mark.filterwarnings("ignore:offered load:UserWarning")

RELEASED = MODELS_DIR / "placement-dynamic"


def _tiny_workloads(n_jobs: int = 64) -> list:
    """Two tiny workloads (3 % of the openb nodes, ``n_jobs`` jobs, queues form): ``(env, stream
    seed, make_env)``."""
    from fleetmind.envs.multicluster_env import MultiClusterPlacementEnv

    cfg = replace(model_config(RELEASED), n_jobs=n_jobs, node_fraction=0.03)
    out = []
    for trace, seed in (("multigpu20", 11), ("gpushare40", 12)):

        def make(t: str = trace) -> MultiClusterPlacementEnv:
            return MultiClusterPlacementEnv(**cfg.env_kwargs(t))

        out.append((make(), seed, make))
    return out


def test_learner_beats_its_clone_on_its_training_workloads(shared_data) -> None:
    """Seeded: one iteration (label the first 16 decisions of two tiny workloads with the rollout
    policy's sampled futures, fit) lowers the greedy learner's mean slowdown below the clone's on
    its training workloads, while the clone itself does not move."""
    torch.set_num_threads(1)
    wl = _tiny_workloads()
    clone = load_clone(RELEASED)
    actor = trainable_copy(clone)
    hp = DistillHyperparams(window=(0, 16), every=2, k=3, samples=2, steps=200, learning_rate=3e-3)
    before = [greedy_metrics(e, s, clone)["mean_slowdown"] for e, s, _ in wl]
    data = Aggregate()
    res = distill_iteration(wl, actor, clone, data, hp, torch.Generator().manual_seed(0))
    after = [greedy_metrics(e, s, actor)["mean_slowdown"] for e, s, _ in wl]
    assert all(a <= b for a, b in zip(after, before, strict=True)), (before, after)
    assert np.mean(after) < 0.97 * np.mean(before), (before, after)
    assert data.n_labels == 16 and 0 < data.n_changed < data.n_labels
    assert res.fit["agree_label"] > 0.8 and res.fit["kl_clone"] > 0
    # the learner acted as the clone in this first iteration: its episodes are the clone's
    assert [lab.metrics["mean_slowdown"] for lab in res.labels] == before
    assert [greedy_metrics(e, s, clone)["mean_slowdown"] for e, s, _ in wl] == before


def test_labels_are_the_improvers_best_candidate(shared_data) -> None:
    """With the future known the improver's values are exact: a label differs from the base's
    greedy action only with a positive gain, every label is a feasible candidate, and labelling
    is a pure function of its seeds."""
    env, seed, make = _tiny_workloads(48)[0]
    clone = load_clone(RELEASED)
    hp = DistillHyperparams(window=(0, 12), every=3, future="known", anchor_per_workload=20)
    lab = label_workload(env, seed, clone, clone, hp, make)
    assert len(lab.labels) == 4 and list(lab.index) == sorted(lab.index)
    assert np.all(lab.index < 12)
    assert np.all(lab.masks[np.arange(len(lab.labels)), lab.labels])
    changed = lab.labels != lab.greedy
    assert np.all(lab.gain[changed] > 0) and np.all(lab.gain[~changed] == 0)
    assert np.array_equal(lab.learner, lab.greedy)  # the clone acted and was the base
    assert lab.anchor_obs.shape == (20, lab.obs.shape[1]) and lab.rollouts > 0
    again = label_workload(env, seed, clone, clone, hp, make)
    assert np.array_equal(again.labels, lab.labels) and np.array_equal(again.gain, lab.gain)
    # KL(clone || clone) is 0 and the argmaxes agree everywhere
    kl = kl_to_clone(clone, clone, lab.anchor_obs, lab.anchor_masks)
    assert kl["kl_clone"] == pytest.approx(0.0, abs=1e-6) and kl["agree_clone"] == 1.0


def test_label_jobs_give_the_labels_of_this_process(shared_data) -> None:
    """``label_job`` (what ``--workers``/``--ray-address`` run) labels a workload exactly as
    ``label_workload`` does here, in this process and in forked ones, with the clone's weights or
    a learner's."""
    cfg = replace(model_config(RELEASED), n_jobs=40, node_fraction=0.03)
    wl = Workload.of("multigpu20", 11, cfg)
    clone = load_clone(RELEASED)
    hp = DistillHyperparams(window=(0, 12), every=3, anchor_per_workload=16)
    here = label_workload(
        wl.make_env(), 11, clone, OnnxActor(RELEASED / "clone.onnx"), hp, wl.make_env, 4
    )
    moved = trainable_copy(clone)
    with torch.no_grad():
        moved.scorer.logit_head.weight.add_(0.5)
    state = {k: v.detach().numpy().copy() for k, v in moved.state_dict().items()}
    jobs = [(str(RELEASED), None, wl, hp, 4), (str(RELEASED), state, wl, hp, 4)]
    got = run_tasks(label_job, jobs, workers=2)
    assert got[0].labels.tolist() == here.labels.tolist() and got[0].rollouts == here.rollouts
    assert np.array_equal(got[0].gain, here.gain)
    assert np.array_equal(got[0].anchor_obs, here.anchor_obs)
    assert label_job(jobs[0]).labels.tolist() == here.labels.tolist()
    want = label_workload(
        wl.make_env(), 11, moved, OnnxActor(RELEASED / "clone.onnx"), hp, wl.make_env, 4
    )
    assert got[1].learner.tolist() == want.learner.tolist()
    assert np.array_equal(got[1].anchor_obs, want.anchor_obs)


def test_workload_seeds_avoid_the_frozen_evaluation_set(repo_root) -> None:
    from fleetmind.training.recipes import distill, paired

    man = yaml.safe_load((Path(repo_root) / "benchmarks/placement/frozen_set.yaml").read_text())
    frozen_gen = {int(t["seed"]) for t in man["traces"]}
    frozen_streams = set(man["eval_seeds"]) | set(range(42, 52))
    gen_ranges = [(distill.TRAIN_GEN_SEED, 10**6), (paired.VAL_GEN_SEED, 10**6)]
    for base, width in gen_ranges:
        assert not any(base <= s < base + width for s in frozen_gen)
    # and apart from paired PPO's training workloads
    assert abs(distill.TRAIN_GEN_SEED - paired.TRAIN_GEN_SEED) >= 10**6
    for base in (distill.TRAIN_STREAM_SEED, paired.VAL_STREAM_SEED, distill.SAMPLE_SEED):
        assert not any(base <= s < base + 10**5 for s in frozen_streams)
    assert abs(distill.TRAIN_STREAM_SEED - paired.TRAIN_STREAM_SEED) >= 10**5


def test_flags_come_from_the_settings_and_shared_ones_count_only_when_given() -> None:
    from fleetmind.training.recipes.flags import recipe_group_kwargs
    from fleetmind.training.recipes.settings import DistillArgs

    parser = cli.build_parser()
    base = ["sched", "train", "--mode", "dynamic", "--algo", "distill", "--trace", "default"]
    kw = recipe_group_kwargs(parser.parse_args(base), DistillArgs)
    assert DistillArgs(**kw) == DistillArgs(traces=["default"])  # the recipe's own defaults
    given = parser.parse_args(
        [*base, "--iterations", "40", "--window", "8", "32", "--no-restart", "--lr", "3e-5"]
    )
    a = DistillArgs(**recipe_group_kwargs(given, DistillArgs))
    # --iterations 40 and --lr 3e-5 are paired PPO's defaults too: given, they still count
    assert (a.iterations, a.window, a.restart, a.learning_rate) == (40, [8, 32], False, 3e-5)
    # the other recipes' flags are unchanged by the shared use
    paired_args = parser.parse_args(["sched", "train", "--algo", "paired", "--trace", "default"])
    assert paired_args.iterations == 40 and paired_args.lr == 3e-5 and paired_args.out == "runs/ppo"


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--mode", "fgd"], "dynamic-mode recipe"),
        (["--mode", "dynamic", "--teacher", "cem"], "belong to --algo ppo"),
        (["--mode", "dynamic", "--window", "9", "3"], "--window takes LO HI"),
        (["--mode", "dynamic", "--base", "teacher"], "--base must be one of"),
        (["--mode", "dynamic", "--seeds", "0-2"], "one --seed at a time"),
    ],
)
def test_cli_refuses_bad_distill_settings(shared_data, capsys, extra, message) -> None:
    assert cli.main(["sched", "train", "--trace", "default", "--algo", "distill", *extra]) == 2
    err = capsys.readouterr().err
    assert "fleetmind: error:" in err and message in err


def test_recipe_exports_a_model_that_loads_as_ppo_and_clone(shared_data, tmp_path) -> None:
    from fleetmind.training.recipes.distill import DistillArgs, run

    torch.set_num_threads(1)
    args = DistillArgs(
        traces=["default"],
        iterations=1,
        workloads_per_iter=2,
        window=[0, 8],
        every=4,
        fit_steps=5,
        dyn_jobs=48,
        val_jobs=48,
        val_streams=2,
        out=str(tmp_path / "runs"),
        tracking_uri=f"sqlite:///{tmp_path}/mlflow.db",
        progress=False,
    )
    summary = run(args)
    # the same run with its labels as jobs in two processes: the same labels, fit and validation
    twin = run(replace(args, workers=2, out=str(tmp_path / "runs2")))
    for key in ("new_labels", "new_changed", "train_slowdown", "ce", "kl_clone"):
        assert twin["history"][0][key] == summary["history"][0][key], key
    assert [v["gap_pct"] for v in twin["validation"]] == [
        v["gap_pct"] for v in summary["validation"]
    ]
    model_dir = Path(summary["artifact"])
    names = {p.name for p in model_dir.iterdir()}
    want = {"policy.pt", "policy.onnx", "final.onnx", "clone.onnx", "metadata.json", "dataset.npz"}
    assert want <= names
    meta = json.loads((model_dir / "metadata.json").read_text())
    assert meta["algo"] == "distill" and meta["env_kwargs"]["n_jobs"] == 2048
    assert [v["iteration"] for v in summary["validation"]] == [0, 1]
    hist = summary["history"]
    assert len(hist) == 1 and hist[0]["new_labels"] == 4 and "kl_clone" in hist[0]
    assert "--algo distill" in summary["command"]
    load_dynamic_actor(model_dir)  # what `sched evaluate --policies ppo --model DIR` loads
    load_dynamic_actor(model_dir / "clone.onnx")
