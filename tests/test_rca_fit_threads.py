"""``rca fit --threads`` takes a positive integer: ``-1`` was a torch traceback
(``torch.set_num_threads`` refuses it: https://pytorch.org/docs/stable/generated/torch.set_num_threads.html)
and ``0`` was ignored in silence (torch's default thread count was used instead)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetmind.cli import main
from fleetmind.data.errors import ConfigError
from fleetmind.data.synth_system import make_system
from fleetmind.training.rca_fit import FitArgs, fit


@pytest.mark.parametrize("threads", ["-1", "0", "two"])
def test_threads_below_one_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], threads: str
) -> None:
    argv = ["rca", "fit", "--scenario", str(tmp_path), "--out", str(tmp_path / "m")]
    with pytest.raises(SystemExit) as exit_:
        main([*argv, f"--threads={threads}"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "argument --threads: expected a positive integer" in err and "Traceback" not in err


def test_fit_refuses_zero_threads_before_any_work(tmp_path: Path) -> None:
    make_system(tmp_path / "shop", n_services=4, normal_rows=40, issues=1, seed=1)
    with pytest.raises(ConfigError, match="--threads must be a positive integer, got 0"):
        fit(FitArgs(scenario=str(tmp_path / "shop"), out=str(tmp_path / "m"), threads=0))
    assert not (tmp_path / "m").exists()
