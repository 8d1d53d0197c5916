"""Result files of training and evaluation runs.

:func:`write_json` writes a run's summary (the ``--json`` file of ``fleetmind rca ...`` and
``fleetmind sched ...``); the trainers in this package and the CLI share it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_json(path: str | Path | None, payload: dict[str, Any]) -> None:
    """Write ``payload`` as indented JSON to ``path`` (parent folders created); no-op for ``None``."""
    if path is None:
        return
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=2, sort_keys=False) + "\n")
