"""``python -m fleetmind.cli``: the ``fleetmind`` command (:func:`fleetmind.cli.main`)."""

import sys

from fleetmind.cli import main

if __name__ == "__main__":
    sys.exit(main())
