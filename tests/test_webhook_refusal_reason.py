"""The one WARNING line of a refused webhook names what was wrong with the body.

Alertmanager does not retry a 4xx (``notify.Retrier.Check`` in prometheus/alertmanager), so the
refusal's log line is the operator's only trace of the lost alerts. Python's ``json`` raises
``RecursionError`` past its nesting limit (and pydantic-core refuses such a body as "recursion
limit exceeded"): that body is JSON nested too deeply, not "not a JSON object".
"""

from __future__ import annotations

import logging

import pytest

from fleetmind.serving.routers.alerts import log_refused


def _said(caplog: pytest.LogCaptureFixture, body: bytes) -> str:
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="fleetmind.serving"):
        log_refused(body, [{"loc": ("body",), "msg": "Invalid JSON"}])
    (line,) = [r.getMessage() for r in caplog.records]
    return line


def test_a_deeply_nested_body_is_named_so(caplog: pytest.LogCaptureFixture) -> None:
    deep = b'{"alerts": [], "groupLabels": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    assert "nothing stored: JSON nested too deeply)" in _said(caplog, deep)
    assert "nothing stored: not a JSON object)" in _said(caplog, b"[1, 2]")
    assert "nothing stored: not a JSON object)" in _said(caplog, b"{not json")
    assert "nothing stored: 0 alerts lost)" in _said(caplog, b'{"alerts": []}')
