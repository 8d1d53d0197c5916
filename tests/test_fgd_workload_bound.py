"""fgd mode refuses a workload that would pass ``MAX_WORKLOAD_PODS`` pods (docs/placement.md, fgd
mode step 2): a legal trace of tiny GPU shares (``gpu_milli`` 1) on the openb node list's 6,212 GPUs
needs about 8 million draws, and used to fill gigabytes of memory for minutes with no output."""

from __future__ import annotations

import numpy as np
import pytest

from fleetmind.data.errors import DataError
from fleetmind.data.openb import trace_from_arrays
from fleetmind.envs import fgd_mode
from fleetmind.envs.fgd_mode import MAX_WORKLOAD_PODS, build_workload

OPENB_GPUS = 6212  # GPUs of openb_node_list_gpu_node.csv (1,213 nodes)


def _tiny(n: int = 20, milli: int = 1):
    return trace_from_arrays([1000] * n, [1024] * n, [1] * n, [milli] * n, name="tiny")


def test_tiny_gpu_shares_are_refused_at_once_in_one_line() -> None:
    with pytest.raises(DataError) as err:
        build_workload(_tiny(), 1213, OPENB_GPUS * 1000, seed=42)
    message = str(err.value)
    assert "\n" not in message
    assert message == (
        "trace tiny: its mean GPU request is 1.00 milli per pod, so reaching 8,075,600 GPU milli"
        f" would take about 8,075,600 pods; fgd mode builds at most {MAX_WORKLOAD_PODS:,} (use"
        " pods that ask for more GPU, or fewer nodes)"
    )


def test_the_bound_also_holds_while_drawing(monkeypatch: pytest.MonkeyPatch) -> None:
    # one 1000-milli pod and nine 1-milli pods (mean 100.9 milli) towards 26,000 milli: the mean
    # says about 258 pods, under a bound of 270; seed 0 draws 226 pods, seed 6 would draw 307
    monkeypatch.setattr(fgd_mode, "MAX_WORKLOAD_PODS", 270)
    trace = trace_from_arrays([1000] * 10, [1024] * 10, [1] * 10, [1000] + [1] * 9, name="mixed")
    assert len(build_workload(trace, 1, 20_000, seed=0).trace) == 226
    with pytest.raises(DataError, match="fgd mode builds at most 270 "):
        build_workload(trace, 1, 20_000, seed=6)


def test_workloads_under_the_bound_are_unchanged() -> None:
    # the bound only refuses: a trace well under it draws exactly as before (seeded)
    trace = _tiny(50, 500)
    a = build_workload(trace, 4, 4 * 8 * 1000, seed=7)
    b = build_workload(trace, 4, 4 * 8 * 1000, seed=7)
    assert np.array_equal(a.trace.pod_names, b.trace.pod_names) and a.n_original == 50
    assert int(a.trace.gpu_request.sum()) <= 1.3 * 4 * 8 * 1000
