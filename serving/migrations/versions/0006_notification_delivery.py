"""What became of a root-cause notification's firing message, per channel.

``notifications.delivery`` (JSON, nullable): ``{"alertmanager": ..., "webhook": ...}``, each
``"sent"`` (the channel took the firing message), ``"dropped: <outcome>"`` (given up: a final 4xx
or ``FLEETMIND_NOTIFY_GIVE_UP_S``) or the last failed outcome (``"500"``, ``"ConnectError"``) while
it is retried. It is kept when the row resolves, so the incident page says "sent" only for a
delivered message and the webhook gets no "resolved" message for a firing one it never got. Rows
written before this revision keep ``NULL`` (read as before). A new nullable column only.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    columns = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("notifications")}
    if "delivery" in columns:
        return  # made by MetaData.create_all with this release's metadata: already current
    op.add_column("notifications", sa.Column("delivery", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("notifications", "delivery")
