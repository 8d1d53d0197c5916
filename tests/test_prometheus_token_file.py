"""The Prometheus bearer token file: a UTF-8 byte-order mark is dropped, a token with characters
outside visible ASCII is refused with a 503 naming the setting (RFC 6750 section 2.1: a bearer
token is ``b64token`` text), and no message ever quotes the token (httpx's ``LocalProtocolError``
text for an illegal header value quotes the header, h11 ``_headers.py`` ``normalize_and_validate``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from fleetmind.cli.serve import _check_token_file
from fleetmind.data.errors import ConfigError, NotAvailableError
from fleetmind.serving.app import create_app
from fleetmind.serving.settings import Settings
from fleetmind.serving.telemetry.prometheus import (
    PrometheusApiSource,
    bearer_headers,
    request_problem,
)

VECTOR = {"status": "success", "data": {"resultType": "vector", "result": []}}


def _file(tmp_path: Path, data: bytes) -> str:
    path = tmp_path / "token"
    path.write_bytes(data)
    return str(path)


def test_a_byte_order_mark_is_not_part_of_the_token(tmp_path: Path) -> None:
    seen: list[str | None] = []

    def handler(r: httpx.Request) -> httpx.Response:
        seen.append(r.headers.get("authorization"))
        return httpx.Response(200, json=VECTOR)

    src = PrometheusApiSource(
        "http://prom.test:9090", bearer_token_file=_file(tmp_path, b"\xef\xbb\xbfTOKEN-1\r\n")
    )
    src._client = httpx.Client(transport=httpx.MockTransport(handler))
    try:
        src.query("up")
    finally:
        src.close()
    assert seen == ["Bearer TOKEN-1"]


@pytest.mark.parametrize(
    "data", ["SECRÉTTOKEN".encode(), b"SECRETTOKEN\x00x", b"SECRET\x0bTOKEN", b"SECRET TOKEN"]
)
def test_a_token_outside_visible_ascii_is_refused_unquoted(tmp_path: Path, data: bytes) -> None:
    path = _file(tmp_path, data)
    with pytest.raises(NotAvailableError) as info:
        bearer_headers(path)
    assert "FLEETMIND_PROMETHEUS_BEARER_TOKEN_FILE" in str(info.value)
    assert "SECRET" not in str(info.value) and "SECRÉT" not in str(info.value)
    with pytest.raises(ConfigError, match="BEARER_TOKEN_FILE"):
        _check_token_file(path)  # fleetmind serve refuses to start


def test_a_local_protocol_error_is_never_quoted() -> None:
    err = httpx.LocalProtocolError("Illegal header value b'Bearer SECRET\\x00'")
    assert "SECRET" not in request_problem(err)
    assert request_problem(httpx.ConnectError("refused http://u:pw@h/")) == "refused http://***@h/"


@pytest.mark.parametrize("data", ["SECRÉTTOKEN".encode(), b"SECRETTOKEN\x00"])
def test_fleet_answers_503_not_500(tmp_path: Path, data: bytes) -> None:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/t.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
        telemetry="prometheus",
        prometheus_url="http://127.0.0.1:9",
        prometheus_bearer_token_file=_file(tmp_path, data),
    )
    app: Any = create_app(settings)
    with TestClient(app, raise_server_exceptions=False) as c:
        r = c.get("/api/v1/fleet")
    assert r.status_code == 503, r.text
    assert "SECRET" not in r.text and "BEARER_TOKEN_FILE" in r.text
