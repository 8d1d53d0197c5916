"""``fleetmind sched evaluate --mode dynamic``: it refuses the fgd-mode scale-out options instead
of ignoring them, says a stream's load problems in one ``fleetmind: warning:`` line on both of its
paths (heuristics alone, and the released agent's setting), and its ``--json`` starts with the
provenance ``rca evaluate --json`` and the benchmarks record (``fleetmind.provenance``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleetmind import cli
from fleetmind.envs.dynamic import jobs as jobs_mod

HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
    "deletion_time,scheduled_time\n"
)
NODES = "sn,cpu_milli,memory_mib,gpu,model\nn0,96000,393216,4,G2\nn1,64000,262144,2,G2\n"
PROVENANCE = {"command", "commit", "code_modified", "date", "machine", "versions"}


def _trace(tmp_path: Path, n: int, *, gpus: int = 1, same_time: bool = False) -> Path:
    """``n`` pods of ``gpus`` GPUs (0: CPU-only), 10 s apart or all created at once."""
    milli = 1000 if gpus else 0
    rows = [
        f"p{i},1000,1024,{gpus},{milli},,BE,Succeeded,{0 if same_time else 10 * i},"
        f"{600 + 10 * i},{0 if same_time else 10 * i}"
        for i in range(n)
    ]
    path = tmp_path / "t.csv"
    path.write_text(HEADER + "\n".join(rows) + "\n")
    return path


def _stderr_lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    err = capsys.readouterr().err.replace("\r", "\n").splitlines()
    return [ln for ln in err if ln.startswith("fleetmind:") or "Warning" in ln]


@pytest.mark.parametrize(
    "extra, said",
    [
        (["--workers", "4"], "--workers 4: fgd-mode option(s)"),
        (["--ray-address", "local"], "--ray-address local: fgd-mode option(s)"),
        (["--workers", "2", "--policies", "ppo"], "--workers 2: fgd-mode option(s)"),
    ],
)
def test_dynamic_mode_refuses_the_fgd_scaleout_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], said: str
) -> None:
    # they spread fgd mode's (policy, seed) runs; dynamic mode runs in one process and ignored them
    argv = ["sched", "evaluate", "--mode", "dynamic", "--trace", str(_trace(tmp_path, 4))]
    assert cli.main([*argv, "--seeds", "1", *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0] and "dynamic mode runs its policies" in err[0], err


def test_heuristic_path_json_has_provenance_and_a_null_undefined_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "n.csv").write_text(NODES)
    trace = _trace(tmp_path, 3, same_time=True)
    out = tmp_path / "r.json"
    argv = ["sched", "evaluate", "--mode", "dynamic", "--trace", str(trace), "--seeds", "1"]
    argv += ["--policies", "Random", "--nodes", str(tmp_path / "n.csv"), "--json", str(out)]
    assert cli.main(argv) == 0
    said = _stderr_lines(capsys)
    assert said == [
        "fleetmind: warning: all pods arrive at one instant; offered load undefined (3 job(s) of "
        f"trace {trace}: a stream needs two distinct arrival times)"
    ], said
    res = json.loads(out.read_text())
    assert PROVENANCE <= set(res)
    assert res["command"].startswith("fleetmind sched evaluate --trace ")
    assert "--mode dynamic --policies Random --seeds 1 --nodes " in res["command"]
    assert {"numpy", "fleetmind", "gymnasium"} <= set(res["versions"])
    assert res["policies"]["Random"]["per_seed"]["offered_load"] == [None]


def test_agent_path_warns_in_one_line_and_records_provenance_and_load(
    shared_data, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    # the agent's streams come from MultiClusterPlacementEnv.draw_stream: its "cannot load"
    # warning came out in Python's two-line format, glued to the progress bar
    monkeypatch.setattr(jobs_mod, "_SHORT_STREAMS_WARNED", set())
    trace = _trace(tmp_path, 40, gpus=0)  # CPU-only: no GPU load at all
    out = tmp_path / "r.json"
    argv = ["sched", "evaluate", "--mode", "dynamic", "--trace", str(trace), "--seeds", "1"]
    assert cli.main([*argv, "--policies", "ppo", "--json", str(out)]) == 0
    said = _stderr_lines(capsys)
    assert len(said) == 1 and said[0].startswith("fleetmind: warning: offered load 0.00 <"), said
    res = json.loads(out.read_text())
    assert PROVENANCE <= set(res) and "--policies ppo" in res["command"]
    assert res["policies"]["ppo"]["per_seed"]["offered_load"] == [0.0]
