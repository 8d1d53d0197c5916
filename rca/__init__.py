"""FleetMind `rca` package."""
