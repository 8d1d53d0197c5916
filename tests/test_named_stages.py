"""``fleetmind sched evaluate --policies ppo clone teacher``: a released model's stages by name."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from placement_helpers import NODES, PODS

from fleetmind import cli
from fleetmind.data.paths import MODELS_DIR
from fleetmind.rl.teacher import LinearScorer


@pytest.fixture()
def tiny(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "nodes.csv").write_text(NODES)
    (tmp_path / "pods.csv").write_text(PODS)
    return tmp_path / "nodes.csv", tmp_path / "pods.csv"


def _eval(tiny: tuple[Path, Path], out: Path, policies: list[str], model: Path | None) -> dict:
    nodes, pods = tiny
    argv = ["sched", "evaluate", "--trace", str(pods), "--nodes", str(nodes), "--seeds", "1-3"]
    argv += ["--policies", *policies, "--json", str(out)]
    if model is not None:
        argv += ["--model", str(model)]
    assert cli.main(argv) == 0
    return json.loads(out.read_text())["policies"]


def test_teacher_that_always_takes_fgds_candidate_scores_as_fgd(tiny, tmp_path) -> None:
    """The teacher path (env episodes) and the heuristic path (run_fgd) measure the same metric:
    a teacher that always picks candidate 0 (FGD's choice) gets FGD's per-seed values."""
    folder = tmp_path / "model"
    LinearScorer.fgd(16, 18).save(folder / "teacher.json")
    res = _eval(tiny, tmp_path / "r.json", ["FGD", "teacher"], folder)
    assert res["teacher"]["per_seed"] == res["FGD"]["per_seed"]
    assert res["teacher"]["n_pods_mean"] == res["FGD"]["n_pods_mean"]
    assert res["teacher"]["n_failed_mean"] == res["FGD"]["n_failed_mean"]


def test_released_stages_run_and_clone_reads_clone_onnx(tiny, tmp_path) -> None:
    res = _eval(tiny, tmp_path / "r.json", ["ppo", "clone", "teacher", "BestFit"], None)
    assert set(res) == {"ppo", "clone", "teacher", "BestFit"}
    for m in res.values():
        assert 0.0 <= m["unallocated_gpu_pct_at_100"] <= 100.0
    # a folder whose clone.onnx is its policy.onnx: clone and ppo are the same policy
    folder = tmp_path / "same"
    shutil.copytree(MODELS_DIR / "placement", folder)
    shutil.copy(folder / "policy.onnx", folder / "clone.onnx")
    same = _eval(tiny, tmp_path / "s.json", ["ppo", "clone"], folder)
    assert same["clone"]["per_seed"] == same["ppo"]["per_seed"]


def test_missing_clone_or_teacher_is_a_one_line_error(tiny, tmp_path, capsys) -> None:
    folder = tmp_path / "bare"
    shutil.copytree(MODELS_DIR / "placement", folder)
    (folder / "clone.onnx").unlink()
    nodes, pods = tiny
    argv = ["sched", "evaluate", "--trace", str(pods), "--nodes", str(nodes), "--seeds", "1"]
    assert cli.main([*argv, "--policies", "clone", "--model", str(folder)]) == 2
    err = capsys.readouterr().err
    assert "has no clone.onnx" in err and err.count("\n") == 1
    for f in ("teacher.json", "teacher_strand.json"):
        (folder / f).unlink()
    assert cli.main([*argv, "--policies", "teacher", "--model", str(folder)]) == 2
    assert "has no teacher.json" in capsys.readouterr().err
    assert cli.main([*argv, "--policies", "clone", "--model", "models:/x@champion"]) == 2
    assert "local model folder" in capsys.readouterr().err


@pytest.mark.filterwarnings("ignore:offered load:UserWarning")  # a short stream on purpose
def test_dynamic_stages_by_name(shared_data, tmp_path) -> None:
    """The dynamic release ran no PPO update, so its clone.onnx is its policy network: without its
    queue order (the learned part since 2026-12-02, tests/test_queue_order.py) the same results.
    (A copy of the release whose metadata asks for 256 jobs, to keep the run short.)"""
    folder = tmp_path / "dyn"
    shutil.copytree(MODELS_DIR / "placement-dynamic", folder)
    assert (folder / "policy.onnx").read_bytes() == (folder / "clone.onnx").read_bytes()
    meta = json.loads((folder / "metadata.json").read_text())
    assert len(meta["env_kwargs"].pop("queue_order")) == 4
    meta["env_kwargs"]["n_jobs"] = 256
    (folder / "metadata.json").write_text(json.dumps(meta))
    out = tmp_path / "dyn.json"
    argv = ["sched", "evaluate", "--trace", "gpuspec20", "--mode", "dynamic", "--seeds", "42"]
    argv += ["--model", str(folder), "--policies", "ppo", "clone", "teacher", "--json", str(out)]
    assert cli.main(argv) == 0
    res = json.loads(out.read_text())["policies"]
    assert set(res) == {"ppo", "clone", "teacher"}

    def untimed(m: dict) -> dict:
        return {k: v for k, v in m.items() if k not in ("ms_per_decision", "per_seed")}

    assert untimed(res["clone"]) == untimed(res["ppo"])
    assert res["teacher"]["mean_slowdown"] >= 1.0
