"""FleetMind `data` package."""
