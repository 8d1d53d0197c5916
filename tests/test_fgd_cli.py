"""``fleetmind sched evaluate`` in fgd mode on tiny CSV files: JSON contract and clear errors."""

from __future__ import annotations

import json

import pytest

from fleetmind.cli import main
from fleetmind.cli.sched import parse_seeds

NODES = "sn,cpu_milli,memory_mib,gpu,model\nn0,32000,65536,2,T4\nn1,32000,65536,4,P100\nn2,8000,8192,0,\n"
PODS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n" + "".join(
    f"p{i},{1000 + 500 * (i % 3)},1024,{i % 3},{[0, 500, 1000][i % 3]}\n" for i in range(12)
)


def test_sched_evaluate_fgd_json(tmp_path, capsys) -> None:
    (tmp_path / "nodes.csv").write_text(NODES)
    (tmp_path / "pods.csv").write_text(PODS)
    out = tmp_path / "r.json"
    rc = main(
        [
            "sched", "evaluate", "--trace", str(tmp_path / "pods.csv"), "--nodes", str(tmp_path / "nodes.csv"),
            "--policies", "bestfit", "FGD", "--seeds", "1-3", "--json", str(out),
        ]
    )  # fmt: skip
    assert rc == 0
    res = json.loads(out.read_text())
    assert res["mode"] == "fgd" and res["seeds"] == [1, 2, 3] and res["trace"] == "pods"
    assert set(res["policies"]) == {"BestFit", "FGD"}
    m = res["policies"]["FGD"]
    assert {
        "unallocated_gpu_pct_at_100",
        "unallocated_gpu_pct_at_130",
        "ms_per_decision",
        "per_seed",
    } <= set(m)
    assert set(m["per_seed"]) == {"1", "2", "3"}
    assert "FGD" in capsys.readouterr().out


def test_sched_evaluate_errors(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1,1,1,500\np1,x,1,1,500\n")
    assert main(["sched", "evaluate", "--trace", str(bad), "--seeds", "1"]) == 2
    err = capsys.readouterr().err
    assert "row 2" in err and "cpu_milli" in err and "Traceback" not in err
    assert main(["sched", "evaluate", "--trace", str(bad), "--seeds", "x"]) == 2
    assert (
        main(["sched", "evaluate", "--trace", str(bad), "--policies", "nope", "--seeds", "1"]) == 2
    )


def test_parse_seeds() -> None:
    assert parse_seeds(["42-44", "50,51"]) == [42, 43, 44, 50, 51]


def test_sched_evaluate_causes(tmp_path, capsys) -> None:
    from ppo_helpers import write_tiny

    nodes, pods = write_tiny(tmp_path)  # oversubscribed at 100 %: pods do fail
    out = tmp_path / "r.json"
    rc = main(
        [
            "sched", "evaluate", "--trace", str(pods), "--nodes", str(nodes),
            "--policies", "bestfit", "FGD", "--seeds", "1-2", "--causes", "--json", str(out),
        ]
    )  # fmt: skip
    assert rc == 0
    res = json.loads(out.read_text())
    causes = res["failure_causes"]
    assert set(causes["policies"]) == {"BestFit", "FGD"}
    for name, c in causes["policies"].items():
        assert (
            c["unallocated_gpu_pct_at_100"] == res["policies"][name]["unallocated_gpu_pct_at_100"]
        )
        assert sum(c["by_cause"].values()) == pytest.approx(c["failed_pct"], abs=2e-3)
        assert c["seeds"] == [1, 2]
    assert (
        0 <= causes["lower_bound_pct"] <= min(c["failed_pct"] for c in causes["policies"].values())
    )
    assert "lower bound for any policy" in capsys.readouterr().out
    rc = main(["sched", "evaluate", "--trace", "default", "--mode", "dynamic", "--causes"])
    assert rc == 2 and "fgd-mode option" in capsys.readouterr().err


def test_sched_evaluate_model_implies_ppo(tmp_path, capsys) -> None:
    """``--model`` is for policy 'ppo': with the default policies it adds ppo (it used to be
    ignored without a word); with an explicit list that lacks ppo it is an error naming both."""
    from pathlib import Path

    model = Path(__file__).resolve().parents[1] / "models" / "placement"
    (tmp_path / "nodes.csv").write_text(NODES)
    (tmp_path / "pods.csv").write_text(PODS)
    out = tmp_path / "r.json"
    base = ["sched", "evaluate", "--trace", str(tmp_path / "pods.csv"), "--nodes",
            str(tmp_path / "nodes.csv"), "--seeds", "1", "--model", str(model)]  # fmt: skip
    assert main([*base, "--json", str(out)]) == 0
    policies = json.loads(out.read_text())["policies"]
    assert "ppo" in policies and "FGD" in policies and "Random" in policies
    capsys.readouterr()
    assert main([*base, "--policies", "FGD", "BestFit"]) == 2
    err = capsys.readouterr().err
    assert "--model" in err and "'ppo'" in err and "FGD BestFit" in err
    assert "Traceback" not in err
