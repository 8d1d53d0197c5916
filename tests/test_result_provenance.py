"""Result files and MLflow runs say what they measured, by content, not only by name.

* ``sched evaluate --json`` records ``model`` (per model stage scored: the file read, its absolute
  path and SHA-256) and ``trace_file``: with the default ``--model`` the same recorded command
  scored the PPO policy before 2026-12-02 and its clone since (docs/ppo.md), and only the hash
  tells them apart;
* ``sched evaluate --json`` also records ``nodes_file`` (the node list sets every figure), and for
  an MLflow ``--model`` the registry version loaded and the URI without its password;
* ``rca evaluate --json`` records ``data_abs``, ``split_file`` (hashed), ``graphs_sha256`` (the
  graph files the records name), ``train_file`` (what the learned baselines fit on) and
  ``model`` (the GAT's ``model.pt``), where ``data`` alone was the relative path as typed;
* ``rca train`` logs the dataset's absolute path, each split file's SHA-256, the digest of its
  graphs and its ``meta.json`` generator settings as params, and the command, commit and versions as tags
  (``mlflow.source.git.commit`` is empty for a console script); ``sched train``'s runs
  (``training.recipes.tracking.tracked_run``) get the same tags;
* ``benchmarks/index.py`` no longer calls a result's provenance ``complete`` when its command
  would not paste back into a shell (unclosed quote, unquoted ``;<>|&()`` or label; ``$(...)``
  pastes back) or names a results/model path the checkout lacks (a path's start only; the run's
  own outputs after ``--out``/``--json``/``-o`` do not count).
"""

from __future__ import annotations

import hashlib
import json
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from fleetmind import cli
from fleetmind.provenance import git_commit

REPO = Path(__file__).resolve().parents[1]
PLACEMENT = REPO / "models" / "placement"
GAT = REPO / "models" / "rca"

NODES = "sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
    f"n{i},64000,262144,{[2, 4, 8][i % 3]},{['T4', 'P100', 'V100'][i % 3]}\n" for i in range(6)
)
PODS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n" + "".join(
    f"p{i:02d},{1000 + 500 * (i % 3)},1024,{1 + i % 2},{1000 if i % 2 else [250, 500][i % 4 // 2]}\n"
    for i in range(30)
)
"""A tiny openb-format node list and trace (the layout of tests/test_fgd_cli_provenance.py)."""


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ------------------------------------------------------------------------- sched evaluate


