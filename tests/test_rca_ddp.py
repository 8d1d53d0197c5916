"""Two-process DDP training of the GAT on CPU (gloo): shards differ, rank zero alone registers the model.

``fleetmind rca train --devices 2 --strategy ddp`` runs in a subprocess (Lightning's DDP launcher starts
the second rank by re-running the command), on a tiny hand-made dataset, with a tmp MLflow store.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from gat_helpers import toy_dataset

FLEETMIND = Path(sys.executable).with_name("fleetmind")


@pytest.mark.slow  # two fresh interpreters importing torch, Lightning and MLflow: about a minute
def test_two_process_ddp_shards_and_registers_rank_zero_checkpoint(tmp_path: Path) -> None:
    data = toy_dataset(tmp_path / "toy", n_train=24, n_val=8, n_test=8)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    env = {
        **os.environ,
        "MLFLOW_TRACKING_URI": uri,
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "CUDA_VISIBLE_DEVICES": "",
        "PL_DISABLE_FORK": "1",
    }
    out_json = tmp_path / "run.json"
    shards = tmp_path / "shards"
    cmd = [
        str(FLEETMIND), "rca", "train", "--data", str(data), "--epochs", "2", "--hidden", "16",
        "--heads", "2", "--layers", "2", "--batch-size", "4", "--devices", "2",
        "--strategy", "ddp", "--accelerator", "cpu", "--out", str(tmp_path / "runs"),
        "--shard-log", str(shards), "--json", str(out_json),
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out_json.read_text())
    assert res["world_size"] == 2 and res["rank"] == 0 and res["version"] == "1"

    # both ranks trained, each on its own shard of the training set
    r0 = json.loads((shards / "rank0.json").read_text())
    r1 = json.loads((shards / "rank1.json").read_text())
    assert r0["sampler"] == r1["sampler"] == "DistributedSampler"
    assert len(r0["epochs"]) == len(r1["epochs"]) == 2
    a, b = set(r0["epochs"][0]), set(r1["epochs"][0])
    n_train = res["data"]["n_train"] - res["data"]["train_root_outside_crop"]
    assert a and b and a != b
    assert len(a & b) <= 1  # DistributedSampler pads an odd count with one repeated sample
    assert a | b == set(range(n_train))

    # only rank zero registered (one version) and what it registered is its best checkpoint
    import mlflow

    mlflow.set_tracking_uri(uri)
    client = mlflow.MlflowClient(uri)
    assert [str(v.version) for v in client.search_model_versions("name='fleetmind-rca'")] == ["1"]
    local = Path(
        mlflow.artifacts.download_artifacts(
            artifact_uri="models:/fleetmind-rca/1", dst_path=str(tmp_path / "dl")
        )
    )
    registered = torch.load(next(local.rglob("model.pt")), map_location="cpu", weights_only=True)
    ckpt = torch.load(res["checkpoint"], map_location="cpu", weights_only=False)["state_dict"]
    ckpt = {k[len("model.") :]: v for k, v in ckpt.items() if k.startswith("model.")}
    assert registered.keys() == ckpt.keys()
    for k, v in ckpt.items():
        assert torch.equal(registered[k], v), k
