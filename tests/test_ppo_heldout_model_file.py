"""``benchmarks.placement.ppo_heldout --model`` takes a policy file as well as a model folder.

``fleetmind sched evaluate --model`` accepts an ``.onnx``/``.pt`` file; the held-out benchmark read
``<model>/metadata.json`` and failed with ``NotADirectoryError`` on one. It now reads the metadata
from the file's folder, and the JSON's ``policy_file`` names the file evaluated and its SHA-256.
The placement runs are replaced by a stub (the real PPO policy is still loaded from the file), so
the test needs no trace and runs in a second or two.
"""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from benchmarks.placement import ppo_heldout
from benchmarks.provenance import REPO_ROOT
from fleetmind.provenance import file_sha256

MODEL_DIR = REPO_ROOT / "models" / "placement"


class _SerialPool:
    """A ``ProcessPoolExecutor`` stand-in that runs each job in this process."""

    def __init__(self, max_workers: int | None = None) -> None:
        self.max_workers = max_workers

    def __enter__(self) -> _SerialPool:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def map(self, fn, jobs):  # noqa: ANN001, ANN201 - Executor.map's signature
        return map(fn, jobs)


def _fake_run(trace: str, policy: object, seed: int) -> SimpleNamespace:
    """A placement result with fixed numbers; records that ``ppo`` got a loaded policy."""
    name = policy if isinstance(policy, str) else "ppo"
    value = {"FGD": 5.0, "BestFit": 6.0, "ppo": 4.0}[name]
    return SimpleNamespace(
        trace=f"openb_pod_list_{trace}",
        policy=name,
        seed=seed,
        unallocated={100: value, 130: value + 1.0},
        n_pods=10,
        n_failed=0,
        ms_per_decision=0.1,
        seconds=0.01,
        extra={"cpu_seconds": 0.01},
        workload=None,
        source=getattr(policy, "source", None),
        placed=np.ones(10, dtype=bool),
    )


def _run(monkeypatch: pytest.MonkeyPatch, tmp_path, *model: str) -> dict:
    out = tmp_path / "out.json"
    monkeypatch.setattr(ppo_heldout, "ProcessPoolExecutor", _SerialPool)
    monkeypatch.setattr(ppo_heldout, "run_fgd", _fake_run)
    monkeypatch.setattr(ppo_heldout, "_PPO", {})
    argv = ["ppo_heldout", "--traces", "cpu050", "--seeds", "42", "--out", str(out), *model]
    monkeypatch.setattr(sys, "argv", argv)
    ppo_heldout.main()
    return json.loads(out.read_text())


def test_policy_file_is_accepted_and_recorded(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    policy = MODEL_DIR / "ppo_policy.onnx"
    if not policy.is_file():
        pytest.skip(f"{policy} absent")
    res = _run(monkeypatch, tmp_path, "--model", str(policy))
    meta = json.loads((MODEL_DIR / "metadata.json").read_text())
    assert res["model"] == f"{policy} ({meta.get('version')})"
    assert res["train_traces"] == sorted(meta.get("train_traces", []))
    assert res["policy_file"] == {
        "given": str(policy),
        "path": str(policy.resolve()),
        "sha256": file_sha256(policy),
    }
    assert res["traces"]["openb_pod_list_cpu050"]["ppo_minus_fgd"] == -1.0


def test_default_folder_records_its_policy_onnx(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    res = _run(monkeypatch, tmp_path)
    meta = json.loads((MODEL_DIR / "metadata.json").read_text())
    assert res["model"] == f"{MODEL_DIR} ({meta.get('version')})"
    policy = MODEL_DIR / "policy.onnx"
    assert res["policy_file"]["path"] == str(policy.resolve())
    assert res["policy_file"]["sha256"] == file_sha256(policy)


def test_missing_model_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    from fleetmind.errors import ConfigError

    with pytest.raises(ConfigError, match="placement model not found"):  # one line under run_main
        _run(monkeypatch, tmp_path, "--model", str(tmp_path / "absent.onnx"))
