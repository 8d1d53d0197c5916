"""Operator tables: feedback labels and root-cause notifications.

``incident_feedback`` and ``feedback_graphs`` hold the root causes engineers confirmed or corrected
(``POST /api/v1/incidents/{id}/feedback``) with the alerts and graph they were given on;
``notifications`` records which settled root causes went to Alertmanager and the webhook. New
tables only: nothing existing changes.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "incident_feedback",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("incident_id", sa.Integer, nullable=False),
        sa.Column("root_cause", sa.Text, nullable=False),
        sa.Column("fault_type", sa.String(128), nullable=True),
        sa.Column("by", sa.String(256), nullable=False),
        sa.Column("note", sa.Text, nullable=True),
        sa.Column("created_ts", sa.Float, nullable=False),
        sa.Column("model_top", sa.Text, nullable=True),
        sa.Column("model_rank", sa.Integer, nullable=True),
        sa.Column("method", sa.String(128), nullable=True),
        sa.Column("model_version", sa.String(256), nullable=True),
        sa.Column("graph_digest", sa.String(64), nullable=False),
        sa.Column("alerts", sa.JSON, nullable=False),
    )
    op.create_table(
        "feedback_graphs",
        sa.Column("digest", sa.String(64), primary_key=True),
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("graph", sa.JSON, nullable=False),
    )
    op.create_table(
        "notifications",
        sa.Column("incident_id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("cause_node", sa.Text, nullable=False),
        sa.Column("labels", sa.JSON, nullable=False),
        sa.Column("annotations", sa.JSON, nullable=False),
        sa.Column("starts_at", sa.String(40), nullable=False),
        sa.Column("ends_at", sa.String(40), nullable=True),
        sa.Column("am_sent_ts", sa.Float, nullable=True),
        sa.Column("hook_sent", sa.Boolean, nullable=False),
        sa.Column("updated_ts", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("notifications")
    op.drop_table("feedback_graphs")
    op.drop_table("incident_feedback")