@pytest.mark.skipif(not (PLACEMENT / "clone.onnx").is_file(), reason="no released model")
def test_sched_evaluate_json_names_the_model_and_trace_bytes(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    model = tmp_path / "model"
    model.mkdir()
    for name in ("ppo_policy.onnx", "clone.onnx", "metadata.json"):
        shutil.copy(PLACEMENT / name, model / name)
    (tmp_path / "nodes.csv").write_text(NODES)
    (tmp_path / "pods.csv").write_text(PODS)
    out = tmp_path / "r.json"
    monkeypatch.chdir(tmp_path)  # a relative trace path: the record must still name the file
    argv = ["sched", "evaluate", "--trace", "pods.csv", "--nodes", "nodes.csv"]
    argv += ["--policies", "ppo", "clone", "BestFit", "--seeds", "1"]
    argv += ["--model", str(model / "ppo_policy.onnx"), "--json", str(out)]
    assert cli.main(argv) == 0
    res = json.loads(out.read_text())
    assert set(res["policies"]) == {"ppo", "clone", "BestFit"}  # the old keys stay
    ppo, clone = res["model"]["ppo"], res["model"]["clone"]
    assert set(res["model"]) == {"ppo", "clone"}  # BestFit reads no model file
    assert ppo == {
        "given": str(model / "ppo_policy.onnx"),
        "path": str(model / "ppo_policy.onnx"),
        "sha256": sha(model / "ppo_policy.onnx"),
    }
    assert clone["path"] == str(model / "clone.onnx") and clone["sha256"] == sha(
        model / "clone.onnx"
    )
    assert res["trace_file"] == {
        "given": "pods.csv",
        "path": str(tmp_path / "pods.csv"),
        "sha256": sha(tmp_path / "pods.csv"),
    }


def test_sched_evaluate_stage_files_follow_the_loaders(tmp_path: Path) -> None:
    """The file each stage reads, as ``rl.policy_adapter`` (fgd: ``policy.onnx`` first) and
    ``rl.dynamic_eval`` (dynamic: ``policy.pt`` first) pick it."""
    from fleetmind.cli.sched import _stage_file

    for name in ("policy.onnx", "policy.pt", "clone.onnx", "teacher.json"):
        (tmp_path / name).write_bytes(name.encode())
    assert _stage_file(tmp_path, "ppo", "fgd") == tmp_path / "policy.onnx"
    assert _stage_file(tmp_path, "ppo", "dynamic") == tmp_path / "policy.pt"
    assert _stage_file(tmp_path / "policy.pt", "ppo", "fgd") == tmp_path / "policy.pt"
    assert _stage_file(tmp_path, "rollout", "dynamic") == tmp_path / "clone.onnx"
    assert _stage_file(tmp_path, "teacher", "fgd") == tmp_path / "teacher.json"
    (tmp_path / "teacher_strand.json").write_text("{}")
    assert _stage_file(tmp_path, "teacher", "fgd") == tmp_path / "teacher_strand.json"
    assert _stage_file(tmp_path, "teacher", "dynamic") == tmp_path / "teacher.json"


def test_sched_evaluate_json_names_the_node_list_bytes(tmp_path: Path, monkeypatch) -> None:
    """The node list sets every unallocated-GPU figure: an edited ``--nodes`` file with the same
    name gives another ``nodes_file.sha256``."""
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pods.csv").write_text(PODS)
    argv = ["sched", "evaluate", "--trace", "pods.csv", "--nodes", "nodes.csv"]
    argv += ["--policies", "BestFit", "--seeds", "1", "--json"]
    sums = []
    for gpus in ("8", "4"):
        (tmp_path / "nodes.csv").write_text(NODES.replace(",8,", f",{gpus},"))
        assert cli.main([*argv, f"r{gpus}.json"]) == 0
        nodes = json.loads((tmp_path / f"r{gpus}.json").read_text())["nodes_file"]
        assert nodes == {
            "given": "nodes.csv",
            "path": str(tmp_path / "nodes.csv"),
            "sha256": sha(tmp_path / "nodes.csv"),
        }
        sums.append(nodes["sha256"])
    assert sums[0] != sums[1]


@pytest.mark.skipif(not (PLACEMENT / "policy.onnx").is_file(), reason="no released model")
def test_sched_evaluate_json_names_the_registry_version_of_an_mlflow_model(
    tmp_path: Path, monkeypatch
) -> None:
    """``--model models:/name@alias`` has no local file to hash: the record names the registry
    version the run loaded (``PPOPlacementPolicy.registry_version``, which
    ``rl.policy_adapter._load_mlflow`` sets from the alias it resolved once), so the result still
    says which model it scored after the alias moves. The download is replaced by the released
    policy loaded from its folder (no MLflow server here)."""
    from fleetmind.cli import sched
    from fleetmind.rl.policy_adapter import load_ppo_policy

    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.chdir(tmp_path)
    uri = "models:/fleetmind-placement@champion"
    policy = load_ppo_policy(PLACEMENT)
    policy.registry_version = "fleetmind-placement/7"
    monkeypatch.setattr(sched, "_load_ppo", lambda ref: policy if ref == uri else pytest.fail(ref))
    (tmp_path / "nodes.csv").write_text(NODES)
    (tmp_path / "pods.csv").write_text(PODS)
    argv = ["sched", "evaluate", "--trace", "pods.csv", "--nodes", "nodes.csv", "--seeds", "1"]
    assert cli.main([*argv, "--policies", "ppo", "--model", uri, "--json", "r.json"]) == 0
    ppo = json.loads((tmp_path / "r.json").read_text())["model"]["ppo"]
    assert ppo == {"given": uri, "path": None, "sha256": None, "version": "fleetmind-placement/7"}


def test_sched_evaluate_json_masks_the_password_of_a_model_uri() -> None:
    """``command`` masks a password in ``--model``; ``model.<stage>.given`` does as well."""
    import argparse

    from fleetmind.cli.sched import _model_files

    uri = "https://admin:s3cr3t@mlflow.example/api/2.0/mlflow-artifacts/artifacts/policy.onnx"
    args = argparse.Namespace(model=uri, mode="fgd")
    entry = _model_files(args, ["ppo"])["ppo"]
    assert "s3cr3t" not in json.dumps(entry)
    assert (
        entry["given"]
        == "https://***@mlflow.example/api/2.0/mlflow-artifacts/artifacts/policy.onnx"
    )


# --------------------------------------------------------------------------- rca evaluate


@pytest.mark.skipif(not (GAT / "model.pt").is_file(), reason="no released GAT")
def test_rca_evaluate_json_names_the_data_split_and_model_bytes(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["rca", "generate", "--out", "g1", "--incidents", "3", "--seed", "1"]) == 0
    model = tmp_path / "gat"
    shutil.copytree(GAT, model)
    out = tmp_path / "res.json"
    argv = ["rca", "evaluate", "--data", "g1", "--split", "train", "--methods", "gat", "deepest"]
    assert cli.main([*argv, "--model", str(model), "--limit", "2", "--json", str(out)]) == 0
    d = json.loads(out.read_text())
    assert d["data"] == "g1" and d["split"] == "train"  # as before
    assert d["data_abs"] == str(tmp_path / "g1")
    split = tmp_path / "g1" / "train.jsonl"
    assert d["split_file"]["path"] == str(split) and d["split_file"]["sha256"] == sha(split)
    gat = d["model"]["gat"]
    assert gat["path"] == str(model / "model.pt") and gat["sha256"] == sha(model / "model.pt")
    assert gat["given"] == str(model)


def test_rca_evaluate_json_names_the_graph_and_train_bytes(tmp_path: Path, monkeypatch) -> None:
    """The records name their topologies (``graphs/<name>.json``) and the learned baselines fit on
    ``train.jsonl`` whatever ``--split`` is: an edited graph with identical records gives another
    ``graphs_sha256``, and ``train_file`` is recorded when a learned baseline runs."""
    from fleetmind.training.rca_train import data_params

    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["rca", "generate", "--out", "g1", "--incidents", "40", "--seed", "1"]) == 0
    argv = ["rca", "evaluate", "--data", "g1", "--split", "test", "--seed", "0", "--json"]
    first = tmp_path / "r1.json"
    assert cli.main([*argv, str(first), "--methods", "node_gbdt", "deepest"]) == 0
    d = json.loads(first.read_text())
    train = tmp_path / "g1" / "train.jsonl"
    assert d["train_file"] == {"given": "g1/train.jsonl", "path": str(train), "sha256": sha(train)}
    assert d["graphs_sha256"] == data_params(tmp_path / "g1")["data_graphs_sha256"]
    graph = sorted((tmp_path / "g1" / "graphs").glob("*.json"))[0]
    graph.write_bytes(graph.read_bytes() + b"\n")  # the same graph, other bytes
    second = tmp_path / "r2.json"
    assert cli.main([*argv, str(second), "--methods", "deepest"]) == 0
    d2 = json.loads(second.read_text())
    assert d2["split_file"] == d["split_file"]  # identical records ...
    assert d2["graphs_sha256"] != d["graphs_sha256"]  # ... on other graph bytes
    assert d2["train_file"] is None  # no method read train.jsonl


