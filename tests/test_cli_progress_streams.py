"""Progress bars draw on stderr, and only when stderr is a terminal.

``sched train --seeds N`` prints JSON on stdout and ``rca train`` its results table; the training
bars went there too: stable-baselines3's ``learn(progress_bar=True)`` draws a ``tqdm.rich`` bar
through rich's console, which writes to ``sys.stdout``, and Lightning's ``TQDMProgressBar`` makes
its bars with ``file=sys.stdout`` (``pytorch_lightning/callbacks/progress/tqdm_progress.py``). And a
bar redraws its line with ``\\r`` several times a second, so a log file that captured stderr
(cron, CI) held dozens of frames per bar; tqdm's ``disable=None`` turns a bar off when its stream
is not a terminal (``tqdm.std.tqdm.__init__``).

The commands run in child processes with stderr on a pseudo-terminal (a bar draws) or a file (no
bar), stdout on a pipe; the suite's ``TQDM_DISABLE`` is taken out of their environment.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import struct
import subprocess
import sys
import termios
import threading
from pathlib import Path

import pytest

from fleetmind.progress import bar_disable

TINY = ["--incidents", "5", "--min-nodes", "50", "--max-nodes", "60", "--workers", "1"]
"""``rca generate`` arguments for a dataset that takes a second."""

BAR_MARKS = ("\r", "it/s", "%|", "\u2501")  # a redraw, tqdm's rate and bar, rich's bar line


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TQDM_DISABLE"}
    env.update(MLFLOW_DISABLE_TELEMETRY="true", MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path}/m.db")
    env.pop("PYTHONUNBUFFERED", None)
    return env


def _fleetmind_tty_stderr(args: list[str], tmp_path: Path) -> tuple[int, str, str]:
    """Run ``fleetmind ARGS`` with stdout on a pipe and stderr on a pseudo-terminal: (status,
    stdout, what the terminal received)."""
    master, slave = pty.openpty()
    # a new pseudo-terminal is 0 columns wide, and tqdm fits its bar to the width: 80 x 24
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    got: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every writer closed the terminal
                return
            if not chunk:
                return
            got.append(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "fleetmind.cli", *args],
            stdout=subprocess.PIPE,
            stderr=slave,
            env=_env(tmp_path),
            timeout=600,
        )
    finally:
        os.close(slave)
    reader.join(timeout=30)
    os.close(master)
    return proc.returncode, proc.stdout.decode(), b"".join(got).decode(errors="replace")


def test_sched_train_json_on_stdout_and_the_timestep_bar_on_stderr(
    shared_data: os.PathLike[str], tmp_path: Path
) -> None:
    trace = tmp_path / "trace.csv"
    src = Path(shared_data) / "openb" / "csv" / "openb_pod_list_default.csv"
    with src.open() as f:
        trace.write_text("".join(line for _, line in zip(range(60), f, strict=False)))
    args = ["sched", "train", "--mode", "fgd", "--trace", str(trace), "--timesteps", "64"]
    args += ["--bc-episodes", "1", "--n-envs", "1", "--no-register", "--seeds", "1"]
    code, out, err = _fleetmind_tty_stderr([*args, "--out", str(tmp_path / "runs")], tmp_path)
    assert code == 0, err[-2000:]
    assert set(json.loads(out)) == {"1"}, out[:300]  # stdout is exactly the JSON
    assert not any(mark in out for mark in BAR_MARKS)
    assert "PPO:" in err and "step" in err  # the timesteps bar, on the terminal


def test_rca_train_results_on_stdout_and_the_epoch_bars_on_stderr(tmp_path: Path) -> None:
    code, out, err = _fleetmind_tty_stderr([*_rca_train_args(tmp_path), "--no-register"], tmp_path)
    assert code == 0, err[-2000:]
    assert not any(mark in out for mark in BAR_MARKS), out[:500]
    assert "Epoch 0" in err and "\r" in err  # Lightning's train bar, on the terminal


def _rca_train_args(tmp_path: Path) -> list[str]:
    """``rca train`` of one epoch of a tiny model on a 40-incident dataset (seconds)."""
    from fleetmind.data.rca_gen.generate import DatasetSpec, generate_dataset
    from fleetmind.data.rca_gen.graphs import GraphGenConfig

    data = tmp_path / "ds"
    small = GraphGenConfig(min_nodes=50, max_nodes=80)
    generate_dataset(data, DatasetSpec(n_incidents=40, seed=1, graphs=small, workers=1))
    args = ["rca", "train", "--data", str(data), "--epochs", "1", "--hidden", "8", "--heads", "2"]
    return [*args, "--layers", "2", "--batch-size", "8", "--out", str(tmp_path / "runs")]


def test_rca_train_into_a_log_file_draws_no_bars(tmp_path: Path) -> None:
    """Lightning's bars and MLflow's artifact bar (``MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR``,
    ``mlflow/utils/file_utils.py``), which logging the model drew, stay off."""
    log = tmp_path / "train.log"
    with log.open("wb") as err:
        proc = subprocess.run(
            [sys.executable, "-m", "fleetmind.cli", *_rca_train_args(tmp_path), "--no-register"],
            stdout=subprocess.PIPE,
            stderr=err,
            env=_env(tmp_path),
            timeout=600,
        )
    text = log.read_text()
    assert proc.returncode == 0, text[-2000:]
    assert "\r" not in text and "it/s" not in text, text[-1000:]


def test_a_log_file_of_stderr_gets_no_bar_frames(tmp_path: Path) -> None:
    log = tmp_path / "gen.log"
    with log.open("wb") as err:
        proc = subprocess.run(
            [sys.executable, "-m", "fleetmind.cli", "rca", "generate", "--out", str(tmp_path / "d")]
            + TINY,
            stdout=subprocess.PIPE,
            stderr=err,
            env=_env(tmp_path),
            timeout=300,
        )
    assert proc.returncode == 0
    text = log.read_text()
    assert "\r" not in text and "rca generate" not in text, text[:300]


def test_a_terminal_still_gets_the_bar(tmp_path: Path) -> None:
    args = ["rca", "generate", "--out", str(tmp_path / "d"), *TINY]
    code, out, err = _fleetmind_tty_stderr(args, tmp_path)
    assert code == 0 and out.startswith("wrote ")
    assert "rca generate:" in err and "\r" in err


@pytest.mark.parametrize(
    ("show", "env", "want"), [(True, None, None), (False, None, True), (True, "1", True)]
)
def test_bar_disable(
    monkeypatch: pytest.MonkeyPatch, show: bool, env: str | None, want: bool | None
) -> None:
    """``None`` is tqdm's "off when the stream is not a terminal"; an explicit ``disable``
    overrides tqdm's ``TQDM_DISABLE`` default, so that variable is honoured by the helper."""
    if env is None:
        monkeypatch.delenv("TQDM_DISABLE", raising=False)
    else:
        monkeypatch.setenv("TQDM_DISABLE", env)
    assert bar_disable(show) is want


