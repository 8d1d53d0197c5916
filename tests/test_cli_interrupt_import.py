"""Ctrl-C while ``fleetmind`` imports ``fleetmind.data.paths`` (which loads numpy through
``fleetmind.data.openb_synthetic``, the first tenth of a second or so) ends with one line and
status 130, as Ctrl-C does later (``fleetmind.cli.runner.run_main``), instead of a
``KeyboardInterrupt`` traceback: that import runs under ``run_main``'s guard."""

from __future__ import annotations

import os
import subprocess
import sys

# A meta-path finder stands for the Ctrl-C: it raises KeyboardInterrupt when the module is imported,
# in a fresh interpreter (this one has imported it already).
INTERRUPTED_IMPORT = """
import sys

class Interrupt:
    def find_spec(self, name, path=None, target=None):
        if name == "fleetmind.data.openb_synthetic":
            raise KeyboardInterrupt
        return None

sys.meta_path.insert(0, Interrupt())
from fleetmind.cli import main

sys.exit(main(sys.argv[1:]))
"""


def test_ctrl_c_while_the_data_paths_import() -> None:
    env = dict(os.environ, MLFLOW_DISABLE_TELEMETRY="true")
    proc = subprocess.run(
        [sys.executable, "-c", INTERRUPTED_IMPORT, "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert (proc.returncode, proc.stderr, proc.stdout) == (130, "fleetmind: interrupted\n", "")
