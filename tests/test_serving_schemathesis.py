"""Property-based API fuzzing: schemathesis generates valid and invalid requests from the OpenAPI
spec (positive and negative modes); no request may produce a 5xx. Bounded to a few examples per
operation so that it stays well under a minute. The service runs its released models, as it does
at its defaults: the released GAT parses request bodies on its own path (``serving/rca/parse.py``),
which a baseline model never reaches."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

schemathesis = pytest.importorskip("schemathesis")
from fastapi.testclient import TestClient  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

from fleetmind.serving.app import create_app  # noqa: E402
from fleetmind.serving.settings import Settings  # noqa: E402

_TMP = Path(tempfile.mkdtemp(prefix="fleetmind-fuzz-"))
app = create_app(
    Settings(
        database_url=f"sqlite:///{_TMP}/fuzz.db",
        sqlite_synchronous="NORMAL",
        incident_worker=False,
        max_body_bytes=256 * 1024,
    )
)
schema = schemathesis.openapi.from_asgi("/openapi.json", app)


@pytest.fixture(scope="module", autouse=True)
def _lifespan() -> Iterator[None]:
    with TestClient(app):  # runs the lifespan: the app's services exist while fuzzing
        yield
    shutil.rmtree(_TMP, ignore_errors=True)


@schema.parametrize()
@settings(
    max_examples=4,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
def test_no_server_errors(case: object) -> None:
    response = case.call()  # type: ignore[attr-defined]
    assert response.status_code < 500, (
        f"{case.method} {case.formatted_path} -> {response.status_code}: {response.text[:300]}"  # type: ignore[attr-defined]
    )
