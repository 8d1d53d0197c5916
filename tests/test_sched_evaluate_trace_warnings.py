"""``fleetmind sched evaluate`` says in one ``fleetmind: warning:`` line what makes its numbers
less than they seem: pods larger than every node (they fail whatever the policy) and, in dynamic
mode, a trace too short to reach the offered load.

Both follow the ``gpu_spec`` warning (:func:`fleetmind.data.openb.check_gpu_specs`): the
feasibility rule is the one of :class:`fleetmind.envs.core.ClusterState` (a pod fits a node with
at least its CPU, memory and GPU count; Weng et al., "Beware of Fragmentation", USENIX ATC '23,
the openb traces' paper), and the CLI prints each message once, without Python's file and line.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from fleetmind import cli
from fleetmind.data.openb import (
    TraceWarning,
    check_pod_sizes,
    load_openb_nodes,
    load_openb_trace,
)
from fleetmind.envs.dynamic.evaluate import evaluate_dynamic

HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
    "deletion_time,scheduled_time\n"
)
NODES = "sn,cpu_milli,memory_mib,gpu,model\nn0,96000,393216,4,G2\nn1,64000,262144,2,G2\n"


def _trace(tmp_path: Path, rows: list[tuple[int, int, int]]) -> Path:
    """A trace of pods ``(cpu_milli, memory_mib, num_gpu)``, one second apart."""
    lines = [
        f"p{i},{c},{m},{g},{1000 if g else 0},,BE,Succeeded,{i},{i + 100},{i}"
        for i, (c, m, g) in enumerate(rows)
    ]
    path = tmp_path / "t.csv"
    path.write_text(HEADER + "\n".join(lines) + "\n")
    return path


def _warnings(capsys: pytest.CaptureFixture[str]) -> list[str]:
    err = capsys.readouterr().err.replace("\r", "\n").splitlines()
    return [ln for ln in err if ln.startswith("fleetmind:") or "Warning" in ln]


def test_pods_larger_than_every_node_are_counted_per_resource(tmp_path: Path) -> None:
    (tmp_path / "n.csv").write_text(NODES)
    nodes = load_openb_nodes(tmp_path / "n.csv")
    rows = [(1000, 1024, 8), (1000, 1024, 8), (200000, 1024, 1), (1000, 1024, 4), (1000, 1, 0)]
    trace = load_openb_trace(_trace(tmp_path, rows))
    with pytest.warns(TraceWarning) as seen:
        assert check_pod_sizes(trace, nodes.cpu_milli, nodes.memory_mib, nodes.num_gpu, "N")
    assert str(seen[0].message) == (
        f"trace {trace.source}: 3 pod(s) ask for more than any node of N has (num_gpu: 2 pods ask "
        "up to 8, the largest node has 4; cpu_milli: 1 pod asks up to 200,000, the largest node "
        "has 96,000); they can run on no node and stay unplaced"
    )
    fits = load_openb_trace(_trace(tmp_path, rows[3:]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not check_pod_sizes(fits, nodes.cpu_milli, nodes.memory_mib, nodes.num_gpu)


def test_sched_evaluate_warns_of_pods_no_node_can_hold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "n.csv").write_text(NODES)
    trace = _trace(tmp_path, [(1000, 1024, 8), (1000, 1024, 1)])
    for mode in ("fgd", "dynamic"):
        argv = ["sched", "evaluate", "--mode", mode, "--trace", str(trace)]
        assert cli.main([*argv, "--nodes", str(tmp_path / "n.csv"), "--policies", "random",
                         "--seeds", "1"]) == 0  # fmt: skip
        said = [w for w in _warnings(capsys) if "ask for more" in w]
        assert said == [
            f"fleetmind: warning: trace {trace}: 1 pod(s) ask for more than any node of the node "
            f"list {tmp_path / 'n.csv'} has (num_gpu: 1 pod asks up to 8, the largest node has "
            "4); they can run on no node and stay unplaced"
        ], mode


def test_a_short_dynamic_stream_is_a_trace_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "n.csv").write_text(NODES)
    trace = _trace(tmp_path, [(1000, 1024, 1)] * 4)
    with pytest.warns(TraceWarning, match=r"^offered load 0\.\d\d < target 0\.80: 4 jobs"):
        evaluate_dynamic(str(trace), ["random"], [1], target_util=0.8)
    argv = ["sched", "evaluate", "--mode", "dynamic", "--trace", str(trace), "--policies", "random"]
    assert cli.main([*argv, "--seeds", "1", "--nodes", str(tmp_path / "n.csv")]) == 0
    said = _warnings(capsys)
    assert len(said) == 1 and said[0].startswith("fleetmind: warning: offered load"), said
