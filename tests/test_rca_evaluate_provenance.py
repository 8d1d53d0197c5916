"""``fleetmind rca evaluate --json`` writes its result with provenance.

docs/gat.md and docs/rca-data.md tell users to write result files with it, and every result in
``benchmarks/results/`` carries the keys ``benchmarks/provenance.py`` writes (command, commit,
code_modified, date, machine, versions; benchmarks/README.md). Before, the file held the metrics
only. The command is quoted for a POSIX shell (``shlex.join``), so it reruns as given.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
from pathlib import Path

from fleetmind import cli
from fleetmind.cli.rca import _evaluate_command


def test_evaluate_json_records_command_commit_machine_versions(tmp_path: Path) -> None:
    data = tmp_path / "my data"  # a space: the recorded command must quote it
    gen = ["rca", "generate", "--out", str(data), "--incidents", "3", "--seed", "1"]
    assert cli.main(gen) == 0
    out = tmp_path / "res.json"
    argv = ["rca", "evaluate", "--data", str(data), "--split", "train", "--methods", "deepest"]
    assert cli.main([*argv, "--limit", "2", "--json", str(out)]) == 0
    d = json.loads(out.read_text())
    assert shlex.split(d["command"]) == [
        "fleetmind",
        *argv,
        "--limit",
        "2",
        "--seed",
        "0",
        "--json",
        str(out),
    ]
    assert d["commit"] is None or re.fullmatch(r"[0-9a-f]{40}", d["commit"])
    assert "code_modified" in d
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\+00:00", d["date"])
    assert d["machine"]["cpu_count"] and d["machine"]["python"]
    assert {"python", "torch", "numpy", "fleetmind"} <= set(d["versions"])
    assert d["methods"]["deepest"]["ac@1"] >= 0 and d["n_incidents"] == 2  # the metrics stay


def test_a_feedback_database_password_is_not_recorded() -> None:
    args = argparse.Namespace(
        feedback_db="postgresql://u:secret@db/fm",
        data=None,
        split="feedback",
        methods=None,
        model=None,
        limit=None,
        seed=0,
        json="out.json",
    )
    line = _evaluate_command(args)
    assert "secret" not in line and line.startswith("fleetmind rca evaluate --feedback-db ")
