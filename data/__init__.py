"""``fleetmind.data``, the folder ``data/``.

Fleets, topologies, dependency graphs, the alert simulator, traces and dataset loaders.

Importing it checks that ``fleetmind`` is the installed package and not a folder of that name that
Python found first (a source checkout named ``fleetmind`` with Python started in its parent folder,
under an editable install): then it stops with an error that says so, instead of a later
``module 'fleetmind' has no attribute ...``. Every other subpackage imports this one first.
"""

import sys as _sys


def _check_not_shadowed() -> None:
    top = _sys.modules.get("fleetmind")
    if top is None or getattr(top, "__file__", None) is not None:
        return
    folders = ", ".join(str(p) for p in getattr(top, "__path__", [])) or "?"
    raise ImportError(
        f"a folder named 'fleetmind' ({folders}) shadows the installed fleetmind package: Python "
        "found it first on its path (the current folder comes first); run Python from another "
        "folder (for a source checkout named fleetmind: from inside it), or rename the folder"
    )


_check_not_shadowed()
