"""Relaxed reference schedules for dynamic mode (formerly ``envs/dynamic_relaxed.py``).

How much could any placement policy win: ideal runtimes and pooled resources on the simulator's own
event loop; see ``docs/dynamic.md`` (relaxed reference). Driven by
``benchmarks/dynamic_relaxed_reference.py``; tested by ``tests/test_dynamic_relaxed.py``.
"""
