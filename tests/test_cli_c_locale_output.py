"""Under a C locale without UTF-8 mode (``LC_ALL=C PYTHONUTF8=0``) Python gives stdout the
``ascii`` encoding with the ``surrogateescape`` error handler, which the runner left alone (it
replaced only ``strict``): ``fleet show`` on a fleet with a non-ASCII name, and ``replay`` part-way
through a storm, ended in a ``UnicodeEncodeError`` traceback. Now what stdout cannot encode is
written with backslash escapes, and a lone surrogate that ``surrogateescape`` decoded from a
file name's byte is written back as that byte."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fleetmind.cli.runner import run_main

FLEET = """name: flötte-İı
clusters:
  - name: clüster-ı
    region: eu-zürich
    nodes:
      - {name: nöde-İ-0, template: dgx1-v100, cpu_milli: 80000, memory_mib: 524288}
"""


def test_fleet_show_with_a_non_ascii_name_under_the_c_locale(tmp_path: Path) -> None:
    topology = tmp_path / "fleet.yaml"
    topology.write_text(FLEET, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LC_", "PYTHONIO"))}
    env.update(LC_ALL="C", LANG="C", PYTHONUTF8="0", PYTHONCOERCECLOCALE="0")
    env["MLFLOW_DISABLE_TELEMETRY"] = "true"
    proc = subprocess.run(
        [sys.executable, "-m", "fleetmind.cli", "fleet", "show", "--topology", str(topology)],
        capture_output=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert b"Traceback" not in proc.stderr
    assert b"fl\\xf6tte-\\u0130\\u0131" in proc.stdout


def _ascii_surrogateescape_stdout(monkeypatch: pytest.MonkeyPatch) -> io.BytesIO:
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="ascii", errors="surrogateescape")
    monkeypatch.setattr(sys, "stdout", stream)
    return raw


def test_surrogates_round_trip_and_the_rest_is_escaped(monkeypatch: pytest.MonkeyPatch) -> None:
    raw = _ascii_surrogateescape_stdout(monkeypatch)
    name = b"v\xe4.csv".decode("ascii", "surrogateescape")  # a file name's byte, as os gives it

    def command() -> int:
        print(f"fleet flötte: {name}")
        return 0

    assert run_main(command, prog="fleetmind") == 0
    sys.stdout.flush()
    assert raw.getvalue() == b"fleet fl\\xf6tte: v\xe4.csv\n"
    assert sys.stdout.errors == "surrogateescape"  # given back after the command
