"""The dynamic-mode queue order (``envs/dynamic/order.py``) and the ES learner over it
(``rl/order_es.py``, ``fleetmind sched train --mode dynamic --algo order``): FIFO's weights are
FIFO, a short-first order changes which job starts, the learner lowers its clone's mean slowdown on
its training workloads, bad orders are one-line errors, and an exported model carries its order."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from dynamic_helpers import RecordingBar

from fleetmind.data.errors import ConfigError
from fleetmind.data.paths import MODELS_DIR
from fleetmind.envs.dynamic.order import FIFO_WEIGHTS, NAMED_ORDERS, LinearOrder, make_order
from fleetmind.envs.multicluster_env import MultiClusterPlacementEnv
from fleetmind.rl.dynamic_eval import load_dynamic_actor, model_config
from fleetmind.rl.es import Adam, EsHyperparams, Workload, es_generation
from fleetmind.rl.order_es import order_episode_job
from fleetmind.rl.scaleout import run_tasks

pytestmark = pytest.mark.filterwarnings("ignore:offered load:UserWarning")

RELEASED = MODELS_DIR / "placement-dynamic"


def _workloads() -> list[Workload]:
    """Two small congested workloads (2 % of the openb nodes, 384 jobs): queues hold several
    startable jobs at once, so the order matters (on 3 % of the nodes and 64-256 jobs FIFO and
    SJF start the same jobs)."""
    cfg = replace(model_config(RELEASED), n_jobs=384, node_fraction=0.02, queue_order=None)
    return [Workload.of("multigpu20", 11, cfg), Workload.of("default", 13, cfg)]


def test_fifo_weights_are_fifo_and_short_first_changes_the_starts(shared_data) -> None:
    init = str(RELEASED)
    wl = _workloads()
    for w in wl:
        fifo = order_episode_job((init, w, None))
        assert order_episode_job((init, w, FIFO_WEIGHTS)) == fifo
    sjf = order_episode_job((init, wl[0], NAMED_ORDERS["sjf"]))
    fifo = order_episode_job((init, wl[0], None))
    # on this workload short-first starts short jobs sooner: lower mean slowdown
    assert sjf["mean_slowdown"] < 0.97 * fifo["mean_slowdown"], (sjf, fifo)
    # the env's own order is restored after each job (episodes share one cached env)
    assert wl[0].env().queue_order is None


@pytest.mark.parametrize("depth", [8, 64])
def test_a_started_job_is_the_orders_choice_among_the_startable(shared_data, depth) -> None:
    env = MultiClusterPlacementEnv(
        trace="multigpu20", node_fraction=0.02, n_jobs=384, candidate_set="locality",
        queue_order="sjf", backfill_depth=depth,
    )  # fmt: skip
    env.reset(seed=11)
    sim, seen, deep = env.sim, 0, 0
    assert sim.backfill_depth == depth
    while (j := sim.next_decision()) is not None:
        window = sim.queue[: 1 + sim.backfill_depth]
        deep += window.index(j) > 8  # started from beyond the default window
        ok = [q for q in window if q == j or bool(sim.feasible(q).any())]
        assert sim.jobs.ideal_s[j] == min(sim.jobs.ideal_s[q] for q in ok)
        seen += len(ok) > 1
        node = int(np.flatnonzero(sim.feasible(j))[0])
        sim.place(j, node)
    assert seen > 10  # decisions with a real choice
    assert (deep > 0) == (depth > 8)  # a deeper window gives the order jobs further back


def test_learner_beats_its_clone_on_its_training_workloads(shared_data) -> None:
    """Seeded: five generations (4 antithetic pairs on two small workloads) from FIFO's weights
    lower the clone's mean slowdown on those workloads."""
    torch.set_num_threads(1)
    wl, init = _workloads(), str(RELEASED)
    hp = EsHyperparams(pairs=4, sigma=0.3, learning_rate=0.2, optimizer="adam")
    opt, rng = Adam(4, hp.learning_rate), np.random.default_rng(0)
    theta = np.array(FIFO_WEIGHTS)
    first = None
    for _ in range(5):
        g = es_generation(theta, wl, init, hp, opt, rng, None, order_episode_job)
        first = first or g
        theta = g.theta
    assert first.center_gap_pct == 0.0  # FIFO's weights: the clone itself
    clone = [order_episode_job((init, w, None))["mean_slowdown"] for w in wl]
    learned = [order_episode_job((init, w, tuple(theta)))["mean_slowdown"] for w in wl]
    assert (np.array(learned) / np.array(clone)).mean() < 0.98, (clone, learned, theta)
    assert theta[0] > 0  # it learned to prefer shorter jobs


