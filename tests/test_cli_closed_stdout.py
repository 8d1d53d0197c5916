"""A reader of stdout that goes away (``fleetmind fleet show --json out.json | head``) ends the
command quietly with status 141, and the ``--json`` file is written all the same.

Python ignores SIGPIPE, so a write to a pipe whose reader has gone raises ``BrokenPipeError``: the
command printed a traceback and, since it wrote ``--json`` after printing, lost the file. The
handling follows the Python docs' "Note on SIGPIPE" (:mod:`signal`): point stdout at
``os.devnull`` and exit; 141 is 128 + SIGPIPE, what a shell reports for ``yes | head``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_fleet_show_into_a_closed_pipe_keeps_the_json(tmp_path: Path) -> None:
    out = tmp_path / "fleet.json"
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the command writes anything
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "fleetmind.cli", "fleet", "show"]
            + ["--topology", str(REPO / "data" / "fleets" / "small.yaml"), "--json", str(out)],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write_end)
    assert proc.stderr == "", proc.stderr  # no traceback, no "Exception ignored" at exit
    assert proc.returncode == 141
    assert json.loads(out.read_text())["shown_node"]["name"]
