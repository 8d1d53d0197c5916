"""Feedback of incidents merged before this release moves to the incident they ended in.

A merge moves the merged incident's ``incident_feedback`` rows to the incident it joined
(:meth:`fleetmind.serving.incidents.store.IncidentStore.merge`); releases before did not, so a
database can hold feedback on incidents with ``status = 'merged'``: invisible on the surviving
incident's page and API, not correctable there, and exported as a training incident of its own.
This revision moves each such row to the end of its incident's ``merged_into`` chain (merges can
chain; followed while the incident named is itself merged, at most
:data:`~fleetmind.serving.incidents.store.MERGE_STEPS` steps, as
:meth:`~fleetmind.serving.incidents.store.IncidentStore.follow_merges` does). Ids and times are
kept, so the latest feedback of the incidents merged together is the survivor's label. Data only:
no schema change; the downgrade leaves the rows where they are.

The move is :func:`fleetmind.serving.incidents.store.move_merged_feedback`, which the incident
worker's housekeeping also runs: during a rolling upgrade, replicas of an older release keep
merging without moving feedback after this revision ran.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-07
"""

from __future__ import annotations

from alembic import op

from fleetmind.serving.incidents.store import move_merged_feedback

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    move_merged_feedback(op.get_bind())


def downgrade() -> None:
    pass  # where a row was before is not recorded; on a merged incident it helped nobody
