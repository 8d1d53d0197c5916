"""FleetMind `serving` package."""
