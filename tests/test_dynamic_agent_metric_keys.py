"""``fleetmind sched evaluate --mode dynamic`` reports the same metrics on both of its paths: the
heuristics alone (``envs.dynamic.evaluate.evaluate_dynamic``) and the agent's setting
(``rl.dynamic_eval.evaluate_streams``, used with ``ppo``/``clone``/``teacher``/``rollout``). The
agent path lacked ``p99_jct_s``, ``p99_slowdown`` and ``n_rejected`` (and ``per_seed.n_started``).

Definitions followed: ``DynamicSim.metrics`` (``envs/dynamic/sim.py``) per run, aggregated over
seeds as ``evaluate_dynamic`` does (mean per metric, ``n_rejected`` the rounded mean)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fleetmind import cli
from fleetmind.rl.dynamic_eval import DynEvalConfig, evaluate_streams, job_stream, run_policy

pytestmark = pytest.mark.filterwarnings("ignore:offered load")

SMALL = DynEvalConfig(n_jobs=64, n_candidates=8)
"""Tiny streams (64 jobs cannot load the sample to 0.8: ``build_jobs`` warns, ignored here)."""

HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
    "deletion_time,scheduled_time\n"
)


def test_agent_path_aggregates_the_heuristic_paths_metrics(shared_data) -> None:
    from fleetmind.envs.dynamic.evaluate import evaluate_dynamic
    from fleetmind.envs.dynamic.policies import make_dynamic_policy
    from fleetmind.envs.multicluster_env import MultiClusterPlacementEnv

    seeds = [3, 4]
    got = evaluate_streams("gpushare40", seeds, heuristics=["FGD"], config=SMALL)["FGD"]
    ref = evaluate_dynamic("gpushare40", ["FGD"], [3], n_jobs=64)["FGD"]
    # every key of the heuristic path; offered_load per seed is added by the CLI on this path
    assert set(got) == set(ref)
    assert set(got["per_seed"]) | {"offered_load"} == set(ref["per_seed"])
    # same definitions: the per-seed DynamicSim.metrics values, meaned (n_rejected rounded)
    env = MultiClusterPlacementEnv(**SMALL.env_kwargs("gpushare40"))
    runs = []
    for s in seeds:
        jobs, priority = job_stream(env, s)
        runs.append(
            run_policy(env, jobs, priority, make_dynamic_policy("FGD", env.trace, env.fleet, s))
        )
    for key in ("p99_jct_s", "p99_slowdown", "n_started"):
        assert got["per_seed"][key] == [float(r[key]) for r in runs], key
    assert got["p99_jct_s"] == pytest.approx(np.mean([r["p99_jct_s"] for r in runs]))
    assert got["p99_slowdown"] == pytest.approx(np.mean([r["p99_slowdown"] for r in runs]))
    assert got["n_rejected"] == round(np.mean([r["n_rejected"] for r in runs]))
    assert isinstance(got["n_rejected"], int)


def test_both_cli_paths_write_the_same_keys(
    shared_data, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [
        f"p{i},1000,1024,1,1000,,BE,Succeeded,{10 * i},{600 + 10 * i},{10 * i}" for i in range(40)
    ]
    trace = tmp_path / "t.csv"
    trace.write_text(HEADER + "\n".join(rows) + "\n")
    argv = ["sched", "evaluate", "--mode", "dynamic", "--trace", str(trace), "--seeds", "1"]
    results = {}
    for name, policies in (("heuristic", ["FGD"]), ("agent", ["ppo", "FGD"])):
        out = tmp_path / f"{name}.json"
        assert cli.main([*argv, "--policies", *policies, "--json", str(out)]) == 0
        results[name] = json.loads(out.read_text())["policies"]
    capsys.readouterr()
    heur, agent = results["heuristic"]["FGD"], results["agent"]
    for entry in (agent["FGD"], agent["ppo"]):
        assert set(entry) == set(heur)
        assert set(entry["per_seed"]) == set(heur["per_seed"])
    assert {"p99_jct_s", "p99_slowdown", "n_rejected"} <= set(agent["ppo"])
