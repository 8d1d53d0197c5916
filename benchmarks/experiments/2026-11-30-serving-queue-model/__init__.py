"""Experiment of 2026-11-30: serving-queue-model."""
