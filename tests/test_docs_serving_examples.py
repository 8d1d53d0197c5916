"""Figures and examples in the operator and results docs match what the code and the cited result
files say: the webhook message of ``docs/operators.md`` and the origin-only row of
``docs/results.md``."""

from __future__ import annotations

import json
import re

from fleetmind.data.paths import REPO_ROOT
from fleetmind.serving.notify import Notifier


def _webhook_example() -> dict:
    """The JSON block after **The webhook.** in docs/operators.md."""
    text = (REPO_ROOT / "docs" / "operators.md").read_text()
    after = text[text.index("**The webhook.**") :]
    block = re.search(r"```json\n(.*?)```", after, re.S)
    assert block is not None
    return json.loads(block.group(1))


def test_the_webhook_example_is_what_the_notifier_sends() -> None:
    example = _webhook_example()
    facts = example["fleetmind"]
    row = {
        "state": facts["status"],
        "starts_at": facts["starts_at"],
        "ends_at": facts["ends_at"],
        "labels": {
            "incident": str(facts["incident"]),
            "cause_node": facts["cause_node"],
            "cause_kind": facts["cause_kind"],
            "cluster": facts["cluster"],
        },
        "annotations": {
            "incident_url": facts["incident_url"],
            "path": " -> ".join(facts["path"]),
            "fault_type": facts["fault_type"],
            "score": f"{facts['score']:.4f}",
        },
    }
    assert Notifier.webhook_body(row) == example


def test_the_origin_only_row_quotes_its_result_file() -> None:
    data = json.loads(
        (REPO_ROOT / "benchmarks" / "results" / "rca" / "origin_only_released.json").read_text()
    )
    rows = [
        line
        for line in (REPO_ROOT / "docs" / "results.md").read_text().splitlines()
        if "origin_only_released.json" in line
    ]
    assert len(rows) == 1
    row = rows[0]
    splits = data["splits"]
    test, large = splits["test"]["origin_only"], splits["test_large"]["origin_only"]
    assert f"of {test['n']} (`test`) and {large['n']} (`test_large`)" in row
    with_rule = {test["gat"]["ac@1"]["value"], large["gat"]["ac@1"]["value"]}
    assert with_rule == {1.0} and "**1.000**" in row
    without = [s["gat:no_lone_rule"]["ac@1"]["value"] for s in (test, large)]
    assert f"({without[0]:.3f} / {without[1]:.3f} without it)" in row
    full = [s["full"] for s in splits.values()]
    assert all(f["first_cause_changed"]["n"] == 0 for f in full)
    assert f"no top cause changed in {sum(f['n'] for f in full):,}" in row
