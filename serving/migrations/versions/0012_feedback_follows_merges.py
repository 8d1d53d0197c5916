"""Feedback of incidents merged before this release moves to the incident they ended in.

A merge moves the merged incident's ``incident_feedback`` rows to the incident it joined
(:meth:`fleetmind.serving.incidents.store.IncidentStore.merge`); releases before did not, so a
database can hold feedback on incidents with ``status = 'merged'``: invisible on the surviving
incident's page and API, not correctable there, and exported as a training incident of its own.
This revision moves each such row to the end of its incident's ``merged_into`` chain (merges can
chain; followed while the incident named is itself merged, at most :data:`MAX_STEPS` steps, as
:meth:`~fleetmind.serving.incidents.store.IncidentStore.follow_merges` does). Ids and times are
kept, so the latest feedback of the incidents merged together is the survivor's label. Data only:
no schema change; the downgrade leaves the rows where they are.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

MAX_STEPS = 100
"""Steps along a ``merged_into`` chain, as the service follows one (a cycle stops there)."""

MOVE = sa.text(
    "UPDATE incident_feedback SET incident_id = ("
    " SELECT i.merged_into FROM incidents i WHERE i.id = incident_feedback.incident_id)"
    " WHERE incident_id IN ("
    " SELECT id FROM incidents WHERE status = 'merged' AND merged_into IS NOT NULL)"
)
"""One step: each feedback row of a merged incident to the incident it was merged into."""


def upgrade() -> None:
    bind = op.get_bind()
    for _ in range(MAX_STEPS):
        if not bind.execute(MOVE).rowcount:
            return


def downgrade() -> None:
    pass  # where a row was before is not recorded; on a merged incident it helped nobody
