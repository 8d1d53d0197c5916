"""``fleetmind replay STORM --speed 0`` is refused before anything is printed.

``--wait`` and ``--rank-interval`` were checked before the storm's title was printed, ``--speed``
only inside the replay: the title came on stdout, then the error. Now stdout stays empty.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetmind.cli import main

STORM = Path(__file__).resolve().parents[1] / "examples" / "storm-gpu-xid.json"


@pytest.mark.parametrize("speed", ["0", "-1", "-0.5"])
def test_a_speed_not_above_zero_prints_nothing_on_stdout(
    speed: str, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    argv = ["replay", str(STORM), "--url", "http://127.0.0.1:9", "--speed", speed, "--wait", "0"]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == [f"fleetmind: error: --speed must be positive, got {float(speed):g}"]
