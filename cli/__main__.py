"""``python -m fleetmind.cli``: the ``fleetmind`` command (:func:`fleetmind.cli.main.main`)."""

import sys

from fleetmind.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
