"""The fuzzing suite at CI size: every route, valid and invalid requests, the values that broke the
service before, a token per scope, and the stateful read phase, on SQLite and on PostgreSQL, with
the service's released models (its defaults); no request may get a 5xx. The long run (10,000
requests a database) is ``python -m benchmarks.serving.fuzz``
(``benchmarks/results/serving/serving_fuzz.json``).

Seeded: a failure names the request, and the same seed sends it again.
"""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("schemathesis")
from serving_helpers import pg_bindir  # noqa: E402

from benchmarks.serving import fuzz  # noqa: E402
from fleetmind.serving.app import create_app  # noqa: E402

CASES = int(os.environ.get("FLEETMIND_FUZZ_CASES", "600"))


def _check(report: fuzz.FuzzReport) -> None:
    assert report.requests >= CASES
    assert report.reads > 0 and report.statuses[200] > 0 and report.statuses[422] > 0
    assert not report.server_errors, json.dumps(report.server_errors[:5], indent=1)


def test_no_server_errors_on_sqlite(tmp_path: object) -> None:
    app = create_app(fuzz.make_settings(f"sqlite:///{tmp_path}/fuzz.db"))
    _check(fuzz.fuzz_app(app, fuzz.TOKENS, fuzz.FuzzConfig(cases=CASES, read_every=100, seed=1)))


def test_no_server_errors_on_postgresql() -> None:
    if pg_bindir() is None:
        pytest.skip("PostgreSQL binaries not installed (Debian package postgresql)")
    with fuzz.database("postgresql") as url:
        app = create_app(fuzz.make_settings(url))
        report = fuzz.fuzz_app(app, fuzz.TOKENS, fuzz.FuzzConfig(CASES, read_every=100, seed=2))
    _check(report)


def test_hostile_values_reach_the_wire_as_a_hostile_client_sends_them() -> None:
    body = {"a": [float("nan"), float("inf"), fuzz.Raw("9" * 4500)], "\ud800": "x\x00"}
    text = fuzz.to_json(body)
    assert "NaN" in text and "Infinity" in text and "9" * 4500 in text
    assert '"\\ud800"' in text and '"x\\u0000"' in text
    assert (
        json.loads(text.replace("9" * 4500, "9"))["a"][0]
        != json.loads(text.replace("9" * 4500, "9"))["a"][0]
    )
    assert fuzz.route_of("/api/v1/incidents/12/feedback?x=1") == "/api/v1/incidents/{id}/feedback"