def test_graph_digest_covers_names_and_bytes(tmp_path: Path) -> None:
    """``graphs_sha256``: name order, each name, size and bytes; ``rca evaluate`` and the training
    run use the one function, so a result can be matched to the data a model trained on."""
    from fleetmind.provenance import graphs_sha256
    from fleetmind.training import rca_train

    assert graphs_sha256(tmp_path) is None
    folder = tmp_path / "graphs"
    folder.mkdir()
    (folder / "a.json").write_bytes(b'{"x": 1}')
    (folder / "b.json").write_bytes(b"{}")
    expected = hashlib.sha256(b'a.json\x008\x00{"x": 1}b.json\x002\x00{}').hexdigest()
    assert graphs_sha256(tmp_path) == rca_train.graphs_sha256(tmp_path) == expected
    (folder / "a.json").rename(folder / "c.json")  # same bytes, another name
    assert graphs_sha256(tmp_path) != expected


def test_rca_evaluate_json_masks_the_password_of_a_model_uri() -> None:
    import argparse

    from fleetmind.cli.rca import _evaluate_inputs

    class Gat:
        version = "fleetmind-rca/3"

    uri = "https://admin:s3cr3t@mlflow.example/api/2.0/mlflow-artifacts/artifacts/rca"
    args = argparse.Namespace(model=uri, data=None, feedback_db="sqlite:///fb.db", split="x")
    gat = _evaluate_inputs(args, {"gat": Gat()})["model"]["gat"]
    assert gat == {
        "given": "https://***@mlflow.example/api/2.0/mlflow-artifacts/artifacts/rca",
        "path": None,
        "sha256": None,
        "version": "fleetmind-rca/3",
    }


