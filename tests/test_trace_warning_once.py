"""``trace_warnings_on_stderr`` prints each distinct trace warning once per process: a training
run reads its trace at several steps (teacher, demonstrations, evaluation, each environment), and
Python's ``default`` action says a message again whenever the warning filters change (any
``warnings.catch_warnings``, as MLflow's and the recipes' own), so the num_gpu-0 line came 5-6
times per ``sched train``."""

from __future__ import annotations

import warnings
from pathlib import Path

from fleetmind.cli.sched import trace_warnings_on_stderr
from fleetmind.data.openb import TraceWarning, load_openb_trace

HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,creation_time,deletion_time\n"


def test_a_trace_read_many_times_warns_once(tmp_path: Path, capsys) -> None:
    trace = tmp_path / "zero.csv"
    trace.write_text(HEADER + "".join(f"p{i},1000,1024,0,300,,{i},{i + 9}\n" for i in range(5)))
    with trace_warnings_on_stderr():
        for _ in range(3):
            load_openb_trace(trace)
            with warnings.catch_warnings():  # a library changing the filters in between
                warnings.simplefilter("ignore", DeprecationWarning)
        warnings.warn("another   message", TraceWarning, stacklevel=1)
        warnings.warn("another message", TraceWarning, stacklevel=1)  # same text, other line
    lines = capsys.readouterr().err.splitlines()
    zero = [ln for ln in lines if "num_gpu 0" in ln]
    assert len(zero) == 1 and zero[0].startswith(f"fleetmind: warning: {trace}: 5 pod(s)")
    assert lines.count("fleetmind: warning: another message") == 1
    assert len(lines) == 2
