"""The schema ``MetaData.create_all`` made before migrations (the builds before Alembic; release
0.2.0 ships revisions 0001 to 0004).

Revision ID: 0001
Revises:
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "alerts",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("fingerprint", sa.String(128), nullable=False),
        sa.Column("starts_at", sa.String(40), nullable=False),
        sa.Column("starts_ts", sa.Float, nullable=False),
        sa.Column("ends_ts", sa.Float, nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("alertname", sa.String(256), nullable=True),
        sa.Column("labels", sa.JSON, nullable=False),
        sa.Column("annotations", sa.JSON, nullable=False),
        sa.Column("generator_url", sa.Text, nullable=True),
        sa.Column("node", sa.String(512), nullable=True),
        sa.Column("received_ts", sa.Float, nullable=False),
        sa.Column("updated_ts", sa.Float, nullable=False),
        sa.Column("pending", sa.Boolean, nullable=False),
        sa.Column("incident_id", sa.Integer, nullable=True),
        sa.UniqueConstraint("fingerprint", "starts_at", name="uq_alert_fingerprint_starts"),
    )
    op.create_index("ix_alerts_pending", "alerts", ["pending"])
    op.create_index("ix_alerts_incident", "alerts", ["incident_id", "id", "status"])
    op.create_table(
        "incidents",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("opened_ts", sa.Float, nullable=False),
        sa.Column("updated_ts", sa.Float, nullable=False),
        sa.Column("closed_ts", sa.Float, nullable=True),
        sa.Column("first_alert_ts", sa.Float, nullable=False),
        sa.Column("last_alert_ts", sa.Float, nullable=False),
        sa.Column("alert_count", sa.Integer, nullable=False),
        sa.Column("firing_count", sa.Integer, nullable=False),
        sa.Column("nodes", sa.JSON, nullable=False),
        sa.Column("clusters", sa.JSON, nullable=False),
        sa.Column("causes", sa.JSON, nullable=False),
        sa.Column("method", sa.String(128), nullable=True),
        sa.Column("model_version", sa.String(256), nullable=True),
        sa.Column("rca_ts", sa.Float, nullable=True),
        sa.Column("merged_into", sa.Integer, nullable=True),
    )
    op.create_index("ix_incidents_status", "incidents", ["status"])


def downgrade() -> None:
    op.drop_table("incidents")
    op.drop_table("alerts")