def _tiny_dataset(tmp_path: Path) -> Path:
    from fleetmind.data.rca_gen.generate import DatasetSpec, generate_dataset
    from fleetmind.data.rca_gen.graphs import GraphGenConfig

    data = tmp_path / "ds"
    small = GraphGenConfig(min_nodes=50, max_nodes=60)
    generate_dataset(data, DatasetSpec(n_incidents=20, seed=1, graphs=small, workers=1))
    return data


def test_library_progress_true_draws_where_stderr_is_no_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``evaluate_methods(progress=True)`` in a notebook (stderr no terminal) drew nothing, against
    its docstring, while ``tqdm.auto`` bars there draw: an explicit ``progress=True`` is a bar; the
    terminal-only rule is the CLI's (``show_bar``)."""
    from fleetmind.data.rca_dataset import load_dataset
    from fleetmind.progress import show_bar
    from fleetmind.rca.metrics import evaluate_methods, make_analyzers

    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    ds = load_dataset(_tiny_dataset(tmp_path))
    capsys.readouterr()
    res = evaluate_methods(ds.split("test"), make_analyzers(["deepest"]), ds.graphs, progress=True)
    err = capsys.readouterr().err
    assert res["n_incidents"] == len(ds.split("test"))
    assert "rca evaluate" in err, err  # the bar, on a stderr that is not a terminal
    evaluate_methods(ds.split("test"), make_analyzers(["deepest"]), ds.graphs, progress=False)
    assert "rca evaluate" not in capsys.readouterr().err
    assert show_bar(True) is False  # the CLI's value here: stderr is no terminal
    monkeypatch.setenv("TQDM_DISABLE", "1")
    evaluate_methods(ds.split("test"), make_analyzers(["deepest"]), ds.graphs, progress=True)
    assert "rca evaluate" not in capsys.readouterr().err


def test_rca_evaluate_into_a_log_file_draws_no_bar(tmp_path: Path) -> None:
    data = _tiny_dataset(tmp_path)
    log = tmp_path / "eval.log"
    with log.open("wb") as err:
        proc = subprocess.run(
            [sys.executable, "-m", "fleetmind.cli", "rca", "evaluate", "--data", str(data)]
            + ["--methods", "deepest", "--json", str(tmp_path / "e.json")],
            stdout=subprocess.PIPE,
            stderr=err,
            env=_env(tmp_path),
            timeout=300,
        )
    text = log.read_text()
    assert proc.returncode == 0, text[-2000:]
    assert "\r" not in text and "rca evaluate" not in text, text[:300]
