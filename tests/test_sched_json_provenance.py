"""``sched train --json`` and ``sched search-teacher --json`` start with the provenance block of
``sched evaluate --json`` (command, commit, date, machine, versions) and name each trace file by
its bytes.

Upstream convention followed: MLflow records a run's source and git commit as the system tags
``mlflow.source.name`` and ``mlflow.source.git.commit`` (MLflow docs, "Tracking: system tags"),
and pip's hash-checking mode names a file by its SHA-256 (``--hash=sha256:...``): a name such as
``default`` or ``pods.csv`` says less than the digest of what was read.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from fleetmind.cli import main

HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,creation_time,deletion_time\n"
PROVENANCE = ("command", "commit", "code_modified", "date", "machine", "versions")


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    path = tmp_path / "pods.csv"
    path.write_text(HEADER + "".join(f"p{i},1000,1024,1,500,,{i},{i + 9}\n" for i in range(20)))
    return path


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_train_json_has_provenance_and_trace_digests(
    tmp_path: Path, trace: Path, monkeypatch, capsys
) -> None:
    from fleetmind.training.recipes import fgd

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.chdir(tmp_path)
    refused = "champion stays version 1: its eval_unalloc was measured on another evaluation set"
    registry = {"registered_model": "fleetmind-placement", "version": "2"}
    summary = {"run_id": "r", "metrics": {}, "registry": {**registry, "champion_refused": refused}}
    monkeypatch.setattr(fgd, "run", lambda a: dict(summary))  # the run itself is tested elsewhere
    out = tmp_path / "t.json"
    argv = ["sched", "train", "--trace", str(trace), "--eval-trace", "default", "--timesteps", "0"]
    assert main([*argv, "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert list(res)[: len(PROVENANCE)] == list(PROVENANCE)
    assert res["command"].startswith(f"fleetmind sched train --json {out} --trace {trace}")
    assert res["command"].endswith("--timesteps 0 --eval-trace default")  # the parser's order
    assert {"torch", "numpy", "fleetmind", "mlflow", "sb3-contrib"} <= set(res["versions"])
    files = {f["given"]: f for f in res["trace_files"]}
    assert files[str(trace)] == {"given": str(trace), "path": str(trace), "sha256": _sha(trace)}
    default = Path(files["default"]["path"])
    assert default.is_absolute() and files["default"]["sha256"] == _sha(default)
    assert res["run_id"] == "r"  # the summary follows
    # the champion that stayed is said on stderr, not only in the JSON
    err = capsys.readouterr().err
    assert f"fleetmind: note: fleetmind-placement version 2 registered; {refused}" in err


def _searched(cfg: dict, episodes: list, **kw: object) -> SimpleNamespace:
    """What ``teacher_search.cmaes_search`` returns, for a search that ran no episode."""
    return SimpleNamespace(
        scorer_dict=lambda k: {"format": "test", "k": k},
        fgd_score=5.0,
        init_score=5.0,
        best_score=4.0,
        episodes=episodes,
        history=[],
    )


def test_search_teacher_json_has_provenance(tmp_path: Path, trace: Path, monkeypatch) -> None:
    from fleetmind.rl import teacher_search

    monkeypatch.setattr(teacher_search, "cmaes_search", _searched)
    out, js = tmp_path / "s.json", tmp_path / "summary.json"
    argv = ["sched", "search-teacher", "--trace", str(trace), "--generations", "1"]
    assert main([*argv, "--out", str(out), "--json", str(js)]) == 0
    res = json.loads(js.read_text())
    assert list(res)[: len(PROVENANCE)] == list(PROVENANCE)
    assert res["command"] == (
        f"fleetmind sched search-teacher --trace {trace} --generations 1 --out {out} --json {js}"
    )
    assert res["versions"]["cma"] is not None
    assert res["trace_files"] == [{"given": str(trace), "path": str(trace), "sha256": _sha(trace)}]
    assert res["best_score"] == 4.0


def test_train_seeds_json_keeps_registry_and_eval_set(
    tmp_path: Path, trace: Path, monkeypatch, capsys
) -> None:
    """``--seeds``: each run of ``runs`` keeps ``registry`` and ``eval_set`` (``rl.scaleout.train_job``
    dropped them, so the champion note never printed and the JSON had no evaluation set)."""
    from fleetmind.training.recipes import fgd

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.chdir(tmp_path)
    refused = "champion stays version 1: its eval_unalloc was measured on another evaluation set"

    def run(a: object) -> dict:
        reg = {"registered_model": "fleetmind-placement", "version": str(a.seed)}
        eval_set = {"fingerprint": "abc", "seeds": [a.seed]}
        return {"run_id": f"r{a.seed}", "metrics": {}, "registry": {**reg, "champion_refused": refused},
                "eval_set": eval_set, "state": "dropped"}  # fmt: skip

    monkeypatch.setattr(fgd, "run", run)
    out = tmp_path / "t.json"
    argv = ["sched", "train", "--trace", str(trace), "--timesteps", "0", "--seeds", "3", "4"]
    assert main([*argv, "--json", str(out)]) == 0
    runs = json.loads(out.read_text())["runs"]
    assert set(runs) == {"3", "4"}
    for s, r in runs.items():
        assert r["eval_set"] == {"fingerprint": "abc", "seeds": [int(s)]}
        assert r["registry"]["version"] == s and "state" not in r
    err = capsys.readouterr().err
    for s in ("3", "4"):
        assert f"fleetmind: note: fleetmind-placement version {s} registered; {refused}" in err


def test_train_json_hashes_the_traces_it_read(tmp_path: Path, trace: Path, monkeypatch) -> None:
    """``trace_files`` is taken when the run starts: a trace rewritten during the run keeps the
    digest of the bytes the run read (it was taken at the end)."""
    from fleetmind.training.recipes import fgd

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.chdir(tmp_path)
    read = _sha(trace)

    def run(a: object) -> dict:
        trace.write_text(trace.read_text() + "p99,1000,1024,1,500,,99,100\n")
        return {"run_id": "r", "metrics": {}}

    monkeypatch.setattr(fgd, "run", run)
    out = tmp_path / "t.json"
    argv = ["sched", "train", "--trace", str(trace), "--eval-trace", str(trace), "--timesteps", "0"]
    assert main([*argv, "--json", str(out)]) == 0
    files = json.loads(out.read_text())["trace_files"]
    assert [f["sha256"] for f in files] == [read] and _sha(trace) != read


def test_search_teacher_json_names_nodes_and_init(tmp_path: Path, trace: Path, monkeypatch) -> None:
    """``sched search-teacher --json`` records the ``--nodes`` file and the ``--init`` scorer by
    their digests too, taken before the search (only the traces were recorded, at the end)."""
    from fleetmind.rl import teacher_search
    from fleetmind.rl.teacher import LinearScorer

    nodes = tmp_path / "nodes.csv"
    nodes.write_text(
        "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,8,T4\nn1,64000,262144,8,T4\n"
    )
    init = LinearScorer.fgd(16, 4).save(tmp_path / "init.json")
    sums = {p: _sha(p) for p in (trace, nodes, init)}

    def search(cfg: dict, episodes: list, **kw: object) -> SimpleNamespace:
        for p in sums:  # the files change while the search runs
            p.write_text(p.read_text() + "\n")
        return _searched(cfg, episodes)

    monkeypatch.setattr(teacher_search, "cmaes_search", search)
    out, js = tmp_path / "s.json", tmp_path / "summary.json"
    argv = ["sched", "search-teacher", "--trace", str(trace), "--nodes", str(nodes)]
    assert main([*argv, "--init", str(init), "--out", str(out), "--json", str(js)]) == 0
    res = json.loads(js.read_text())
    assert res["trace_files"] == [{"given": str(trace), "path": str(trace), "sha256": sums[trace]}]
    assert res["nodes_file"] == {"given": str(nodes), "path": str(nodes), "sha256": sums[nodes]}
    assert res["init_file"] == {"given": str(init), "path": str(init), "sha256": sums[init]}
