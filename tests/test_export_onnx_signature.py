"""A placement ONNX that cannot place fails when it loads, not at every decision.

A graph whose output is named ``act``, whose ``obs`` is float64, whose ``mask`` has a symbolic
``K`` or rank 1 used to load (or fail with ``invalid literal for int()`` / ``IndexError``) and then
answer every placement with a 500. :class:`fleetmind.rl.export.OnnxActor` now checks the
signature :func:`fleetmind.rl.export.save_onnx` writes (inputs ``obs (B, D) float32`` and
``mask (B, K) bool``, output ``action``) and runs the graph once on zeros, so the service falls
back with a reason and ``fleetmind sched evaluate`` stops with one line (exit 2). A failure at
decision time is a typed 503, not a 500.

The graphs are built with ``onnx.helper`` (the ONNX Python API, onnx/onnx ``docs/PythonAPIOverview.md``,
"Creating an ONNX Model Using Helper Functions"); the input and output checks read
onnxruntime's ``InferenceSession.get_inputs()`` / ``get_outputs()`` (``NodeArg.name``, ``.type``,
``.shape``: an int for a fixed dimension, a string for a symbolic one).
"""

from __future__ import annotations

import shutil
import sys
import types
from pathlib import Path

import numpy as np
import onnx
import pytest
from fastapi.testclient import TestClient
from onnx import TensorProto, helper

from fleetmind.cli import main
from fleetmind.data.errors import ModelLoadError, NotAvailableError
from fleetmind.rl.export import OnnxActor
from fleetmind.rl.policy_adapter import load_ppo_policy
from fleetmind.serving.app import create_app
from fleetmind.serving.registry import ModelRegistry
from fleetmind.serving.settings import Settings

REPO = Path(__file__).resolve().parents[1]
RELEASED = REPO / "models" / "placement"
K, D = 16, 298
"""The released model's candidates and observation size (its metadata.json's builder)."""


