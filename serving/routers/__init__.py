"""One router per resource: alerts, incidents, rca, placements, fleet, graph, models, health."""
