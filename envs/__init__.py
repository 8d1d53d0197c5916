"""FleetMind `envs` package."""
