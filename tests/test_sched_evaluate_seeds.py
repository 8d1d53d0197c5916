"""``sched evaluate --seeds``: each seed once, published means only over the seeds run, and a std
that is null whenever its mean is.

Upstream behaviour followed: the FGD authors' per-seed results (Weng et al., USENIX ATC'23,
artifact ``hkust-adsl/kubernetes-scheduler-simulator``, ``experiments/`` tables, seeds 42-51) are
a value per (trace, policy, seed); a mean of them describes our mean only over the same seeds.
NumPy's ``std(ddof=1)`` of one value is NaN (``numpy.std``: divisor ``N - ddof``), which is why
one seed reports 0.0 by convention; a NaN value gives a NaN std under any convention.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from fleetmind.cli import main
from fleetmind.cli import sched as sched_cli
from fleetmind.data import openb
from fleetmind.envs.fgd_mode import FgdResult, aggregate_results, evaluate_fgd

HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,creation_time,deletion_time\n"
NODES = "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,8,T4\nn1,64000,262144,4,T4\n"


def _files(tmp_path: Path) -> tuple[str, str]:
    # small shares (50-100 milli of 12 GPUs) so that every level has a pod record near it
    rows = (f"p{i},1000,1024,1,{50 + 10 * (i % 6)},,{i},{i + 50}\n" for i in range(250))
    pods = HEADER + "".join(rows)
    (tmp_path / "pods.csv").write_text(pods)
    (tmp_path / "nodes.csv").write_text(NODES)
    return str(tmp_path / "pods.csv"), str(tmp_path / "nodes.csv")


# --- duplicate seeds -----------------------------------------------------------------------------


def test_parse_seeds_drops_repeats_in_order_with_one_warning(capsys) -> None:
    assert sched_cli.parse_seeds(["42", "42", "43"]) == [42, 43]
    err = capsys.readouterr().err
    assert err == "fleetmind: warning: seed(s) 42 given more than once; each runs once\n"
    assert sched_cli.parse_seeds(["42-51", "50", "7"]) == [*range(42, 52), 7]
    assert "seed(s) 50 given more than once" in capsys.readouterr().err
    assert sched_cli.parse_seeds(["43,42"]) == [43, 42]  # no repeat: no warning, order kept
    assert capsys.readouterr().err == ""


def test_a_repeated_seed_runs_and_weighs_once(tmp_path: Path) -> None:
    pods, nodes = _files(tmp_path)
    nl = openb.load_openb_nodes(nodes)
    twice = evaluate_fgd(pods, ["FGD"], [1, 1, 2], nodes=nl)
    once = evaluate_fgd(pods, ["FGD"], [1, 2], nodes=nl)
    assert twice["seeds"] == [1, 2]
    keys = ("unallocated_gpu_pct_at_100", "unallocated_gpu_pct_at_100_std", "per_seed")
    assert {k: twice["policies"]["FGD"][k] for k in keys} == {
        k: once["policies"]["FGD"][k] for k in keys
    }


def test_the_cli_json_counts_each_seed_once(tmp_path: Path, capsys) -> None:
    pods, nodes = _files(tmp_path)
    out = tmp_path / "r.json"
    argv = ["sched", "evaluate", "--trace", pods, "--nodes", nodes, "--policies", "FGD"]
    assert main([*argv, "--seeds", "1", "1", "2", "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["seeds"] == [1, 2] and list(res["policies"]["FGD"]["per_seed"]) == ["1", "2"]
    assert "seed(s) 1 given more than once" in capsys.readouterr().err


# --- published means over the same seeds only --------------------------------------------------


@pytest.fixture
def published(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = {s: (4.0 + (s - 42) / 10, 3.0) for s in range(42, 52)}
    monkeypatch.setattr(openb, "load_fgd_published", lambda: {("default", "FGD"): rows})


def test_a_seed_without_a_published_value_omits_the_published_mean(published, capsys) -> None:
    policies = {"FGD": {"unallocated_gpu_pct_at_100": 4.795}}
    sched_cli._published_means("default", policies, [7, 42])
    fgd = policies["FGD"]
    assert "published_unallocated_gpu_pct_at_100" not in fgd and "published_seeds" not in fgd
    assert (
        "no value for seed(s) 7" in fgd["published_reason"] and "42-51" in fgd["published_reason"]
    )
    sched_cli._print_table(
        {"trace": "default", "mode": "fgd", "seeds": [7, 42], "policies": policies}
    )
    table = capsys.readouterr().out
    assert "pub@100" not in table.splitlines()[1]  # no column for a mean over other seeds
    assert "note: FGD: published FGD values omitted" in table


def test_all_seeds_published_keeps_the_published_mean(published, capsys) -> None:
    policies = {"FGD": {"unallocated_gpu_pct_at_100": 4.7}}
    sched_cli._published_means("default", policies, [42, 43])
    assert policies["FGD"]["published_unallocated_gpu_pct_at_100"] == 4.05
    assert policies["FGD"]["published_seeds"] == 2 and "published_reason" not in policies["FGD"]
    sched_cli._print_table(
        {"trace": "default", "mode": "fgd", "seeds": [42, 43], "policies": policies}
    )
    table = capsys.readouterr().out
    assert "pub@100" in table and "note:" not in table


# --- std null with its mean ----------------------------------------------------------------------


def _result(seed: int, u130: float) -> FgdResult:
    return FgdResult(
        trace="t",
        policy="FGD",
        seed=seed,
        capacity_milli=12_000,
        unallocated={100: 5.0, 130: u130},
        arrived_milli=np.zeros(0, dtype=np.int64),
        allocated_milli=np.zeros(0, dtype=np.int64),
        placed=np.ones(3, dtype=bool),
        seconds=0.01,
    )


def test_the_std_of_an_undefined_mean_is_undefined_with_one_seed() -> None:
    one = sched_cli.json_safe(aggregate_results([_result(1, math.nan)]))
    assert one["unallocated_gpu_pct_at_130"] is None
    assert one["unallocated_gpu_pct_at_130_std"] is None
    assert one["unallocated_gpu_pct_at_100_std"] == 0.0  # defined with one seed: no spread
    two = sched_cli.json_safe(aggregate_results([_result(1, math.nan), _result(2, 4.0)]))
    assert (
        two["unallocated_gpu_pct_at_130"] is None and two["unallocated_gpu_pct_at_130_std"] is None
    )
