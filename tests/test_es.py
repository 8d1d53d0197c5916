"""Evolution strategies over a residual head of the dynamic-mode clone (``rl/es.py``,
``fleetmind sched train --mode dynamic --algo es``): it learns on its training workloads, a zero
residual is the clone, its episode jobs give the same results in other processes, its workloads
avoid the frozen evaluation set, its flags come from the settings dataclass, and its export loads
like any dynamic-mode model."""

from __future__ import annotations

import json
from dataclasses import replace
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from fleetmind import cli
from fleetmind.data.paths import MODELS_DIR
from fleetmind.rl.dynamic_eval import load_dynamic_actor, model_config
from fleetmind.rl.es import (
    Adam,
    EsHyperparams,
    Workload,
    centred_ranks,
    episode_job,
    es_generation,
    make_optimizer,
)
from fleetmind.rl.scaleout import run_tasks

pytestmark = pytest.mark.filterwarnings("ignore:offered load:UserWarning")

RELEASED = MODELS_DIR / "placement-dynamic"


def _tiny_workloads(n_jobs: int = 64) -> list[Workload]:
    """Two tiny workloads (3 % of the openb nodes, ``n_jobs`` jobs, queues form)."""
    cfg = replace(model_config(RELEASED), n_jobs=n_jobs, node_fraction=0.03)
    return [Workload.of("multigpu20", 11, cfg), Workload.of("gpushare40", 12, cfg)]


def test_learner_beats_its_clone_on_its_training_workloads(shared_data) -> None:
    """Seeded: five generations (4 antithetic pairs on two tiny workloads) move the residual head
    so that the greedy learner's mean slowdown falls below the clone's on those workloads."""
    torch.set_num_threads(1)
    wl = _tiny_workloads()
    init = str(RELEASED)
    hp = EsHyperparams(pairs=4, sigma=0.3, learning_rate=0.1)
    opt, rng = Adam(64, hp.learning_rate), np.random.default_rng(0)
    theta = np.zeros(64)
    first = None
    for _ in range(5):
        g = es_generation(theta, wl, init, hp, opt, rng)
        first = first or g
        theta = g.theta
    assert first.center_gap_pct == 0.0  # theta starts at 0: the clone itself
    assert first.episodes == 2 * (2 + 2 * 4)
    clone = [episode_job((init, w, None))["mean_slowdown"] for w in wl]
    learned = [episode_job((init, w, tuple(theta)))["mean_slowdown"] for w in wl]
    ratios = np.array(learned) / np.array(clone)
    assert ratios.mean() < 0.97, (clone, learned)
    assert np.linalg.norm(theta) > 0


def test_zero_residual_is_the_clone_and_jobs_agree_across_processes(shared_data) -> None:
    wl = _tiny_workloads(40)
    init = str(RELEASED)
    rng = np.random.default_rng(5)
    jobs = [(init, w, th) for w in wl for th in (None, (0.0,) * 64, tuple(rng.normal(0, 0.5, 64)))]
    here = [episode_job(j) for j in jobs]
    assert here[0] == here[1] and here[3] == here[4]  # a zero residual runs the clone exactly
    assert here[2] != here[0] or here[5] != here[3]  # a residual of that size changes something
    assert run_tasks(episode_job, jobs, workers=2) == here


def test_a_generation_is_a_pure_function_of_its_seeds(shared_data) -> None:
    wl = _tiny_workloads(32)
    hp = EsHyperparams(pairs=2, sigma=0.3, learning_rate=0.1)

    def once(run: object = None) -> np.ndarray:
        return es_generation(
            np.zeros(64), wl, str(RELEASED), hp, Adam(64, 0.1), np.random.default_rng(1), run=run
        ).theta

    a = once()
    assert np.array_equal(a, once(partial(run_tasks, workers=2)))
    assert np.allclose(np.abs(a[a != 0]), 0.1)  # Adam's first step: lr x sign(grad)


def test_optimizers() -> None:
    g = np.array([0.5, -2.0, 0.0])
    assert make_optimizer(EsHyperparams(learning_rate=0.1), 3).step(g).tolist() == [0.05, -0.2, 0.0]
    adam = make_optimizer(EsHyperparams(learning_rate=0.1, optimizer="adam"), 3)
    assert np.allclose(adam.step(g), [0.1, -0.1, 0.0])  # Adam's first step: lr x sign
    with pytest.raises(ValueError, match="optimizer must be one of"):
        make_optimizer(EsHyperparams(optimizer="rmsprop"), 3)


