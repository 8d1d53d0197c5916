"""Indexes for the notifier's poll and for new incident ids.

* ``ix_notifications_owed`` on ``notifications (incident_id)``, partial: only the rows the notifier
  still has work on (``state = 'firing' OR am_sent_ts IS NULL OR hook_sent IS false``), which its
  every-second poll reads. The poll scanned the whole table (88 ms at 444,000 rows on SQLite);
  retention now also deletes the rows that are done with once their incident is deleted.
* ``ix_incident_feedback_incident`` on ``incident_feedback (incident_id)``: an incident's feedback,
  and the highest incident id it names, which SQLite reads for every new incident (a full scan).

Both are built ``CONCURRENTLY`` on PostgreSQL (the webhook and the notifier keep writing), so on
PostgreSQL this revision is not one transaction: an index whose build was interrupted is left
invalid, and the next start drops it and builds it again. On SQLite the revision is one transaction.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from fleetmind.serving.migrations import drop_invalid_index

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

OWED = "state = 'firing' OR am_sent_ts IS NULL OR hook_sent IS {false}"
"""The partial index's predicate: the notifier's poll (``serving.db.NOTIFICATION_OWED``) as
SQLAlchemy renders it on each database, so that the planner matches the two."""

INDEXES = (
    ("ix_notifications_owed", "notifications", ["incident_id"], OWED),
    ("ix_incident_feedback_incident", "incident_feedback", ["incident_id"], None),
)


def upgrade() -> None:
    bind = op.get_bind()
    pg = bind.dialect.name == "postgresql"
    for name, table, columns, where in INDEXES:
        if pg:
            with op.get_context().autocommit_block():
                drop_invalid_index(op.get_bind(), name)  # left by an interrupted build
                op.create_index(
                    name,
                    table,
                    columns,
                    postgresql_concurrently=True,
                    postgresql_where=None
                    if where is None
                    else sa.text(where.format(false="false")),
                    if_not_exists=True,
                )
        else:
            op.create_index(
                name,
                table,
                columns,
                sqlite_where=None if where is None else sa.text(where.format(false="0")),
                if_not_exists=True,  # made by MetaData.create_all: already current
            )


def downgrade() -> None:
    for name, table, _columns, _where in INDEXES:
        op.drop_index(name, table)
