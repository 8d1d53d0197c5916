"""FleetMind benchmarks by area, run as modules from the checkout root (`python -m benchmarks.<area>.<name>`); INDEX.md lists their results."""
