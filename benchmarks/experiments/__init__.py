"""One-off experiments, one dated folder each: kept as the record of what was run, not maintained tools.

The folders are named ``<date it was run>-<topic>`` and run as modules
(``python -m benchmarks.experiments.<folder>.<name>``). Two modules left the library on 2026-12-01 for
the experiment that used them: ``2026-11-29-placement-teacher-search/head_search.py`` (formerly
``rl/head_search.py``) and ``2026-11-30-dynamic-relaxed-reference/dynamic_relaxed.py`` (formerly
``envs/dynamic_relaxed.py``). A folder name with dashes is no identifier, so tests import them with
``importlib.import_module("benchmarks.experiments.<folder>.<module>")``.
"""
