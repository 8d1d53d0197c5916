"""Alembic environment: runs on the connection :func:`fleetmind.serving.migrations.upgrade` passes.

Each revision runs in a transaction of its own, with its ``alembic_version`` update
(``transaction_per_migration``): a revision interrupted part way (a full disk, a crash) is rolled
back whole, and the next start runs it again (but a ``CREATE INDEX CONCURRENTLY`` on PostgreSQL,
which runs outside it once the rest of its revision has committed: see ``versions/0002``). On
SQLite that needs the connection :func:`fleetmind.serving.migrations.upgrade` passes, which emits
``BEGIN`` itself (Python's ``sqlite3`` opens no transaction before DDL, so each ``CREATE`` or
``ALTER`` committed alone).
"""

from __future__ import annotations

from alembic import context

from fleetmind.serving.db import metadata

connection = context.config.attributes.get("connection")
if connection is None:  # pragma: no cover - the service always passes its connection
    raise RuntimeError("run migrations through fleetmind.serving.migrations.upgrade")
context.configure(connection=connection, target_metadata=metadata, transaction_per_migration=True)
with context.begin_transaction():
    context.run_migrations()
