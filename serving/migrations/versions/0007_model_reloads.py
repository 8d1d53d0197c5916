"""The service's model reload generation, which every worker and replica follows.

``model_reloads``: one row (``id`` 1) with ``generation`` (+1 per ``POST /api/v1/models/reload``,
on any worker or replica) and ``requested_ts`` (Unix s of the latest request). Every process
compares it with the generation it has taken up and reloads its models when it is behind
(:mod:`fleetmind.serving.registry`). A new table only: nothing existing changes.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if sa.inspect(op.get_bind()).has_table("model_reloads"):
        return  # made by MetaData.create_all with this release's metadata: already current
    op.create_table(
        "model_reloads",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("generation", sa.Integer, nullable=False),
        sa.Column("requested_ts", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("model_reloads")