def test_centred_ranks() -> None:
    u = centred_ranks(np.array([3.0, 1.0, 2.0, 2.0]))
    assert u[1] == 0.5 and u[0] == -0.5  # the lowest (best) gets 0.5, the highest -0.5
    assert u[2] == u[3] and u.sum() == pytest.approx(0.0)
    assert centred_ranks(np.array([1.0])).tolist() == [0.0]


def test_workload_seeds_avoid_the_frozen_evaluation_set(repo_root) -> None:
    from fleetmind.training.recipes import distill, es, paired

    man = yaml.safe_load((Path(repo_root) / "benchmarks/placement/frozen_set.yaml").read_text())
    frozen_gen = {int(t["seed"]) for t in man["traces"]}
    frozen_streams = set(man["eval_seeds"]) | set(range(42, 52))
    assert not any(es.TRAIN_GEN_SEED <= s < es.TRAIN_GEN_SEED + 10**6 for s in frozen_gen)
    assert not any(es.TRAIN_STREAM_SEED <= s < es.TRAIN_STREAM_SEED + 10**5 for s in frozen_streams)
    # apart from the other learners' training ranges and the validation ranges
    for other in (paired.TRAIN_GEN_SEED, paired.VAL_GEN_SEED, distill.TRAIN_GEN_SEED):
        assert abs(es.TRAIN_GEN_SEED - other) >= 10**6
    others = (paired.TRAIN_STREAM_SEED, paired.VAL_STREAM_SEED, distill.TRAIN_STREAM_SEED)
    for other in (*others, distill.SAMPLE_SEED):
        assert abs(es.TRAIN_STREAM_SEED - other) >= 10**5


def test_flags_come_from_the_settings_and_shared_ones_count_only_when_given() -> None:
    from fleetmind.training.recipes.flags import recipe_group_kwargs
    from fleetmind.training.recipes.settings import EsArgs

    parser = cli.build_parser()
    base = ["sched", "train", "--mode", "dynamic", "--algo", "es", "--trace", "default"]
    assert EsArgs(**recipe_group_kwargs(parser.parse_args(base), EsArgs)) == EsArgs(
        traces=["default"]
    )
    given = parser.parse_args([*base, "--sigma", "0.2", "--workers", "1", "--lr", "3e-5"])
    a = EsArgs(**recipe_group_kwargs(given, EsArgs))
    assert (a.sigma, a.workers, a.learning_rate, a.pairs) == (0.2, 1, 3e-5, 8)


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--mode", "fgd"], "dynamic-mode recipe"),
        (["--mode", "dynamic", "--sigma", "0"], "--sigma must be"),
        (["--mode", "dynamic", "--pairs", "0"], "--pairs must be >= 1"),
        (["--mode", "dynamic", "--optimizer", "rmsprop"], "--optimizer must be one of"),
        (["--mode", "dynamic", "--seeds", "0-2"], "one --seed at a time"),
    ],
)
def test_cli_refuses_bad_es_settings(shared_data, capsys, extra, message) -> None:
    assert cli.main(["sched", "train", "--trace", "default", "--algo", "es", *extra]) == 2
    err = capsys.readouterr().err
    assert "fleetmind: error:" in err and message in err


def test_recipe_exports_a_model_that_loads_as_ppo_and_clone(shared_data, tmp_path) -> None:
    from fleetmind.training.recipes.es import EsArgs, run

    torch.set_num_threads(1)
    summary = run(
        EsArgs(
            traces=["default"],
            iterations=2,
            pairs=2,
            dyn_jobs=48,
            val_jobs=48,
            val_streams=2,
            val_every=1,
            workers=1,
            out=str(tmp_path / "runs"),
            tracking_uri=f"sqlite:///{tmp_path}/mlflow.db",
            progress=False,
        )
    )
    model_dir = Path(summary["artifact"])
    names = {p.name for p in model_dir.iterdir()}
    assert {"policy.pt", "policy.onnx", "final.onnx", "clone.onnx", "metadata.json"} <= names
    meta = json.loads((model_dir / "metadata.json").read_text())
    assert meta["algo"] == "es" and meta["env_kwargs"]["n_jobs"] == 2048
    assert [v["iteration"] for v in summary["validation"]] == [0, 1, 2]
    hist = summary["history"]
    assert len(hist) == 2 and hist[0]["center_gap_pct"] == 0.0 and hist[1]["theta_norm"] > 0
    assert all("kl_clone" in v for v in summary["validation"][1:])
    assert "--algo es" in summary["command"]
    load_dynamic_actor(model_dir)  # what `sched evaluate --policies ppo --model DIR` loads
    load_dynamic_actor(model_dir / "clone.onnx")
