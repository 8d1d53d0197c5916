"""Trace rows whose GPU fields disagree are said, and GPU model names print as plain strings.

Upstream behaviour followed: in the openb schema (Alibaba ``clusterdata``,
``cluster-trace-gpu-v2023/README.md``) ``num_gpu`` is the number of GPUs a pod asks for and
``gpu_milli`` the share of each; the FGD simulator (``hkust-adsl/kubernetes-scheduler-simulator``,
``pkg/type/open-gpu-share/cache``, ``GpuNodeInfo.AllocateGpuId``: ``if reqGpuMilli <= 0 ||
reqGpuNum <= 0`` it assigns no GPU) gives a pod with no GPU count no GPU, so ``gpu_milli`` on such
a row is dropped: the loader keeps that reading and warns, as it does for ``gpu_milli`` above
1000. NumPy 2 changed the ``repr`` of its scalars (NEP 51:
``np.str_('H100')``), so messages convert them to ``str`` before quoting.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from fleetmind.data.openb import (
    TraceWarning,
    load_openb_nodes,
    load_openb_trace,
    no_fit_reason,
)

HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,creation_time,deletion_time\n"


def test_num_gpu_zero_with_a_gpu_share_warns_with_a_count(tmp_path: Path) -> None:
    rows = "a,4000,8192,1,500,,0,10\nb,4000,8192,0,500,,1,11\nc,4000,8192,0,0,,2,12\n"
    rows += "d,4000,8192,0,250,,3,13\n"
    path = tmp_path / "n0.csv"
    path.write_text(HEADER + rows)
    with pytest.warns(TraceWarning) as got:
        trace = load_openb_trace(path)
    (w,) = got
    msg = str(w.message)
    assert "2 pod(s) with num_gpu 0 ask for gpu_milli above 0" in msg
    assert "row 2 (line 3), gpu_milli 500" in msg  # the first one
    # read as before: CPU-only, no GPU share
    assert trace.num_gpu.tolist() == [1, 0, 0, 0] and trace.gpu_milli.tolist() == [500, 0, 0, 0]


def test_a_consistent_trace_draws_no_warning(tmp_path: Path) -> None:
    path = tmp_path / "ok.csv"
    path.write_text(HEADER + "a,4000,8192,1,500,,0,10\nc,4000,8192,0,0,,2,12\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error", TraceWarning)
        load_openb_trace(path)


def test_an_unknown_gpu_model_is_quoted_as_a_plain_string(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text(HEADER + "p0,4000,8192,1,1000,H100,1,2\n")
    (tmp_path / "n.csv").write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,8,T4\n")
    trace = load_openb_trace(tmp_path / "t.csv")
    reason = no_fit_reason(trace, load_openb_nodes(tmp_path / "n.csv"), 0)
    assert reason == "pod p0 asks for GPU model(s) 'H100' that no node with room has"
