"""``fleetmind.serving.routers``, the folder ``serving/routers/``.

One router per resource: alerts, incidents, fleet, graph, models, health."""
