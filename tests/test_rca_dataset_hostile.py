"""Incident lines the rankers would misread are refused where a dataset is read, naming file:line.

Found by hand-edited split files (2026-12-06): a line of arrays nested 100,000 deep stopped ``rca
evaluate`` (and ``rca train``/``calibrate``) with a ``RecursionError`` traceback; an alert whose
``annotations`` was a list stopped the GAT with an ``AttributeError``; label values that were
no strings (``severity: 3``, ``["a"]``) were read as their text (a ``Watchdog`` was no longer
skipped); and ``startsAt`` in milliseconds was read as "no time" by some methods and as the year
57,000 by others. Alertmanager's alerts have string label and annotation values
(``model.LabelSet``, ``map[LabelName]LabelValue`` in prometheus/common) and RFC 3339 times.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from gat_helpers import toy_dataset

from fleetmind import cli
from fleetmind.data.errors import DataError
from fleetmind.data.rca_dataset import read_incidents, validate_incident


def _incident(**alert: Any) -> dict[str, Any]:
    a = {
        "status": "firing",
        "labels": {"alertname": "HighLatency", "severity": "warning", "service": "api"},
        "annotations": {"summary": "slow", "z_score": "7.5"},
        "startsAt": "2026-01-01T00:00:00.123456789Z",
        "endsAt": "0001-01-01T00:00:00Z",
    }
    a.update(alert)
    return {"id": "i", "graph": "g", "alerts": [a], "root_cause": "svc/api", "fault_type": "x"}


def _refused(tmp_path: Path, inc: Any) -> str:
    split = tmp_path / "test.jsonl"
    good = json.dumps(_incident())
    split.write_text(good + "\n" + json.dumps(inc, allow_nan=True) + "\n")
    with pytest.raises(DataError) as exc:
        read_incidents(split)
    msg = str(exc.value)
    assert msg.startswith(f"{split}:2: alert 0: "), msg
    assert "\n" not in msg
    return msg


def test_well_formed_alerts_pass() -> None:
    validate_incident(_incident(), "f:1")
    validate_incident(_incident(startsAt=1_767_225_600.5, endsAt=1_767_225_660), "f:1")
    validate_incident(_incident(annotations=None), "f:1")  # as absent
    for key in ("annotations", "startsAt", "endsAt"):
        inc = _incident()
        del inc["alerts"][0][key]
        validate_incident(inc, "f:1")
    validate_incident(_incident(startsAt=None, endsAt=""), "f:1")


@pytest.mark.parametrize(
    ("alert", "words"),
    [
        ({"annotations": ["summary"]}, "'annotations' is an array; it must be an object"),
        ({"annotations": "slow"}, "'annotations' is a str"),
        ({"annotations": {"z_score": 7.5}}, "annotation 'z_score' is a number (7.5)"),
        ({"labels": {"alertname": "A", "severity": 3}}, "label 'severity' is a number (3)"),
        ({"labels": {"alertname": "A", "severity": ["a"]}}, "label 'severity' is an array"),
        ({"labels": {"alertname": None}}, "label 'alertname' is null"),
        ({"labels": {"alertname": "A", "x": True}}, "label 'x' is a boolean"),
        ({"startsAt": 1_767_225_600_123}, "startsAt: alert timestamp 1767225600123 is after"),
        ({"startsAt": 1.7672256e12}, "looks like milliseconds"),
        ({"endsAt": 1.7672256e12}, "endsAt: alert timestamp"),
        ({"startsAt": math.nan}, "startsAt: alert timestamp nan is not a finite number"),
        ({"startsAt": "yesterday"}, "startsAt: alert timestamp 'yesterday' is not RFC 3339"),
        ({"startsAt": [2026]}, "is not RFC 3339"),
    ],
)
def test_alert_fields_of_the_wrong_type_name_file_line_and_field(
    tmp_path: Path, alert: dict[str, Any], words: str
) -> None:
    assert words in _refused(tmp_path, _incident(**alert))


def test_a_deeply_nested_line_names_its_line(tmp_path: Path) -> None:
    split = tmp_path / "test.jsonl"
    split.write_text(json.dumps(_incident()) + "\n" + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(DataError, match=r"test\.jsonl:2: .*nested too deeply"):
        read_incidents(split)


@pytest.mark.parametrize(
    "bad",
    [
        lambda a: a.__setitem__("annotations", ["summary"]),
        lambda a: a["labels"].__setitem__("severity", 3),
        lambda a: a.__setitem__("startsAt", 1_767_225_600_000),
        None,  # a deeply nested line
    ],
)
def test_rca_evaluate_answers_one_line(
    bad: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = toy_dataset(tmp_path / "ds", n_train=2, n_val=1, n_test=2)
    split = root / "test.jsonl"
    lines = split.read_text().splitlines()
    if bad is None:
        lines[1] = "[" * 100_000 + "]" * 100_000
    else:
        inc = json.loads(lines[1])
        bad(inc["alerts"][0])
        lines[1] = json.dumps(inc)
    split.write_text("\n".join(lines) + "\n")
    argv = ["rca", "evaluate", "--data", str(root), "--split", "test", "--methods", "most_alerts"]
    assert cli.main(argv) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].startswith(f"fleetmind: error: {split}:2: "), err