def test_order_jobs_agree_across_processes(shared_data) -> None:
    init = str(RELEASED)
    jobs = [(init, w, th) for w in _workloads()[:1] for th in (None, (1.0, -0.5, 0.2, 0.3))]
    assert run_tasks(order_episode_job, jobs, workers=2) == [order_episode_job(j) for j in jobs]


@pytest.mark.parametrize(
    "spec, message",
    [
        ("lifo", "unknown queue order 'lifo'"),
        ((1.0, 2.0), "needs 4 finite weights"),
        ((1.0, float("nan"), 0.0, 0.0), "needs 4 finite weights"),
    ],
)
def test_a_bad_order_is_a_one_line_config_error(spec, message) -> None:
    with pytest.raises(ConfigError, match=message):
        make_order(spec)
    assert make_order("fifo") is None and make_order(None) is None
    assert make_order("sjf") == LinearOrder((1.0, 0.0, 0.0, 0.0))


def test_workload_seeds_avoid_the_frozen_set_and_the_other_learners(repo_root) -> None:
    from fleetmind.training.recipes import distill, es, order, paired

    man = yaml.safe_load((Path(repo_root) / "benchmarks/placement/frozen_set.yaml").read_text())
    frozen_gen = {int(t["seed"]) for t in man["traces"]}
    frozen_streams = set(man["eval_seeds"]) | set(range(42, 52))
    assert not any(order.TRAIN_GEN_SEED <= s < order.TRAIN_GEN_SEED + 10**6 for s in frozen_gen)
    assert not any(
        order.TRAIN_STREAM_SEED <= s < order.TRAIN_STREAM_SEED + 10**5 for s in frozen_streams
    )
    gens = (paired.TRAIN_GEN_SEED, paired.VAL_GEN_SEED, distill.TRAIN_GEN_SEED, es.TRAIN_GEN_SEED)
    assert all(abs(order.TRAIN_GEN_SEED - g) >= 10**6 for g in gens)
    streams = (
        paired.TRAIN_STREAM_SEED, paired.VAL_STREAM_SEED, distill.TRAIN_STREAM_SEED,
        distill.SAMPLE_SEED, es.TRAIN_STREAM_SEED,
    )  # fmt: skip
    assert all(abs(order.TRAIN_STREAM_SEED - s) >= 10**5 for s in streams)


def test_recipe_exports_a_model_that_carries_its_order(shared_data, tmp_path, monkeypatch) -> None:
    from fleetmind.training.recipes import order
    from fleetmind.training.recipes.order import OrderArgs, run

    torch.set_num_threads(1)
    monkeypatch.setattr(order, "tqdm", RecordingBar)
    RecordingBar.made = []
    summary = run(
        OrderArgs(
            traces=["default"],
            iterations=2,
            workloads_per_iter=1,
            pairs=1,
            dyn_jobs=48,
            val_jobs=48,
            val_streams=2,
            val_every=1,
            workers=1,
            backfill_depth=32,
            out=str(tmp_path / "runs"),
            tracking_uri=f"sqlite:///{tmp_path}/mlflow.db",
            progress=False,
        )
    )
    model_dir = Path(summary["artifact"])
    meta = json.loads((model_dir / "metadata.json").read_text())
    assert meta["algo"] == "order" and len(meta["env_kwargs"]["queue_order"]) == 4
    # the code and packages that made it, as RCA's config.json (fleetmind.provenance)
    assert {"commit", "code_modified", "versions"} <= set(meta["provenance"])
    assert meta["provenance"]["versions"]["numpy"] == np.__version__
    assert model_config(model_dir).queue_order == tuple(meta["env_kwargs"]["queue_order"])
    # trained, validated and exported in the window it was given (the start model's is 8)
    assert meta["env_kwargs"]["backfill_depth"] == 32 and summary["val_env"]["backfill_depth"] == 32
    assert (model_dir / "policy.onnx").read_bytes() == (model_dir / "clone.onnx").read_bytes()
    assert [v["iteration"] for v in summary["validation"]] == [0, 1, 2]
    assert len(summary["history"]) == 2 and set(summary["queue_order"]) >= {
        "queue_position_over_window"
    }
    assert "--algo order" in summary["command"] and "--backfill-depth 32" in summary["command"]
    load_dynamic_actor(model_dir)  # what `sched evaluate --policies ppo --model DIR` loads
    # the bar ends full: 2 x (2 + 2 x 1 pairs) training episodes, the clone's validation and one
    # after each iteration, 2 streams each (recipes.paired.iterate); it ended at 14/16 (88 %)
    (bar,) = RecordingBar.made
    assert bar.n == bar.total == 2 * 4 + 2 * 3