def actor_onnx(
    path: Path,
    *,
    action: str = "action",
    obs_type: int = TensorProto.FLOAT,
    obs_shape: tuple = ("b", D),
    mask_shape: tuple = ("b", K),
    weight_rows: int = D,
    offset: int = 0,
) -> Path:
    """A linear masked argmax actor in ONNX with the given signature (seed 0 weights)."""
    w = np.random.default_rng(0).standard_normal((weight_rows, K))
    np_type = np.float64 if obs_type == TensorProto.DOUBLE else np.float32
    nodes = [
        helper.make_node("MatMul", ["obs", "w"], ["scores"]),
        helper.make_node("Where", ["mask", "scores", "floor"], ["logits"]),
        helper.make_node("ArgMax", ["logits"], ["best"], axis=-1, keepdims=0),
        helper.make_node("Add", ["best", "offset"], [action]),
    ]
    graph = helper.make_graph(
        nodes,
        "actor",
        [
            helper.make_tensor_value_info("obs", obs_type, list(obs_shape)),
            helper.make_tensor_value_info("mask", TensorProto.BOOL, list(mask_shape)),
        ],
        [
            helper.make_tensor_value_info(action, TensorProto.INT64, ["b"]),
            helper.make_tensor_value_info("logits", obs_type, ["b", K]),
        ],
        initializer=[
            onnx.numpy_helper.from_array(w.astype(np_type), "w"),
            onnx.numpy_helper.from_array(np.array(-1e8, dtype=np_type), "floor"),
            onnx.numpy_helper.from_array(np.array(offset, dtype=np.int64), "offset"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def model_folder(tmp_path: Path, name: str, **kw: object) -> Path:
    """A folder with the released metadata.json and an ONNX actor built by :func:`actor_onnx`."""
    folder = tmp_path / name
    actor_onnx(folder / "policy.onnx", **kw)
    shutil.copy(RELEASED / "metadata.json", folder / "metadata.json")
    return folder


@pytest.mark.parametrize(
    ("kw", "says"),
    [
        ({"action": "act"}, r"outputs \['act', 'logits'\], expected 'action'"),
        ({"obs_type": TensorProto.DOUBLE}, r"input 'obs' is tensor\(double\), expected float32"),
        ({"mask_shape": ("b", "k")}, r"input 'mask' has shape \['b', 'k'\]; the number of cand"),
        ({"mask_shape": (K,)}, r"input 'mask' has shape \[16\], expected rank 2"),
        ({"offset": 100}, r"a dry run gave action \[100"),
    ],
    ids=["output-act", "obs-float64", "symbolic-k", "mask-rank-1", "action-out-of-range"],
)
def test_an_actor_that_cannot_place_fails_to_load(tmp_path: Path, kw: dict, says: str) -> None:
    path = actor_onnx(tmp_path / "policy.onnx", **kw)
    with pytest.raises(ModelLoadError, match=says) as err:
        OnnxActor(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_the_released_actor_and_a_well_formed_one_load(tmp_path: Path) -> None:
    assert (
        OnnxActor(RELEASED / "policy.onnx").n_candidates,
        OnnxActor(RELEASED / "policy.onnx").obs_dim,
    ) == (K, D)
    actor = OnnxActor(actor_onnx(tmp_path / "policy.onnx"))
    assert (actor.n_candidates, actor.obs_dim) == (K, D)
    mask = np.zeros(K, dtype=bool)
    mask[5] = True
    assert actor.predict(np.ones(D, dtype=np.float32), mask) == 5


def test_a_graph_that_leaves_d_free_is_dry_run_with_the_builders_d(tmp_path: Path) -> None:
    """``obs (B, 'd')``: the adapter runs it once with the observation size its metadata's
    builder gives (298); weights for 100 values fail there, not at the first placement."""
    ok = model_folder(tmp_path, "ok", obs_shape=("b", "d"))
    assert load_ppo_policy(ok).builder.obs_dim == D
    bad = model_folder(tmp_path, "bad", obs_shape=("b", "d"), weight_rows=100)
    with pytest.raises(ModelLoadError, match="a dry run on a zero observation"):
        load_ppo_policy(bad)


def test_the_service_falls_back_with_the_reason(tmp_path: Path) -> None:
    folder = model_folder(tmp_path, "f64", obs_type=TensorProto.DOUBLE)
    models = ModelRegistry("baseline:upstream-coverage", str(folder)).load()
    assert models.placement.method != "ppo"
    assert "input 'obs' is tensor(double)" in (models.placement.fallback_reason or "")


def test_sched_evaluate_stops_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = model_folder(tmp_path, "noaction", action="act")
    argv = ["sched", "evaluate", "--trace", "default", "--mode", "fgd", "--policies", "ppo"]
    argv += ["--model", str(folder), "--seeds", "42", "--json", str(tmp_path / "out.json")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "expected 'action' among them" in err and "Traceback" not in err


def test_a_dynamic_mode_model_is_named_so() -> None:
    """The released dynamic-mode model given where an fgd-mode one is needed: the message said
    "actor takes 236 observation values but ... 298"; it now says what the model is and what to
    run instead."""
    ref = REPO / "models" / "placement-dynamic"
    with pytest.raises(ModelLoadError, match='dynamic-mode placement model .*"mode": "dynamic"'):
        load_ppo_policy(ref)
    with pytest.raises(ModelLoadError, match="--mode dynamic --policies ppo"):
        load_ppo_policy(ref)


class _Broken:
    """An actor that fails (or picks a ruled-out candidate) at decision time."""

    def __init__(self, base: OnnxActor, pick: int | None = None) -> None:
        self.n_candidates, self.obs_dim, self.pick = base.n_candidates, base.obs_dim, pick

    def predict(self, obs: np.ndarray, mask: np.ndarray) -> np.ndarray:
        if self.pick is None:
            raise RuntimeError("[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Unexpected input\nmore")
        return np.int64(self.pick)


@pytest.mark.parametrize("pick", [None, K + 3, -1])
def test_an_actor_failing_at_decision_time_is_a_503_not_a_500(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, pick: int | None
) -> None:
    policy = load_ppo_policy(RELEASED)
    policy.actor = _Broken(policy.actor, pick)
    mod = types.ModuleType("fleetmind.rl.policy_adapter")
    mod.load_ppo_policy = lambda ref=None: policy  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fleetmind.rl.policy_adapter", mod)
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/p.db",
        rca_model="baseline:upstream-coverage",
        incident_worker=False,
    )
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        assert c.get("/api/v1/models").json()["placement"]["method"] == "ppo"
        r = c.post("/api/v1/placements", json={"num_gpu": 1, "gpu_milli": 500})
    assert r.status_code == 503, r.text
    assert r.json()["detail"].startswith("placement model ")


def test_a_ruled_out_pick_is_refused() -> None:
    from fleetmind.envs.candidates import Candidates

    policy = load_ppo_policy(RELEASED)
    mask = np.zeros(K, dtype=bool)
    mask[:2] = True
    cand = Candidates(np.zeros(D, np.float32), mask, np.arange(K), [np.zeros(0)] * K)
    policy.actor = _Broken(policy.actor, 7)
    with pytest.raises(NotAvailableError, match="picked candidate 7, which the mask rules out"):
        policy._act(cand)
