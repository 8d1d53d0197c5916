"""SIGTERM (what ``timeout``, a CI job's cancel, systemd and Kubernetes send) unwinds a command as
Ctrl-C does: ``fleetmind: interrupted``, status 143, the MLflow run ended ``KILLED`` and
MLflow's temporary copy of a model removed. Before, SIGTERM's default action ended the process
where it was: a run stopped after the fit, or any ``sched train`` run, stayed ``RUNNING`` for
ever, and MLflow's copy of the model (``model.pt``) stayed in ``$TMPDIR``.

Each command runs in a child process that sends the signal to itself from a hook at a fixed
point (a real signal, delivered by the kernel, at a deterministic moment): while MLflow saves the
model into its temporary folder (``mlflow.pyfunc.save_model``, which ``Model.log`` calls through
the flavor module: ``mlflow/models/model.py``), at the end of Lightning's fit after its last
check of the SIGTERM flag (``on_train_end``: ``pytorch_lightning/loops/fit_loop.py``), and before
``sched train``'s learning. Also: a Ctrl-C that lands in Python's exit after a complete command,
and matplotlib's warnings with a home folder it cannot write.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fleetmind.data.rca_gen.generate import DatasetSpec, generate_dataset
from fleetmind.data.rca_gen.graphs import GraphGenConfig

ROOT = Path(__file__).resolve().parents[1]


def _env(tmp_path: Path) -> dict[str, str]:
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    return {
        **os.environ,
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "TQDM_DISABLE": "1",
        "TMPDIR": str(tmp),
    }


def _child(
    tmp_path: Path, code: str, timeout: int = 600, **env: str
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**_env(tmp_path), **env},
        cwd=tmp_path,
        timeout=timeout,
    )


def _runs(uri: str) -> list[str]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exps = [e.experiment_id for e in client.search_experiments()]
    return [r.info.status for r in client.search_runs(exps)]


def _model_versions(uri: str) -> list:
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri, registry_uri=uri).search_model_versions()


def _leftovers(tmp_path: Path) -> list[str]:
    """What the command left in its ``$TMPDIR`` (torch's empty ``torchinductor_<user>`` aside)."""
    return sorted(
        p.name for p in (tmp_path / "tmp").iterdir() if not p.name.startswith("torchinductor")
    )


def _assert_stopped(proc: subprocess.CompletedProcess, status: int) -> None:
    assert proc.returncode == status, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.stderr.rstrip().splitlines()[-1] == "fleetmind: interrupted", proc.stderr[-2000:]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("sigterm") / "ds"
    small = GraphGenConfig(min_nodes=50, max_nodes=120)
    generate_dataset(data, DatasetSpec(n_incidents=40, seed=1, graphs=small, workers=1))
    return data


def _rca_train(data: Path, tmp_path: Path, epochs: int) -> list[str]:
    return [
        "rca", "train", "--data", str(data), "--epochs", str(epochs), "--hidden", "8",
        "--heads", "2", "--layers", "2", "--batch-size", "8", "--out", str(tmp_path / "runs"),
        "--tracking-uri", f"sqlite:///{tmp_path}/mlflow.db", "--json", str(tmp_path / "r.json"),
    ]  # fmt: skip


def test_sigterm_while_mlflow_logs_the_model(dataset: Path, tmp_path: Path) -> None:
    """SIGTERM after the fit, while MLflow writes the model into its temporary folder: the run
    stayed ``RUNNING`` and ``$TMPDIR/tmpXXXX/model/`` (with ``model.pt``) stayed behind."""
    code = f"""
import os, signal, sys
import mlflow.pyfunc
from fleetmind.cli import main

save = mlflow.pyfunc.save_model
def save_then_term(*args, **kwargs):
    save(*args, **kwargs)  # the copy is in MLflow's temporary folder now
    os.kill(os.getpid(), signal.SIGTERM)
mlflow.pyfunc.save_model = save_then_term
sys.exit(main({json.dumps(_rca_train(dataset, tmp_path, 1))}))
"""
    proc = _child(tmp_path, code)
    _assert_stopped(proc, 128 + signal.SIGTERM)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    assert _runs(uri) == ["KILLED"]
    assert _model_versions(uri) == []
    assert _leftovers(tmp_path) == []
    assert not (tmp_path / "r.json").exists()


def test_sigterm_after_lightnings_last_check_stops_the_run(dataset: Path, tmp_path: Path) -> None:
    """A SIGTERM that Lightning noted after its last check of the flag (the end of the last
    epoch) let the fit return as if complete; the command then went on as if nothing happened
    (or, once Lightning had put the default action back, died with the run ``FINISHED`` and no
    model)."""
    code = f"""
import os, signal, sys
import pytorch_lightning as pl
from fleetmind.cli import main
from fleetmind.training import rca_train

class Term(pl.Callback):
    def on_train_end(self, trainer, *args):
        os.kill(os.getpid(), signal.SIGTERM)  # Lightning's handler notes it; no check follows

build = rca_train._trainer
def with_term(*a, **k):
    trainer, ckpt = build(*a, **k)
    trainer.callbacks.append(Term())
    return trainer, ckpt
rca_train._trainer = with_term
sys.exit(main({json.dumps(_rca_train(dataset, tmp_path, 1))}))
"""
    proc = _child(tmp_path, code)
    _assert_stopped(proc, 128 + signal.SIGTERM)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    assert _runs(uri) == ["KILLED"]
    assert _model_versions(uri) == []


SCHED_TRAIN = [
    "sched", "train", "--mode", "fgd", "--trace", "default", "--timesteps", "64", "--n-envs", "1",
    "--bc-episodes", "1", "--eval-seeds", "1", "--no-register",
]  # fmt: skip


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_stopped_sched_train_ends_its_run_killed(tmp_path: Path, sig: int) -> None:
    """``sched train`` stopped in its body: SIGTERM left the run ``RUNNING``, Ctrl-C ended it
    ``FAILED`` (``rca train``'s is ``KILLED``, MLflow's status of a stopped run)."""
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    argv = [*SCHED_TRAIN, "--out", str(tmp_path / "runs")]
    code = f"""
import os, sys
from fleetmind.cli import main
from fleetmind.training.recipes import fgd

learn = fgd._learn
def stopped(r):
    os.kill(os.getpid(), {int(sig)})
    return learn(r)
fgd._learn = stopped
sys.exit(main({json.dumps(argv)}))
"""
    proc = _child(tmp_path, code, MLFLOW_TRACKING_URI=uri)
    _assert_stopped(proc, 128 + sig if sig == signal.SIGTERM else 130)
    assert _runs(uri) == ["KILLED"]


def test_ctrl_c_during_the_exit_ends_it_quietly(tmp_path: Path) -> None:
    """A Ctrl-C that lands in Python's exit (its atexit callbacks) after a complete command printed
    ``Exception ignored in atexit callback ... KeyboardInterrupt`` and a traceback; now it ends
    the exit at once with the command's status. The signal is sent from an atexit callback: the
    console script's exit."""
    code = """
import atexit, os, signal, sys, tempfile
from fleetmind.folders import remove_at_exit
folder = tempfile.mkdtemp(prefix="fleetmind-test-")  # as the CLI's own temporary folders
remove_at_exit(folder)
atexit.register(lambda: os.kill(os.getpid(), signal.SIGINT))  # runs first (last in, first out)
sys.argv = ["fleetmind", "graph", "schema"]
from fleetmind.cli.__main__ import main
sys.exit(main())
"""
    proc = _child(tmp_path, code, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)  # the command's output is whole
    # the exit was cut short (os._exit) before atexit removed the folder: it is removed anyway
    assert [p.name for p in (tmp_path / "tmp").iterdir() if p.name.startswith("fleetmind-")] == []
    assert "KeyboardInterrupt" not in proc.stderr and "Exception ignored" not in proc.stderr, (
        proc.stderr
    )


def test_sigterm_handler_is_given_back_to_serve() -> None:
    """``fleetmind serve`` keeps SIGTERM's default action outside PID 1: uvicorn handles it, then
    raises it again after its graceful shutdown (tests/test_serve_sigterm.py)."""
    from fleetmind.cli import OWN_SIGTERM_GROUPS, runner

    assert "serve" in OWN_SIGTERM_GROUPS
    before = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    undo = runner._guard_sigterm()
    try:
        assert signal.getsignal(signal.SIGTERM) is runner._end_on_sigterm
        runner.leave_sigterm_default()
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        undo()
        signal.signal(signal.SIGTERM, before)


def test_unwritable_matplotlib_folders_give_no_warnings(tmp_path: Path) -> None:
    """A home folder matplotlib cannot write (``HOME`` a file here, as root can write any folder;
    a read-only mount in a container) printed ``mkdir -p failed for path ...`` and ``Matplotlib
    created a temporary cache directory ...`` (``_get_config_or_cache_dir`` in
    ``matplotlib/__init__.py``). The temporary folder the CLI gives it is removed at exit."""
    code = """
import sys
from fleetmind.cli import main
rc = main(["graph", "schema"])
import matplotlib
print(matplotlib.get_cachedir(), file=sys.stderr)
sys.exit(rc)
"""
    home = tmp_path / "home"
    home.write_text("")  # no folder can be made under it
    env = {k: v for k, v in _env(tmp_path).items() if not k.startswith(("MPL", "XDG_"))}
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**env, "HOME": str(home)},
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "mkdir -p failed" not in proc.stderr, proc.stderr
    assert "Matplotlib created a temporary" not in proc.stderr, proc.stderr
    cache = Path(proc.stderr.strip().splitlines()[-1])
    assert cache.parent == tmp_path / "tmp", proc.stderr
    assert not cache.exists()  # removed at exit


