"""Text columns for values the webhook schema accepts, durable pending rankings, an index for the
grouping lag and retention.

* ``alerts.fingerprint`` (was ``VARCHAR(128)``), ``alertname`` (``VARCHAR(256)``) and ``node``
  (``VARCHAR(512)``) become ``TEXT``: the webhook accepts a 256-character fingerprint and 8 KiB
  label values, and on PostgreSQL one longer value failed the whole webhook (a ``DataError``, 503,
  retried by Alertmanager until it gave up). ``VARCHAR`` to ``TEXT`` rewrites nothing on
  PostgreSQL; SQLite does not enforce declared lengths and is left as it is.
* ``incidents.needs_ranking``: set with every change of an incident, cleared when a ranking of
  that state is stored, so rankings deferred during a storm survive a crash.
* ``ix_alerts_pending_updated`` on ``alerts (pending, updated_ts)``: the oldest ungrouped alert
  (grouping lag) and retention, built ``CONCURRENTLY`` on PostgreSQL.

On PostgreSQL this revision is not one transaction: ``CREATE INDEX CONCURRENTLY`` cannot run in
one, so the column changes commit before the build. A build interrupted part way leaves them (and
an invalid index); the next start finds them and skips them, drops the invalid index and builds it
again. On SQLite the revision is one transaction.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from fleetmind.serving.migrations import drop_invalid_index

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    bind = op.get_bind()
    pg = bind.dialect.name == "postgresql"
    # On PostgreSQL the steps before the index build commit before it (CONCURRENTLY runs outside
    # a transaction): after a build interrupted part way they are there, and are skipped.
    if pg:
        alerts = {c["name"]: c["type"] for c in sa.inspect(bind).get_columns("alerts")}
        op.execute("SET LOCAL lock_timeout = '30s'")  # queue behind writers, not forever
        for column, old in (("fingerprint", 128), ("alertname", 256), ("node", 512)):
            if not isinstance(alerts[column], sa.Text):
                op.alter_column("alerts", column, type_=sa.Text(), existing_type=sa.String(old))
    if "needs_ranking" not in {c["name"] for c in sa.inspect(bind).get_columns("incidents")}:
        op.add_column(
            "incidents",
            sa.Column("needs_ranking", sa.Boolean(), nullable=False, server_default=sa.false()),
        )
    if pg:
        with op.get_context().autocommit_block():
            drop_invalid_index(op.get_bind(), "ix_alerts_pending_updated")  # left by that build
            op.create_index(
                "ix_alerts_pending_updated",
                "alerts",
                ["pending", "updated_ts"],
                postgresql_concurrently=True,
                if_not_exists=True,
            )
    else:
        op.create_index("ix_alerts_pending_updated", "alerts", ["pending", "updated_ts"])


def downgrade() -> None:
    op.drop_index("ix_alerts_pending_updated", "alerts")
    op.drop_column("incidents", "needs_ranking")
