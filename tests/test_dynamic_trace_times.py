"""How dynamic mode reads a trace's times (``envs/dynamic/jobs.py``, docs/dynamic.md section 2):
a pod that ran 0 s is an observed run floored at 1 s, times that run backwards and a
``creation_time`` blank for some pods only are one-line errors, and a stream whose jobs all
arrive at one instant says that its offered load is undefined (null in every JSON written)."""

from __future__ import annotations

import json
import sys
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from dynamic_helpers import small_trace, two_cluster_fleet

from fleetmind.data.errors import DataError
from fleetmind.data.openb import TraceWarning, load_openb_trace
from fleetmind.envs.dynamic.jobs import build_jobs
from fleetmind.envs.dynamic.model import MIN_WORK_S

HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
    "deletion_time,scheduled_time\n"
)


def _csv(tmp_path: Path, times: list[tuple[str, str, str]]) -> Path:
    """A trace of 1-GPU pods with the given ``(creation, deletion, scheduled)`` times (text)."""
    rows = [f"p{i},1000,1024,1,1000,,BE,Succeeded,{c},{d},{s}" for i, (c, d, s) in enumerate(times)]
    path = tmp_path / "t.csv"
    path.write_text(HEADER + "\n".join(rows) + "\n")
    return path


def _jobs(trace, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TraceWarning)  # a tiny stream cannot reach the load
        return build_jobs(trace, two_cluster_fleet(), np.random.default_rng(3), **kw)


def test_a_pod_that_ran_zero_seconds_is_observed_and_floored_at_one_second() -> None:
    # Kubernetes keeps object times to the second (apimachinery pkg/apis/meta/v1/time.go,
    # RFC 3339 seconds): a pod deleted in the second it was scheduled ran < 1 s, and
    # docs/dynamic.md section 2 floors every work at 1 s; it used to draw a random work instead
    tr = small_trace(60)
    zero = np.zeros(len(tr), dtype=bool)
    zero[::3] = True
    tr = replace(tr, deletion_time=np.where(zero, tr.scheduled_time, tr.deletion_time))
    jobs = _jobs(tr)
    assert jobs.n_duration_fallback == 0
    picked = zero[[int(str(n).split("-")[1]) for n in jobs.names]]
    assert picked.any() and np.all(jobs.work_s[picked] == MIN_WORK_S)


@pytest.mark.parametrize(
    "times, said",
    [
        # deleted before it was scheduled: a negative work
        ([("0", "100", "0"), ("10", "50", "60")], "'p1' (pod 2 of 2) has deletion_time 50 before "
         "scheduled_time 60 (1 pod(s) so)"),
        # deleted before it was created (never scheduled)
        ([("0", "100", "0"), ("90", "80", "")], "'p1' (pod 2 of 2) has deletion_time 80 before "
         "creation_time 90"),
    ],
)  # fmt: skip
def test_times_that_run_backwards_are_a_data_error_naming_the_pod(
    tmp_path: Path, times: list[tuple[str, str, str]], said: str
) -> None:
    trace = load_openb_trace(_csv(tmp_path, times))
    with pytest.raises(DataError) as err:
        _jobs(trace)
    message = str(err.value)
    assert message.startswith(f"trace {trace.source}: pod {said}") and "\n" not in message
    assert message.endswith("; a pod is deleted after it is created and scheduled")


def test_one_blank_creation_time_is_refused_not_a_poisson_trace(tmp_path: Path) -> None:
    times = [(str(10 * i), str(10 * i + 500), str(10 * i)) for i in range(6)]
    times[3] = ("", "530", "30")
    trace = load_openb_trace(_csv(tmp_path, times))
    with pytest.raises(DataError) as err:
        _jobs(trace)
    assert str(err.value) == (
        f"trace {trace.source}: pod 'p3' (pod 4 of 6) has no creation_time (1 pod(s) have none);"
        " give every pod a creation_time, or none (arrivals are then a Poisson process)"
    )
    # none at all: the Poisson process of docs/dynamic.md ("Traces without times")
    blank = load_openb_trace(_csv(tmp_path, [("", "", "")] * 6))
    assert _jobs(blank).synthetic_arrivals


def test_scheduled_pods_without_a_deletion_are_counted_in_a_warning(tmp_path: Path) -> None:
    times = [(str(10 * i), str(10 * i + 500), str(10 * i)) for i in range(6)]
    times[2] = ("20", "", "20")
    times[4] = ("40", "", "40")
    times[5] = ("50", "900", "")  # never scheduled: the documented fallback, not counted
    trace = load_openb_trace(_csv(tmp_path, times))
    with pytest.warns(TraceWarning) as seen:
        jobs = build_jobs(trace, two_cluster_fleet(), np.random.default_rng(0), target_util=0.01)
    said = [str(w.message) for w in seen if "deletion_time" in str(w.message)]
    assert said == [
        f"trace {trace.source}: 2 scheduled pod(s) have no deletion_time (first: 'p2'); their "
        "work is drawn from the trace's observed works"
    ]
    assert jobs.n_duration_fallback == 3


@pytest.mark.parametrize("n_pods", [1, 5])
def test_a_stream_arriving_at_one_instant_has_an_undefined_load(
    tmp_path: Path, n_pods: int
) -> None:
    # offered load = GPU demand / (capacity x arrival window): no window, no load (docs/dynamic.md
    # section 2, "Load scaling"); it was +inf, which passed the "< target" check unnoticed
    trace = load_openb_trace(_csv(tmp_path, [("1000", "5000", "1000")] * n_pods))
    with pytest.warns(TraceWarning) as seen:
        jobs = build_jobs(trace, two_cluster_fleet(), np.random.default_rng(0))
    said = [str(w.message) for w in seen]
    assert said == [
        f"all pods arrive at one instant; offered load undefined ({n_pods} job(s) of trace "
        f"{trace.source}: a stream needs two distinct arrival times)"
    ]
    assert np.isnan(jobs.offered_load) and np.all(jobs.arrival_s == 0) and jobs.time_scale == 1.0


def test_the_benchmark_writes_strict_json_for_an_undefined_load(
    shared_data, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # RFC 8259 section 6: NaN and Infinity are not JSON numbers; json.dumps wrote them bare
    from benchmarks.dynamic import heuristics

    trace = _csv(tmp_path, [("1000", "5000", "1000")] * 3)
    out = tmp_path / "dyn.json"
    argv = ["heuristics", "--trace", str(trace), "--policies", "Random", "--seeds", "1"]
    monkeypatch.setattr(sys, "argv", [*argv, "--node-fraction", "0.02", "--out", str(out)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TraceWarning)
        heuristics.main()

    def refuse(token: str) -> None:
        raise AssertionError(f"not JSON: {token}")

    got = json.loads(out.read_text(), parse_constant=refuse)
    assert got["setup"]["offered_load"] is None
    assert got["policies"]["Random"]["per_seed"]["offered_load"] == [None]
