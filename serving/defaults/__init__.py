"""``fleetmind.serving.defaults``, the folder ``serving/defaults/``.

Embedded defaults of the service: a small example dependency graph (``graph.json``).

``graph.json`` is written by :func:`fleetmind.serving.defaults.example.build_example_graph` with its default
arguments (``python -m serving.defaults.example`` regenerates it).
"""

from pathlib import Path

DEFAULTS_DIR = Path(__file__).resolve().parent
DEFAULT_GRAPH = DEFAULTS_DIR / "graph.json"
