"""FleetMind `training` package."""
