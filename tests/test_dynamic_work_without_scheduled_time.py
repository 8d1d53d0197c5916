"""Dynamic mode on a trace with creation and deletion times but no ``scheduled_time``
(``envs/dynamic/jobs.py``, docs/dynamic.md section 2): the works are the pods' lifetimes, an upper
bound said in one warning, and not draws from the log-normal that the whole trace used to get.

A pod whose ``pod_phase`` is ``Pending`` never ran: its lifetime is all queueing, so its work stays
unknown and is drawn like any unknown work. A trace of only openb ``Pending`` pods (blank
``scheduled_time``) used its pending lifetimes as works."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from dynamic_helpers import two_cluster_fleet

from fleetmind.data.openb import TraceWarning, load_openb_trace
from fleetmind.envs.dynamic.jobs import build_jobs

LIFETIMES = [600, 1200, 1800, 2400, 3000, 3600]


def _trace(tmp_path: Path, scheduled: str, phases: list[str] | None = None) -> Path:
    """Six 1-GPU pods created 10 s apart with the lifetimes above; ``scheduled``: ``"none"`` (no
    column), ``"blank"`` (an empty column) or ``"given"`` (scheduled 100 s after creation);
    ``phases``: each pod's ``pod_phase`` (None: no such column)."""
    head = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time"
    rows = []
    for i, life in enumerate(LIFETIMES):
        row = f"p{i},1000,1024,1,1000,{10 * i},{10 * i + life}"
        if scheduled != "none":
            row += "," + ("" if scheduled == "blank" else str(10 * i + 100))
        if phases is not None:
            row += "," + phases[i]
        rows.append(row)
    if scheduled != "none":
        head += ",scheduled_time"
    if phases is not None:
        head += ",pod_phase"
    path = tmp_path / f"{scheduled}-{'-'.join(phases or [])}.csv"
    path.write_text(head + "\n" + "\n".join(rows) + "\n")
    return path


def _build(path: Path) -> tuple[object, list[str], object]:
    trace = load_openb_trace(path)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", TraceWarning)
        jobs = build_jobs(trace, two_cluster_fleet(), np.random.default_rng(7), target_util=0.01)
    said = [str(w.message) for w in seen if "scheduled_time" in str(w.message)]
    return jobs, said, trace


def _works(jobs: object) -> dict[str, float]:
    return dict(zip(jobs.names.tolist(), jobs.work_s.tolist(), strict=True))


@pytest.mark.parametrize("scheduled", ["none", "blank"])
def test_works_are_lifetimes_with_one_warning(tmp_path: Path, scheduled: str) -> None:
    # before: every work was drawn from the log-normal (n_duration_fallback == 6) with no warning
    jobs, said, trace = _build(_trace(tmp_path, scheduled))
    assert jobs.n_duration_fallback == 0
    by_name = dict(zip(jobs.names.tolist(), jobs.work_s.tolist(), strict=True))
    assert by_name == {f"p{i}": float(life) for i, life in enumerate(LIFETIMES)}
    assert said == [
        f"trace {trace.source}: no scheduled_time; the work of its 6 pod(s) with a creation_time "
        "and a deletion_time is their lifetime deletion_time - creation_time, an upper bound (it "
        "includes time spent queueing before the pod was scheduled)"
    ]


def test_scheduled_times_still_win_and_say_nothing(tmp_path: Path) -> None:
    jobs, said, _ = _build(_trace(tmp_path, "given"))
    by_name = dict(zip(jobs.names.tolist(), jobs.work_s.tolist(), strict=True))
    assert by_name == {f"p{i}": float(life - 100) for i, life in enumerate(LIFETIMES)}
    assert said == []


def test_unfinished_pods_say_where_their_work_comes_from(tmp_path: Path) -> None:
    # scheduled, never deleted, and no pod deleted at all: no observed work to draw from, so the
    # warning must not claim "the trace's observed works"
    path = tmp_path / "open.csv"
    path.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time,scheduled_time\n"
        + "".join(f"p{i},1000,1024,1,1000,{10 * i},,{10 * i}\n" for i in range(4))
    )
    trace = load_openb_trace(path)
    with pytest.warns(TraceWarning) as seen:
        jobs = build_jobs(trace, two_cluster_fleet(), np.random.default_rng(0), target_util=0.01)
    said = [str(w.message) for w in seen if "deletion_time" in str(w.message)]
    assert said == [
        f"trace {trace.source}: 4 scheduled pod(s) have no deletion_time (first: 'p0'); their "
        "work is drawn from a log-normal (median 616 s; the trace has no observed work)"
    ]
    assert jobs.n_duration_fallback == 4


@pytest.mark.parametrize("scheduled", ["none", "blank"])
def test_a_trace_of_pending_pods_draws_every_work(tmp_path: Path, scheduled: str) -> None:
    # openb's Pending pods (897 in `default`): scheduled_time blank, deleted while pending. Before,
    # their lifetimes (pure queueing) were the works: n_duration_fallback 0, works == LIFETIMES
    jobs, said, trace = _build(_trace(tmp_path, scheduled, ["Pending"] * 6))
    assert jobs.n_duration_fallback == 6
    assert all(w not in LIFETIMES for w in _works(jobs).values())
    assert said == [
        f"trace {trace.source}: no scheduled_time and no pod that ran (6 Pending pod(s)): every "
        "work is drawn from a log-normal (median 616 s; the trace has no observed work)"
    ]


def test_pending_pods_draw_from_the_lifetimes_of_pods_that_ran(tmp_path: Path) -> None:
    phases = ["Running", "Pending", "Succeeded", "Pending", "Failed", ""]
    jobs, said, trace = _build(_trace(tmp_path, "blank", phases))
    works = _works(jobs)
    ran = {f"p{i}": float(LIFETIMES[i]) for i in (0, 2, 4, 5)}
    assert {k: works[k] for k in ran} == ran  # lifetimes, as without a pod_phase column
    assert jobs.n_duration_fallback == 2
    assert {works["p1"], works["p3"]} <= set(ran.values())  # drawn from the observed ones
    assert trace.take(np.array([3, 0])).pod_phase.tolist() == ["Pending", "Running"]
    assert said == [
        f"trace {trace.source}: no scheduled_time; the work of its 4 pod(s) with a creation_time "
        "and a deletion_time is their lifetime deletion_time - creation_time, an upper bound (it "
        "includes time spent queueing before the pod was scheduled); the other 2 pod(s) (2 of "
        "them Pending: never ran) draw theirs from them"
    ]


def test_a_pod_phase_column_of_pods_that_ran_keeps_the_lifetimes(tmp_path: Path) -> None:
    jobs, said, _ = _build(_trace(tmp_path, "none", ["Running"] * 6))
    assert jobs.n_duration_fallback == 0
    assert _works(jobs) == {f"p{i}": float(life) for i, life in enumerate(LIFETIMES)}
    assert len(said) == 1


def test_pods_that_ran_without_deletion_times_are_not_called_never_run(tmp_path: Path) -> None:
    # five Running pods and one Pending, no deletion times: no lifetime is known, but pods did run;
    # the warning said "no pod that ran"
    path = tmp_path / "no-deletion.csv"
    rows = [
        f"p{i},1000,1024,1,1000,{10 * i},,{'Pending' if i == 5 else 'Running'}" for i in range(6)
    ]
    head = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time,pod_phase"
    path.write_text(head + "\n" + "\n".join(rows) + "\n")
    _, said, _ = _build(path)
    assert not any("no pod that ran" in s for s in said), said
