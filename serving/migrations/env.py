"""Alembic environment: runs on the connection :func:`fleetmind.serving.migrations.upgrade` passes."""

from __future__ import annotations

from alembic import context

from fleetmind.serving.db import metadata

connection = context.config.attributes.get("connection")
if connection is None:  # pragma: no cover - the service always passes its connection
    raise RuntimeError("run migrations through fleetmind.serving.migrations.upgrade")
context.configure(connection=connection, target_metadata=metadata)
with context.begin_transaction():
    context.run_migrations()
