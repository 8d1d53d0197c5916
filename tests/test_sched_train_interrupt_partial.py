"""Ctrl-C during ``sched train`` names the run folder it left half-written.

Python raises ``KeyboardInterrupt`` on SIGINT (``signal`` docs: the default handler), and
``mlflow.start_run`` used as a context manager ends the run as failed and re-raises, so the
interrupt reaches the command with the run folder already made (``<out>/<run name>``).
"""

from __future__ import annotations

from pathlib import Path

from fleetmind.cli import main

HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,creation_time,deletion_time\n"


def test_an_interrupted_run_names_its_partial_folder(tmp_path: Path, monkeypatch, capsys) -> None:
    from fleetmind.training.recipes import fgd

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.chdir(tmp_path)
    trace = tmp_path / "pods.csv"
    trace.write_text(HEADER + "".join(f"p{i},1000,1024,1,500,,{i},{i + 9}\n" for i in range(20)))
    out = tmp_path / "runs"
    (out / "older_run").mkdir(parents=True)  # a finished run from before: not named

    def interrupted(a: fgd.FgdArgs) -> dict:
        model = Path(a.out) / "GpuPlacement-v0__ppo__0__1" / "model"
        model.mkdir(parents=True)
        (model / "clone.onnx").write_bytes(b"")
        raise KeyboardInterrupt

    monkeypatch.setattr(fgd, "run", interrupted)
    argv = ["sched", "train", "--trace", str(trace), "--timesteps", "0", "--out", str(out)]
    assert main(argv) == 130
    err = capsys.readouterr().err.splitlines()
    assert err[-2] == (
        f"fleetmind: warning: training stopped before the end: {out / 'GpuPlacement-v0__ppo__0__1'}"
        " is a partial run (its model/ folder, if any, is incomplete); delete it or train again"
    )
    assert err[-1] == "fleetmind: interrupted"
    assert "older_run" not in "\n".join(err)
