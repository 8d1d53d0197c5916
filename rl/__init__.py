"""FleetMind `rl` package."""
