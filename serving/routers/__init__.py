"""``fleetmind.serving.routers``, the folder ``serving/routers/``.

One router per resource: alerts, incidents, placements, fleet, graph, models, health."""