def test_an_interrupted_commands_exit_is_bounded(tmp_path: Path) -> None:
    """After SIGTERM unwound a command, Python's exit can wait for ever: ``multiprocessing``'s
    exit joined the feeder thread of a killed pool's call queue, blocked writing a job into the
    dead workers' pipe (``sched evaluate --workers 2`` under ``timeout``: alive 10 minutes later).
    The exit of an interrupted command is now cut short after ``EXIT_GRACE_S``, its temporary
    folders removed; an exit that hangs is modelled by an atexit callback that sleeps."""
    code = """
import atexit, os, signal, sys, tempfile, time
from fleetmind.cli import runner
from fleetmind.folders import remove_at_exit
runner.EXIT_GRACE_S = 2.0
folder = tempfile.mkdtemp(prefix="fleetmind-test-")
remove_at_exit(folder)
atexit.register(time.sleep, 120)  # an exit that hangs
def stopped():
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5)
sys.exit(runner.run_main(stopped, prog="fleetmind", at_exit=True))
"""
    import time

    started = time.monotonic()
    proc = _child(tmp_path, code, timeout=60)
    assert proc.returncode == 143, proc.stderr
    assert time.monotonic() - started < 30
    assert proc.stderr.strip() == "fleetmind: interrupted", proc.stderr
    assert [p.name for p in (tmp_path / "tmp").iterdir() if p.name.startswith("fleetmind-")] == []


def test_a_sigterm_that_c_code_turned_into_another_error_still_reads_as_a_stop(
    tmp_path: Path,
) -> None:
    """A SIGTERM during ``fleetmind serve``'s imports as PID 1 (CI, 1 run in ~15): the
    ``Terminated`` raised inside numpy's C import of ``datetime`` came out as ``ImportError:
    PyCapsule_Import could not import module "datetime"``, a traceback and status 1. Modelled by a
    command that catches the stop and raises an ``ImportError`` in its place."""
    code = """
import os, signal, sys
from fleetmind.cli import runner
from fleetmind.errors import Terminated
def command():
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        signal.pause()
    except Terminated:
        raise ImportError('PyCapsule_Import could not import module "datetime"') from None
sys.exit(runner.run_main(command, prog="fleetmind"))
"""
    proc = _child(tmp_path, code, timeout=60)
    assert proc.returncode == 143, proc.stderr
    assert proc.stderr.strip() == "fleetmind: interrupted", proc.stderr