# ----------------------------------------------------------------------------- rca train


@pytest.fixture
def mlflow_uri(tmp_path: Path, monkeypatch) -> str:
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.chdir(tmp_path)  # ./mlruns artifacts land in tmp
    import mlflow

    mlflow.set_tracking_uri(uri)
    return uri


def test_rca_train_run_logs_data_hashes_and_provenance_tags(mlflow_uri, tmp_path: Path) -> None:
    import mlflow
    import torch
    from gat_helpers import toy_dataset

    data = toy_dataset(tmp_path / "toy", n_train=12, n_val=4, n_test=4)
    out_json = tmp_path / "run.json"
    old = torch.get_num_threads()
    try:
        rc = cli.main(
            [
                "rca", "train", "--data", "toy", "--epochs", "1", "--hidden", "8",
                "--heads", "1", "--layers", "2", "--batch-size", "8", "--no-register",
                "--out", str(tmp_path / "runs"), "--json", str(out_json),
            ]
        )  # fmt: skip
    finally:
        torch.set_num_threads(old)
    assert rc == 0
    run = mlflow.get_run(json.loads(out_json.read_text())["run_id"])
    params, tags = run.data.params, run.data.tags
    assert params["data"] == "toy"  # as given, as before
    assert params["data_abs"] == str(data.resolve())
    for split in ("train", "val", "test"):
        assert params[f"data_sha256/{split}"] == sha(data / f"{split}.jsonl")
    from fleetmind.provenance import graphs_sha256

    assert params["data_graphs_sha256"] == graphs_sha256(data)  # the graphs the records name
    meta = json.loads((data / "meta.json").read_text())
    assert params["data_meta/generator"] == meta["generator"] == "tests.gat_helpers"
    commit = git_commit()["commit"]
    assert tags["fleetmind.commit"] == (commit or "null")
    if commit:
        assert tags["mlflow.source.git.commit"] == commit
    assert tags["fleetmind.code_modified"] in ("true", "false", "null")
    assert tags["fleetmind.versions.torch"] == torch.__version__
    words = shlex.split(tags["fleetmind.command"])
    assert words[:5] == ["fleetmind", "rca", "train", "--data", "toy"]
    assert "--no-register" in words and "--hidden" in words


def test_rca_train_command_hides_the_tracking_password() -> None:
    from fleetmind.training.rca_train import Args, train_command

    line = train_command(Args(data="d", tracking_uri="postgresql://u:secret@db/ml"))
    assert "secret" not in line
    assert shlex.split(line)[:5] == ["fleetmind", "rca", "train", "--data", "d"]


