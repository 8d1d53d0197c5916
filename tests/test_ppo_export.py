"""Export parity (ONNX and torch vs MaskablePPO.predict) and model-loading errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from ppo_helpers import load_tiny

from fleetmind.data.errors import ModelLoadError
from fleetmind.envs.gpu_placement_env import GpuPlacementEnv
from fleetmind.rl.export import OnnxActor, export_policy, load_torch
from fleetmind.rl.policy import count_parameters
from fleetmind.rl.policy_adapter import load_ppo_policy
from fleetmind.rl.ppo import PPOHyperparams, make_model, make_vec_env


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ppo_export")
    nodes, trace = load_tiny(folder)
    kw = {"traces": trace, "nodes": nodes, "n_candidates": 8}
    venv = make_vec_env(1, 0, kw)
    model = make_model(venv, PPOHyperparams(n_steps=64, batch_size=32), seed=0)
    with torch.no_grad():  # make the logits far from uniform so ties do not decide the test
        for p in model.policy.mlp_extractor.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    paths = export_policy(model, folder / "model")
    env = GpuPlacementEnv(**kw)
    return model, paths, env, folder


def test_parameter_budget(exported):
    model, *_ = exported
    assert count_parameters(model.policy) <= 100_000


def test_exported_actions_match_predict(exported):
    model, paths, env, _ = exported
    actor, onnx = load_torch(paths["torch"]), OnnxActor(paths["onnx"])
    rng = np.random.default_rng(0)
    obs, _ = env.reset(seed=1)
    n_checked = n_nonzero = 0
    for _ in range(60):
        mask = env.action_masks()
        want, _ = model.predict(obs, action_masks=mask, deterministic=True)
        assert actor.predict(obs, mask) == int(want) == onnx.predict(obs, mask)
        assert mask[int(want)]
        n_checked += 1
        n_nonzero += int(want) != 0
        obs, _, term, trunc, _ = env.step(int(rng.choice(np.flatnonzero(mask))))
        if term or trunc:
            obs, _ = env.reset(seed=2)
    batch = np.stack([obs, obs])
    masks = np.stack([env.action_masks()] * 2)
    assert (onnx.predict(batch, masks) == actor.predict(batch, masks)).all()
    assert n_checked == 60 and n_nonzero > 0


def test_adapter_loads_both_backends(exported):
    _, paths, _, folder = exported
    for backend in ("onnx", "torch"):
        pol = load_ppo_policy(folder / "model", backend=backend)
        assert pol.builder.n_candidates == 8


def test_corrupt_or_missing_model_raises(tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "policy.pt").write_bytes(b"not a torch file")
    with pytest.raises(ModelLoadError, match="policy.pt"):
        load_ppo_policy(bad, backend="torch")
    (bad / "policy.onnx").write_bytes(b"\x00garbage")
    with pytest.raises(ModelLoadError, match="policy.onnx"):
        load_ppo_policy(bad)
    with pytest.raises(ModelLoadError, match="not found"):
        load_ppo_policy(tmp_path / "nowhere")
    torch.save({"format": "something-else"}, bad / "policy.pt")
    with pytest.raises(ModelLoadError):
        load_ppo_policy(bad / "policy.pt")


def test_foreign_pickle_gives_one_short_line_and_no_warning(tmp_path):
    """A pickle that is not a torch export: a short reason, not torch's paragraph and warning."""
    import pickle
    import warnings

    bad = tmp_path / "policy.pt"
    bad.write_bytes(pickle.dumps({"weights": [1.0, 2.0]}, protocol=4))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with pytest.raises(ModelLoadError) as err:
            load_ppo_policy(bad, backend="torch")
    assert not [w for w in seen if "pickle" in str(w.message)]
    msg = str(err.value)
    assert "not a weights-only torch file" in msg and "\n" not in msg
    assert "PyTorch 2.6" not in msg and len(msg) < 400


def test_corrupt_metadata_raises(exported, tmp_path):
    _, paths, _, _ = exported
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "policy.pt").write_bytes(paths["torch"].read_bytes())
    (folder / "metadata.json").write_text("{broken")
    with pytest.raises(ModelLoadError, match="metadata"):
        load_ppo_policy(folder)
    (folder / "metadata.json").write_text(json.dumps({"n_candidates": 3}))
    with pytest.raises(ModelLoadError, match="candidates"):
        load_ppo_policy(folder)


def test_released_model_places_without_trace(tmp_path):
    """The service's use: default artifact, no trace (typical pods from metadata.json)."""
    from fleetmind.envs.core import ClusterState, pods_from_trace

    pol = load_ppo_policy(None)
    nodes, trace = load_tiny(tmp_path)
    state = ClusterState.from_openb(nodes)
    pol.reset(state)
    placed = 0
    for pod in pods_from_trace(trace)[:60]:
        mask = state.feasible(pod)
        node, gpus = pol.select(state, pod, mask)
        if node >= 0:
            assert mask[node]
            state.place(pod, node, gpus)  # raises PlacementError on an invalid choice
            placed += 1
    assert placed > 0 and pol.version
