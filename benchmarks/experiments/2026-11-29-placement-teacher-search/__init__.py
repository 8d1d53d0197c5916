"""Experiment of 2026-11-29: placement-teacher-search."""
