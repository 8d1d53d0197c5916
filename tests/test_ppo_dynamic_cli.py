"""``fleetmind sched evaluate --mode dynamic --policies ppo``: the released dynamic agent and the
heuristics on the same job streams, in the agent's own setting."""

from __future__ import annotations

import json

import pytest

from fleetmind import cli


def test_dynamic_evaluate_runs_the_released_agent_next_to_heuristics(shared_data, tmp_path, capsys):
    out = tmp_path / "dyn.json"
    argv = ["sched", "evaluate", "--trace", "gpuspec20", "--mode", "dynamic", "--seeds", "42"]
    argv += ["--policies", "ppo", "fgd", "--json", str(out)]
    assert cli.main(argv) == 0
    res = json.loads(out.read_text())
    assert res["setting"]["node_fraction"] == pytest.approx(0.1)
    assert res["setting"]["n_jobs"] == 2048
    assert set(res["policies"]) == {"ppo", "FGD"}
    for m in res["policies"].values():
        assert len(m["per_seed"]["mean_slowdown"]) == 1 and m["mean_slowdown"] >= 1.0
    # the agent places jobs differently from FGD: it keeps data local (see docs/ppo-dynamic.md)
    assert res["policies"]["ppo"]["remote_data_frac"] < res["policies"]["FGD"]["remote_data_frac"]
    assert "ppo" in capsys.readouterr().out
    # deterministic by seed (all but the timing)
    out2 = tmp_path / "dyn2.json"
    assert cli.main(argv[:-1] + [str(out2)]) == 0
    again = json.loads(out2.read_text())["policies"]

    def untimed(pols: dict) -> dict:
        return {
            name: {
                **{k: v for k, v in m.items() if k not in ("ms_per_decision", "per_seed")},
                **{k: v for k, v in m["per_seed"].items() if k != "ms_per_decision"},
            }
            for name, m in pols.items()
        }

    assert untimed(again) == untimed(res["policies"])


def test_dynamic_evaluate_rejects_unknown_policies_and_fgd_models(shared_data, capsys):
    base = ["sched", "evaluate", "--trace", "gpuspec20", "--mode", "dynamic", "--seeds", "42"]
    assert cli.main(base + ["--policies", "ppo", "Nope"]) == 2
    assert "unknown policy 'Nope'" in capsys.readouterr().err
    assert cli.main(base + ["--policies", "ppo", "--model", "models/placement"]) == 2
    assert "not describe a dynamic-mode model" in capsys.readouterr().err


def test_fgd_evaluate_lists_ppo_among_known_policies(shared_data, capsys):
    argv = ["sched", "evaluate", "--trace", "default", "--mode", "fgd", "--seeds", "42"]
    assert cli.main(argv + ["--policies", "FGD", "PPO2"]) == 2
    err = capsys.readouterr().err
    assert "unknown policy 'PPO2'" in err and "known: ppo, " in err and "FGD" in err
