"""The priority of the pod a hold is for.

``reservations.pod_priority`` (Integer, nullable): the pod's ``spec.priority`` when the extender
held capacity for it, recorded only for pods whose whole request kube-scheduler counts itself
(CPU, memory, ``nvidia.com/gpu``, ``nvidia.com/mig-*``). A pod of that kind nominated to a node
(``status.nominatedNodeName``) does not count the recorded holds on that node of pods of lower
priority (:meth:`fleetmind.serving.scheduler.reservations.DbReservations.view`): such a pod was
evicted for it, or is bound or assumed and counted by kube-scheduler's own fit. ``NULL``: no
priority recorded (rows written before this revision, GPU-share pods, ``reserve=true``
placements): such a hold counts for every preemptor. A new nullable column only.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    columns = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("reservations")}
    if "pod_priority" in columns:
        return  # made by MetaData.create_all with this release's metadata: already current
    op.add_column("reservations", sa.Column("pod_priority", sa.Integer(), nullable=True))


def downgrade() -> None:
    op.drop_column("reservations", "pod_priority")