@dataclass
class _Recipe:
    """The fields :func:`tracked_run` reads of a placement recipe's settings."""

    mode: str = "dynamic"
    tracking_uri: str | None = None
    experiment: str = "provenance-test"
    out: str = "runs"
    seed: int = 0


def test_placement_training_runs_get_the_same_tags(mlflow_uri, monkeypatch) -> None:
    import mlflow

    from fleetmind.training.recipes.tracking import tracked_run

    argv = ["fleetmind", "sched", "train", "--tracking-uri", "postgresql://u:secret@db/ml"]
    monkeypatch.setattr(sys, "argv", argv)
    summary: dict = {}
    with tracked_run(_Recipe(), "r0", summary):
        pass
    tags = mlflow.get_run(summary["run_id"]).data.tags
    assert shlex.split(tags["fleetmind.command"])[:3] == ["fleetmind", "sched", "train"]
    assert "secret" not in tags["fleetmind.command"]
    commit = git_commit()["commit"]
    assert tags["fleetmind.commit"] == (commit or "null")
    assert {"fleetmind.versions.numpy", "fleetmind.versions.gymnasium"} <= set(tags)


# ------------------------------------------------------------------------- benchmarks index


FULL = {
    "command": "python -m benchmarks.x --model models/placement",
    "commit": "a" * 40,
    "code_modified": False,
    "machine": {"platform": "Linux"},
    "versions": {"python": "3.11"},
}


@pytest.mark.parametrize(
    "command,expected",
    [
        ("python -m benchmarks.x --model models/placement", "complete"),
        # placement_ablation_frozen.json: a label with spaces and commas, not quoted
        (
            "python -m benchmarks.x --recipe penalty features, metric reward: clone",
            'command does not paste back (unquoted text: "features,")',
        ),
        ("python -m benchmarks.x --label that commit's code", "unclosed quote"),
        ("python -m benchmarks.x --note a (b)", 'unquoted "("'),
        # fit_scale_50_run1.json: a note with a ";", not quoted
        (
            "python -m benchmarks.rca.fit_scale --note 2-core machine; load averages in machine",
            'command does not paste back (unquoted ";")',
        ),
        ("python -m benchmarks.x --traces <half of the 11> --seeds 1", 'unquoted "<"'),
        ("python -m benchmarks.x --model models/placement | tee log", 'unquoted "|"'),
        ("python -m benchmarks.x --model models/placement --workers $(nproc)", "complete"),
        # paths that hold a models/ folder but name none of the checkout
        ("python -m benchmarks.x --model /tmp/run/models/seed0", "complete"),
        ("python -m benchmarks.x --model runs:/abc/models/policy", "complete"),
        ("python -m benchmarks.x --model $RUN_DIR/models/s0", "complete"),
        ("python -m benchmarks.x --model old=models/gone", "names a missing path models/gone"),
        # what the run itself writes is no missing input
        ("python -m benchmarks.x --out benchmarks/results/new_run.json", "complete"),
        ("python -m benchmarks.x --json=benchmarks/results/new.json -o models/new", "complete"),
        # the folder moved to benchmarks/results/placement/ablation_models/
        (
            "python -m benchmarks.x benchmarks/results/placement_ablation_models/fgd/seed{1,2}",
            "names a missing path benchmarks/results/placement_ablation_models/fgd/seed1 and 1 more",
        ),
    ],
)
def test_index_flags_commands_that_do_not_rerun(command: str, expected: str) -> None:
    from benchmarks import index

    got = index.provenance_of({**FULL, "command": command})
    assert got == expected if expected == "complete" else expected in got


def test_index_checks_every_command_of_a_dict_and_spares_the_result_itself() -> None:
    from benchmarks import index

    d = {k: v for k, v in FULL.items() if k != "command"}
    d["commands"] = {
        "default": "python -m benchmarks.rca.main_table --json benchmarks/results/mine.json",
        "hard": "python -m benchmarks.rca_main_table --model benchmarks/results/gone_models/s0",
    }
    got = index.provenance_of(d, "mine.json")
    assert got == "names a missing path benchmarks/results/gone_models/s0"
