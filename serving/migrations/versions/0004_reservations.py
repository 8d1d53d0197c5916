"""Reservations shared by replicas: the scheduler extender's holds and reserve=true placements.

No index: rows live minutes (TTL) and expired ones are deleted on the next write, so the table
holds about as many rows as pods being scheduled.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if "reservations" in sa.inspect(op.get_bind()).get_table_names():
        return  # made by MetaData.create_all with this release's metadata: already current
    op.create_table(
        "reservations",
        sa.Column("pod_key", sa.String(320), primary_key=True),
        sa.Column("pod_uid", sa.String(128), nullable=True),
        sa.Column("cluster", sa.String(256), nullable=False),
        sa.Column("node", sa.String(256), nullable=False),
        sa.Column("gpus", sa.JSON, nullable=False),
        sa.Column("gpu_milli", sa.Integer, nullable=False),
        sa.Column("cpu_milli", sa.Integer, nullable=False),
        sa.Column("memory_mib", sa.Integer, nullable=False),
        sa.Column("created_ts", sa.Float, nullable=False),
        sa.Column("expires_ts", sa.Float, nullable=False),
        sa.Column("bound_ts", sa.Float, nullable=True),
    )


def downgrade() -> None:
    op.drop_table("reservations")
