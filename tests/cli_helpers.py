"""Helpers for the CLI tests: a command refused before any work."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetmind.cli import main


def refused_line(capsys: pytest.CaptureFixture[str], argv: list[str], path: Path) -> str:
    """``argv`` exits 2 with one error line and leaves ``path`` byte for byte as it was; the line."""
    before = path.read_bytes()
    rc = main(argv)
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("fleetmind")]
    assert rc == 2, err
    assert len(err) == 1, err
    assert path.read_bytes() == before
    return err[0]
