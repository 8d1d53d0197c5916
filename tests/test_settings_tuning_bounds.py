"""``FLEETMIND_GC_GEN0_THRESHOLD`` and ``FLEETMIND_TORCH_THREADS`` past what the calls they feed
take (``gc.set_threshold`` and ``torch.set_num_threads`` take a C int) are refused by the settings
with one line naming the variable, exit status 2, instead of an OverflowError or ValueError
traceback when ``fleetmind serve`` applies them (serving/tuning.py)."""

from __future__ import annotations

import gc
import os

import pytest
from pydantic import ValidationError

from fleetmind.cli import main
from fleetmind.serving.settings import Settings
from fleetmind.serving.tuning import tune_gc

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
C_INT_MAX = 2**31 - 1


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("FLEETMIND_GC_GEN0_THRESHOLD", "2147483648"),
        ("FLEETMIND_TORCH_THREADS", "9999999999999"),
        ("FLEETMIND_TORCH_THREADS", "1025"),
    ],
)
def test_too_large_is_one_line_exit_2(
    name: str, value: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError):
        Settings()
    assert main(["serve", "--port", "18250"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].startswith("fleetmind: error: invalid setting"), err
    assert f"{name}='{value}'" in err[0] and "Traceback" not in err[0]


@pytest.mark.parametrize(
    ("name", "value"), [("GC_GEN0_THRESHOLD", C_INT_MAX), ("TORCH_THREADS", 1024)]
)
def test_the_bounds_are_accepted(name: str, value: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(f"FLEETMIND_{name}", str(value))
    assert getattr(Settings(), name.lower()) == value


def test_gc_takes_the_largest_threshold() -> None:
    """The largest accepted threshold is one ``gc.set_threshold`` takes (2**31 raised
    ``OverflowError: signed integer is greater than maximum``)."""
    old = gc.get_threshold()
    restore = tune_gc(C_INT_MAX)
    try:
        assert gc.get_threshold()[0] == C_INT_MAX
    finally:
        restore()
    assert gc.get_threshold() == old
