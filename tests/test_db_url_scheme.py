"""``postgres://`` database URLs, as Heroku, Render, Fly.io and Supabase hand them out (libpq's
documented URI scheme is ``postgresql://`` or ``postgres://``: PostgreSQL docs, "Connection URIs"),
open with psycopg instead of failing with SQLAlchemy's "Can't load plugin:
sqlalchemy.dialects:postgres"."""

from __future__ import annotations

import pytest

from fleetmind.serving.db import Database, normalise_url


@pytest.mark.parametrize(
    ("given", "want"),
    [
        ("postgres://fm:pw@db:5432/fleetmind", "postgresql+psycopg://fm:pw@db:5432/fleetmind"),
        ("POSTGRES://fm@db/fm?sslmode=require", "postgresql+psycopg://fm@db/fm?sslmode=require"),
        ("postgresql://fm@db/fm", "postgresql://fm@db/fm"),
        ("postgresql+psycopg://fm@db/fm", "postgresql+psycopg://fm@db/fm"),
        ("sqlite:///postgres://x.db", "sqlite:///postgres://x.db"),
        ("host=db password=pw", "host=db password=pw"),
    ],
)
def test_only_the_postgres_scheme_is_rewritten(given: str, want: str) -> None:
    assert normalise_url(given) == want


def test_a_postgres_url_opens_with_psycopg_without_connecting() -> None:
    db = Database("postgres://fm:secret@127.0.0.1:1/fleetmind?sslmode=disable", connect_timeout_s=1)
    try:
        assert db.engine.dialect.name == "postgresql"
        assert db.engine.dialect.driver == "psycopg"
        assert db.url.startswith("postgresql+psycopg://")
        assert db.engine.url.database == "fleetmind" and db.engine.url.password == "secret"
    finally:
        db.engine.dispose()
