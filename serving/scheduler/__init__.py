"""``fleetmind.serving.scheduler``, the folder ``serving/scheduler/``.

GPU placement on the live fleet: :mod:`.placement` holds the placers (the served policy, the
heuristics) and the reservations they respect, :mod:`.reservations` the database-backed holds
shared by every worker, :mod:`.extender` the kube-scheduler extender protocol (filter, prioritize,
bind). The routes: :mod:`.router` (``/api/v1/scheduler``, for kube-scheduler) and
:mod:`.placement_router` (``POST /api/v1/placements``).
"""
