"""``fleetmind rca evaluate`` on incidents none of which has a silent root (or all of which have
one): the empty part's metrics are undefined, ``null`` in the JSON and ``-`` in the table, not
0.000, which reads as a method that misses every root. RCAEval's AC@k and MRR are means over the
incidents (Pham et al., WWW'25, ``RCAEval/e2e`` evaluator): over none they have no value."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleetmind import cli
from fleetmind.rca.metrics import summarize


def test_summarize_of_no_incidents_is_undefined() -> None:
    assert set(summarize([]).values()) == {None}
    assert summarize([1, None], [2.0, 4.0]) == {
        "ac@1": 0.5, "ac@3": 0.5, "ac@5": 0.5, "avg@5": 0.5, "mrr": 0.5, "ms_per_incident": 3.0
    }  # fmt: skip


def test_an_empty_subset_is_null_and_a_dash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "rca"
    argv = ["rca", "generate", "--out", str(data), "--incidents", "20", "--seed", "3"]
    argv += ["--graphs", "2", "--max-clusters", "2", "--workers", "1", "--large-fraction", "0"]
    assert cli.main(argv) == 0
    out = tmp_path / "eval.json"
    argv = ["rca", "evaluate", "--data", str(data), "--split", "test", "--limit", "1"]
    assert cli.main([*argv, "--methods", "random", "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    by_root = res["methods"]["random"]["by_root"]
    empty = "non_silent" if res["n_silent_root"] else "silent"
    full = "silent" if res["n_silent_root"] else "non_silent"
    assert by_root[empty]["n"] == 0 and by_root[full]["n"] == 1
    assert {k: v for k, v in by_root[empty].items() if k != "n"} == dict.fromkeys(
        ["ac@1", "ac@3", "ac@5", "avg@5", "mrr"]
    )
    assert all(isinstance(v, float) for k, v in by_root[full].items() if k != "n")
    row = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("random"))
    assert row.split()[-2 if empty == "silent" else -1] == "-", row
