"""``fleetmind doctor --json PATH`` writes its findings whole or not at all (README: result files go
through a temporary file renamed over the old one): a write that fails, here on the file size
limit (``RLIMIT_FSIZE``, ``ulimit -f``), leaves the previous findings as they were. It wrote in
place: the old file was truncated and left holding the first 1,024 bytes of the new one, invalid
JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import resource, signal, sys
from fleetmind.serving.telemetry import doctor

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
doctor.diagnose = lambda url, timeout_s, cluster: [
    doctor.Finding("error", "metrics", f"finding {i} " + "x" * 100) for i in range(40)
]
from fleetmind.cli import main

resource.setrlimit(resource.RLIMIT_FSIZE, (1024, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
sys.exit(main(["doctor", "--prometheus", "http://127.0.0.1:9", "--json", sys.argv[1]]))
"""


def test_a_failed_json_write_keeps_the_old_findings(tmp_path: Path) -> None:
    out = tmp_path / "doctor.json"
    old = {"prometheus": "http://old", "errors": 0, "findings": []}
    out.write_text(json.dumps(old))
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode != 0, proc.stdout  # the write failed
    assert "Traceback" not in proc.stderr, proc.stderr
    assert json.loads(out.read_text()) == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["doctor.json"]  # no temporary file left
