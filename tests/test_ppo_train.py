"""Training smoke run (warm start + PPO + export + registry) and seeded evaluation of the agent."""

from __future__ import annotations

import numpy as np
import pytest
from ppo_helpers import write_tiny

from fleetmind.envs.fgd_mode import evaluate_fgd
from fleetmind.rl.policy_adapter import load_ppo_policy


def tiny_args(folder, nodes, pods, **overrides):  # noqa: ANN001, ANN201 - test helper
    """``training.recipes.fgd.FgdArgs`` for a short run on the tiny fleet in ``folder``."""
    from fleetmind.training.recipes.fgd import FgdArgs

    base = dict(
        traces=[str(pods)],
        nodes=str(nodes),
        n_envs=1,
        n_candidates=8,
        fgd_until_pct=0.0,
        stop_arrived_pct=101.0,
        bc_episodes=1,
        n_steps=64,
        batch_size=32,
        eval_traces=[str(pods)],
        eval_seeds=[42],
        eval_fgd_until_pct=0.0,
        eval_freq=64,
        out=str(folder / "runs"),
        tracking_uri=f"sqlite:///{folder}/mlflow.db",
        progress=False,
    )
    return FgdArgs(**{**base, **overrides})


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from fleetmind.training.recipes.fgd import run

    folder = tmp_path_factory.mktemp("ppo_train")
    nodes, pods = write_tiny(folder)
    args = tiny_args(
        folder,
        nodes,
        pods,
        timesteps=128,
        workload_seeds=[1, 2],
        bc_epochs=3,
        teacher="cem",
        cem_generations=1,
        cem_population=3,
        cem_seeds=[5],
    )
    return run(args), nodes, pods


def test_smoke_run_writes_artifact_and_registers(trained):
    summary, _, _ = trained
    assert summary["timesteps"] >= 128
    assert {
        "policy.onnx",
        "clone.onnx",
        "policy.pt",
        "metadata.json",
        "model_card.md",
        "ppo.zip",
    } <= {p.name for p in __import__("pathlib").Path(summary["artifact"]).iterdir()}
    assert summary["registry"]["registered_model"] == "fleetmind-placement"
    assert summary["registry"]["champion"] is True
    steps = [h["step"] for h in summary["history"]]
    assert steps[0] == 0 and steps[-1] >= 128
    assert np.isfinite(summary["metrics"]["eval_unalloc100"])


def test_cem_teacher_is_searched_saved_and_never_worse_than_fgd(trained):
    from fleetmind.rl.teacher import LinearScorer

    summary, _, _ = trained
    cem = summary["cem"]
    assert len(cem["history"]) == 1 and len(cem["episodes"]) == 2  # one trace -> two seeds
    assert cem["teacher"] <= cem["fgd"]
    scorer = LinearScorer.load(f"{summary['artifact']}/teacher.json")
    assert scorer.n_candidates == 8
    assert "teacher" in summary["eval_reference"]


def test_champion_alias_resolves(trained):
    import mlflow

    summary, _, _ = trained
    client = mlflow.MlflowClient(tracking_uri=summary["tracking_uri"])
    mv = client.get_model_version_by_alias("fleetmind-placement", "champion")
    assert str(mv.version) == summary["registry"]["version"]


def test_evaluation_is_deterministic_by_seed(trained):
    from fleetmind.data.openb import load_openb_nodes, load_openb_trace

    summary, nodes_csv, pods_csv = trained
    nodes, trace = load_openb_nodes(nodes_csv), load_openb_trace(pods_csv)
    runs = [
        evaluate_fgd(trace, {"ppo": load_ppo_policy(summary["artifact"])}, [42, 43], nodes=nodes)
        for _ in range(2)
    ]
    a, b = (r["policies"]["ppo"]["per_seed"] for r in runs)
    assert a == b
    vals = [v["unallocated_gpu_pct_at_100"] for v in a.values()]
    assert all(0.0 <= v <= 100.0 for v in vals)


def test_strand_teacher_is_bound_cloned_and_saved_with_its_base(tmp_path):
    """--teacher with a strand scorer JSON: the env-reading teacher is bound where it acts, and the
    run saves it as teacher_strand.json beside its linear base teacher.json."""
    from pathlib import Path

    from fleetmind.rl.teacher import LinearScorer, StrandPenaltyScorer, load_teacher
    from fleetmind.training.recipes.fgd import run

    nodes, pods = write_tiny(tmp_path)
    strand = StrandPenaltyScorer(LinearScorer.fgd(8, 18), 4.0).save(tmp_path / "strand.json")
    summary = run(
        tiny_args(
            tmp_path,
            nodes,
            pods,
            timesteps=64,
            workload_seeds=[1],
            bc_epochs=2,
            teacher=str(strand),
            register=False,
        )
    )
    art = Path(summary["artifact"])
    saved = load_teacher(art / "teacher_strand.json")
    assert isinstance(saved, StrandPenaltyScorer) and saved.alpha == 4.0
    assert isinstance(load_teacher(art / "teacher.json"), LinearScorer)
    assert summary["bc"]["samples"] > 20 and "teacher" in summary["eval_reference"]
    assert "StrandPenaltyScorer" in (art / "model_card.md").read_text()
