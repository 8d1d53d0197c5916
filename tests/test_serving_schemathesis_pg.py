"""Property-based fuzzing that reaches PostgreSQL: schemathesis (its coverage phase, which sends
boundary values such as strings at their schema's maximum length, and its fuzzing phase, valid and
invalid) against the app on a throwaway PostgreSQL with tokens set; no request may produce a 5xx.
SQLite ignores declared column lengths, so only this run can see a value the schema accepts and
PostgreSQL refuses. The service runs its released models, as at its defaults."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

schemathesis = pytest.importorskip("schemathesis")
from fastapi.testclient import TestClient  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402
from serving_helpers import PgCluster, free_port, pg_bindir  # noqa: E402

from fleetmind.serving.app import create_app  # noqa: E402
from fleetmind.serving.settings import Settings  # noqa: E402

TOKEN = "fuzz-all-scopes"
_PORT = free_port()
app = create_app(
    Settings(
        database_url=f"postgresql+psycopg://postgres@127.0.0.1:{_PORT}/postgres",
        incident_worker=True,  # the worker groups what the fuzzer stores, on PostgreSQL too
        max_body_bytes=1024 * 1024,
        api_token=TOKEN,
        read_token="fuzz-read",
        ingest_token="fuzz-ingest",
    )
)
schema = schemathesis.openapi.from_dict(app.openapi())  # /openapi.json itself needs a token
schema.app = app
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module", autouse=True)
def _postgres_and_lifespan() -> Iterator[None]:
    bindir = pg_bindir()
    if bindir is None:
        pytest.skip("PostgreSQL binaries not installed (Debian package postgresql)")
    cluster = PgCluster(bindir, port=_PORT).start()
    try:
        with TestClient(app):  # runs the lifespan: migrations on PostgreSQL, the worker
            yield
    finally:
        cluster.close()


@schema.parametrize()
@settings(
    max_examples=int(os.environ.get("FLEETMIND_FUZZ_EXAMPLES", "8")),
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
def test_no_server_errors_on_postgresql(case: object) -> None:
    response = case.call(headers=AUTH)  # type: ignore[attr-defined]
    assert response.status_code < 500, (
        f"{case.method} {case.formatted_path} -> {response.status_code}: {response.text[:300]}"  # type: ignore[attr-defined]
    )
