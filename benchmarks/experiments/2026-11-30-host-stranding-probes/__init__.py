"""Experiment of 2026-11-30: host-stranding-probes."""
