"""``fleetmind.cli``, the folder ``cli/``.

The ``fleetmind`` command line: :func:`fleetmind.cli.main.main` builds the parser from one module per
command group (``cli/sched.py`` is ``fleetmind sched``, ...). The CLI is the one layer that may import
every other (it trains, evaluates, starts the service); nothing in the library imports it.
``python -m fleetmind.cli`` runs it as the ``fleetmind`` console script does.
"""

from fleetmind.cli.main import main

__all__ = ["main"]
