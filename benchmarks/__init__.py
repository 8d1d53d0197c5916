"""FleetMind's benchmarks and experiments: scripts that write JSON results (never part of the library)."""
