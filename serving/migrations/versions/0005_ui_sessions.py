"""Server-side browser sessions for ``/ui``, so that logout and token rotation end them.

A row per login: the key is the SHA-256 of the session cookie (the cookie itself is never stored),
with the digest of the token that logged in, the scopes, the session's CSRF token and its expiry.
A new table only: nothing existing changes. No index: one row per signed-in browser, expired rows
are deleted at each login.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ui_sessions",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("token_digest", sa.String(64), nullable=False),
        sa.Column("scopes", sa.String(64), nullable=False),
        sa.Column("csrf", sa.String(64), nullable=False),
        sa.Column("created_ts", sa.Float, nullable=False),
        sa.Column("expires_ts", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("ui_sessions")