def test_frozen_set_evaluator_keeps_the_clone_fifo(shared_data) -> None:
    from benchmarks.dynamic.distill_eval import trace_runs
    from fleetmind.rl.rollout import RolloutConfig

    def run(policies: tuple[str, ...], order: str | None) -> dict:
        job = ("multigpu20", "m", [5], policies, str(RELEASED), RolloutConfig(), order)
        return trace_runs(job)[0]

    sjf = run(("model", "clone"), "sjf")
    assert sjf["clone"] == run(("clone",), None)["clone"]  # the clone runs FIFO either way
    assert sjf["model"] != run(("model",), "fifo")["model"]  # the model runs the order it is given


def test_sched_evaluate_runs_a_model_with_its_order_and_the_rest_fifo(
    shared_data, tmp_path
) -> None:
    import shutil

    from fleetmind import cli

    model = tmp_path / "order-model"
    shutil.copytree(RELEASED, model)
    shutil.copy2(model / "clone.onnx", model / "policy.onnx")  # the agent = the clone + the order
    meta = json.loads((model / "metadata.json").read_text())
    meta["env_kwargs"]["queue_order"] = list(NAMED_ORDERS["sjf"])
    (model / "metadata.json").write_text(json.dumps(meta))

    def run(folder: Path, policies: list[str]) -> dict:
        out = tmp_path / f"{folder.name}-{len(policies)}.json"
        argv = ["sched", "evaluate", "--mode", "dynamic", "--trace", "multigpu20", "--seeds", "5"]
        assert (
            cli.main([*argv, "--model", str(folder), "--policies", *policies, "--json", str(out)])
            == 0
        )
        return {k: v["mean_slowdown"] for k, v in json.loads(out.read_text())["policies"].items()}

    ordered = run(model, ["ppo", "clone", "FGD"])
    plain = run(RELEASED, ["clone", "FGD"])
    assert ordered["clone"] == plain["clone"] and ordered["FGD"] == plain["FGD"]  # FIFO both
    assert ordered["ppo"] != ordered["clone"]  # the same network with the order starts other jobs


@pytest.mark.parametrize("bad", [["x", 0, 0, 0], [1.0, 2.0], 5, [1.0, float("inf"), 0.0, 0.0]])
def test_a_model_with_a_bad_order_is_a_load_error(tmp_path, bad) -> None:
    from fleetmind.data.errors import ModelLoadError

    (tmp_path / "metadata.json").write_text(
        json.dumps({"mode": "dynamic", "env_kwargs": {"queue_order": bad}})
    )
    with pytest.raises(ModelLoadError, match="bad env_kwargs"):
        model_config(tmp_path)


def test_a_negative_backfill_depth_is_a_one_line_config_error(tmp_path) -> None:
    from fleetmind.training.recipes.order import OrderArgs, run

    with pytest.raises(ConfigError, match="--backfill-depth must be >= 0"):
        run(OrderArgs(backfill_depth=-1, out=str(tmp_path / "runs"), progress=False))
    assert not (tmp_path / "runs").exists()  # refused before anything is written


def test_sched_evaluate_backfill_depth_sets_every_policys_window(shared_data, tmp_path) -> None:
    from fleetmind import cli

    def run(*extra: str) -> dict:
        out = tmp_path / f"ev{len(extra)}.json"
        argv = ["sched", "evaluate", "--mode", "dynamic", "--trace", "multigpu20", "--seeds", "5"]
        argv += ["--model", str(RELEASED), "--policies", "clone", "FGD", *extra]
        assert cli.main([*argv, "--json", str(out)]) == 0
        return json.loads(out.read_text())

    own, strict = run(), run("--backfill-depth", "0")
    assert own["setting"]["backfill_depth"] == model_config(RELEASED).backfill_depth
    assert strict["setting"]["backfill_depth"] == 0
    for p in ("clone", "FGD"):  # strict FIFO: nothing passes a blocked head, so jobs wait longer
        assert strict["policies"][p]["mean_slowdown"] > own["policies"][p]["mean_slowdown"]


@pytest.mark.parametrize(
    "argv", [["--backfill-depth", "4"], ["--mode", "dynamic", "--backfill-depth", "-1"]]
)
def test_sched_evaluate_refuses_a_bad_backfill_depth(argv, capsys) -> None:
    from fleetmind import cli

    assert cli.main(["sched", "evaluate", "--trace", "default", *argv]) == 2
    err = capsys.readouterr().err
    assert "--backfill-depth is a dynamic-mode option" in err and "Traceback" not in err
