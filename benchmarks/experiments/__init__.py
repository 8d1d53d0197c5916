"""One-off research experiments, kept runnable but out of the library (nothing in ``fleetmind``
imports them, and they are not installed).

Each lives in a dated folder ``exp_YYYY_MM_DD_<topic>/``: the date it left the library, written as an
identifier so that the code imports from the checkout root as
``benchmarks.experiments.exp_YYYY_MM_DD_<topic>.<module>`` (tests and benchmark scripts do that).
"""
