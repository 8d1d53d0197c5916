"""Placement benchmarks in fgd mode: simulator fidelity and speed, the PPO agent against FGD, why pods fail."""
