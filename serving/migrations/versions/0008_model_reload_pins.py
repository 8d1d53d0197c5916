"""The registry versions a model reload loaded, for every other worker and replica to load.

``model_reloads.pins`` (JSON, nullable): ``{"generation": G, kind: {"ref": ..., "pinned":
"models:/<name>/<version>"}}`` (pins of another generation than the row's are ignored),
written with each reload generation by the process that got ``POST /api/v1/models/reload``: it
resolved ``models:/<name>@<alias>`` once, and the others load that version rather than resolve the
alias again (which may have moved meanwhile). ``NULL``: none recorded (read as before: each process
loads its own references). A new nullable column only.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    columns = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("model_reloads")}
    if "pins" in columns:
        return  # made by MetaData.create_all with this release's metadata: already current
    op.add_column("model_reloads", sa.Column("pins", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("model_reloads", "pins")
