"""``fleetmind doctor --json /dev/stdout`` writes the findings through stdout, so a stdout that fails
there is stdout's failure under the runner's contract (:mod:`fleetmind.cli.runner`): a reader that
went away (``| true``) ends the command quietly with status 141, a full disk prints the one
``writing a file failed`` line. The ``--json`` error handling caught both and reported a false
"cannot write the findings ...; they are printed above" with status 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CHILD = r"""
import sys
from fleetmind.serving.telemetry import doctor

doctor.diagnose = lambda url, timeout_s, cluster: [
    doctor.Finding("error", "metrics", f"finding {i}") for i in range(3)
]
from fleetmind.cli import main

sys.exit(main(["doctor", "--prometheus", "http://127.0.0.1:9", "--json", "/dev/stdout"]))
"""


def _doctor(stdout: int, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "HOME": str(tmp_path)}
    env.pop("PYTHONUNBUFFERED", None)
    return subprocess.run(
        [sys.executable, "-c", CHILD],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        timeout=120,
    )


@pytest.mark.skipif(not os.path.exists("/dev/stdout"), reason="needs /dev/stdout")
def test_json_to_stdout_into_a_closed_pipe_is_quiet_141(tmp_path: Path) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # `| true`: the reader is gone before the findings are written
    try:
        proc = _doctor(write_end, tmp_path)
    finally:
        os.close(write_end)
    assert (proc.returncode, proc.stderr) == (141, "")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_json_to_stdout_on_a_full_disk_is_the_runners_one_line(tmp_path: Path) -> None:
    with open("/dev/full", "w") as full:
        proc = _doctor(full.fileno(), tmp_path)
    line = "fleetmind: error: writing a file failed: No space left on device\n"
    assert (proc.returncode, proc.stderr) == (2, line)
