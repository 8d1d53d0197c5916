"""Experiment of 2026-11-30: dynamic-relaxed-reference."""
