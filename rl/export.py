"""Export a trained placement agent to a plain torch module and to ONNX, and load them back.

The exported actor takes the env's flat observation and its action mask and returns the greedy action,
the same one ``MaskablePPO.predict(obs, action_masks=mask, deterministic=True)`` picks: masked logits get
``-1e8`` (as sb3-contrib's ``MaskableCategorical`` does) and the argmax wins (lowest index on ties).

Files written by :func:`export_policy` into one folder:

| file | content |
| --- | --- |
| ``policy.pt`` | ``{"format", "config": {n_candidates, n_cand_features, n_global_features, hidden}, "state_dict"}`` of :class:`PlacementActor` (loads with ``torch.load(weights_only=True)``) |
| ``policy.onnx`` | the same actor, inputs ``obs (B, K*F+G) float32`` and ``mask (B, K) bool``, outputs ``action (B,) int64`` and ``logits (B, K) float32`` |

Shapes:
    - **obs**: ``(B, K*F + G)`` float32
    - **mask**: ``(B, K)`` bool
    - **action**: ``(B,)`` int64, **logits**: ``(B, K)`` float32 (masked entries ``-1e8``)
"""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from fleetmind.compat import legacy_module_names
from fleetmind.data.errors import ModelLoadError
from fleetmind.rl.policy import MASKED_LOGIT, CandidateScorerNet

EXPORT_FORMAT = "fleetmind-placement-actor/1"


class PlacementActor(nn.Module):
    """Greedy masked actor: the row MLP and logit head of a :class:`CandidateScorerNet`.

    Args:
        n_candidates (int): ``K``.
        n_cand_features (int): ``F``.
        n_global_features (int): ``G``.
        hidden (int, optional): hidden width. (default: ``64``)
    """

    def __init__(
        self, n_candidates: int, n_cand_features: int, n_global_features: int, hidden: int = 64
    ) -> None:
        super().__init__()
        self.config = {
            "n_candidates": int(n_candidates),
            "n_cand_features": int(n_cand_features),
            "n_global_features": int(n_global_features),
            "hidden": int(hidden),
        }
        self.scorer = CandidateScorerNet(n_candidates, n_cand_features, n_global_features, hidden)

    def forward(self, obs: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.scorer.forward_actor(obs)
        masked = torch.where(mask, logits, torch.full_like(logits, MASKED_LOGIT))
        return torch.argmax(masked, dim=-1), masked

    @torch.no_grad()
    def predict(self, obs: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Greedy actions for numpy ``obs (B, D)`` / ``(D,)`` and ``mask (B, K)`` / ``(K,)``."""
        single = obs.ndim == 1
        o = torch.as_tensor(np.atleast_2d(obs), dtype=torch.float32)
        m = torch.as_tensor(np.atleast_2d(mask), dtype=torch.bool)
        action = self.forward(o, m)[0].numpy()
        return action[0] if single else action


def actor_from_model(model: Any) -> PlacementActor:
    """Build a :class:`PlacementActor` holding the weights of a trained ``MaskablePPO`` model."""
    pol = model.policy
    actor = PlacementActor(pol.n_candidates, pol.n_cand_features, pol.n_global_features, pol.hidden)
    actor.scorer.load_state_dict(pol.mlp_extractor.state_dict())
    return actor.eval()


def save_torch(actor: PlacementActor, path: str | Path) -> Path:
    """Write ``actor`` as ``{"format", "config", "state_dict"}`` to ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(
        {"format": EXPORT_FORMAT, "config": actor.config, "state_dict": actor.state_dict()}, path
    )
    return path


def load_torch(path: str | Path) -> PlacementActor:
    """Load a :class:`PlacementActor` saved by :func:`save_torch`.

    Raises:
        ModelLoadError: the file is missing, not a torch file, or not a placement actor.
    """
    path = Path(path)
    if not path.is_file():
        raise ModelLoadError(f"placement model file not found: {path}")
    try:
        with warnings.catch_warnings():  # torch warns about foreign pickles before it refuses
            warnings.simplefilter("ignore")
            blob = torch.load(path, map_location="cpu", weights_only=True)
        if not isinstance(blob, dict) or blob.get("format") != EXPORT_FORMAT:
            raise ValueError(f"format is not {EXPORT_FORMAT}")
        with torch.random.fork_rng(devices=[]):  # random init, overwritten: caller's RNG kept
            actor = PlacementActor(**blob["config"])
        actor.load_state_dict(blob["state_dict"])
    except ModelLoadError:
        raise
    except Exception as exc:  # corrupt pickle, wrong keys, wrong shapes
        if isinstance(exc, pickle.UnpicklingError):  # torch's text runs to a paragraph
            detail = "UnpicklingError: not a weights-only torch file"
        else:
            detail = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
        raise ModelLoadError(
            f"cannot load placement model {path}: not a FleetMind torch export ({detail}); "
            "expected policy.pt written by `fleetmind sched train` or a policy.onnx file"
        ) from exc
    return actor.eval()


def save_onnx(actor: PlacementActor, path: str | Path) -> Path:
    """Export ``actor`` to ONNX (dynamic batch) at ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    cfg = actor.config
    dim = cfg["n_candidates"] * cfg["n_cand_features"] + cfg["n_global_features"]
    obs = torch.zeros(2, dim, dtype=torch.float32)
    mask = torch.ones(2, cfg["n_candidates"], dtype=torch.bool)
    torch.onnx.export(
        actor.eval(),
        (obs, mask),
        str(path),
        input_names=["obs", "mask"],
        output_names=["action", "logits"],
        dynamic_axes={"obs": {0: "batch"}, "mask": {0: "batch"}, "action": {0: "batch"}},
        dynamo=False,
    )
    return path


class OnnxActor:
    """onnxruntime session over a ``policy.onnx`` written by :func:`save_onnx`.

    The graph is checked when it loads, so that a model which cannot place fails here, where the
    service falls back to a heuristic and the CLI stops with one line, rather than at every
    decision: inputs ``obs`` (float32, rank 2) and ``mask`` (bool, rank 2, a fixed number of
    candidates ``K``), an output ``action``, and a dry run on zeros (when the graph fixes ``D``;
    otherwise :meth:`dry_run` is the caller's, with the observation size it builds) that gives one
    integer action in ``[0, K)``.

    Raises:
        ModelLoadError: the file is missing, not a valid ONNX model, or not a placement actor of
            that signature (one line naming the file and what was found).
    """

    def __init__(self, path: str | Path) -> None:
        import onnxruntime as ort

        path = Path(path)
        if not path.is_file():
            raise ModelLoadError(f"placement ONNX file not found: {path}")
        try:
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = 1
            opts.inter_op_num_threads = 1
            self.session = ort.InferenceSession(
                str(path), sess_options=opts, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:
            raise ModelLoadError(f"cannot load placement ONNX model {path}: {exc}") from exc
        self.path = path
        # K, and D: the observation size the graph takes (None when the graph leaves it free)
        self.n_candidates, self.obs_dim = _onnx_signature(self.session, path)
        if self.obs_dim is not None:
            self.dry_run(self.obs_dim)

    def dry_run(self, obs_dim: int) -> None:
        """Run the graph once on a zero observation of ``obs_dim`` values, every candidate allowed.

        Raises:
            ModelLoadError: the run fails, or does not give one integer action in ``[0, K)``.
        """
        k = self.n_candidates
        obs = np.zeros((1, obs_dim), dtype=np.float32)
        mask = np.ones((1, k), dtype=bool)
        try:
            action = np.asarray(self.session.run(["action"], {"obs": obs, "mask": mask})[0])
        except Exception as exc:  # onnxruntime's errors run to several lines
            detail = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
            raise ModelLoadError(
                f"{self.path}: a dry run on a zero observation ({obs_dim} values, {k} candidates)"
                f" failed ({detail})"
            ) from None
        if (
            action.shape != (1,)
            or not np.issubdtype(action.dtype, np.integer)
            or not 0 <= int(action[0]) < k
        ):
            raise ModelLoadError(
                f"{self.path}: a dry run gave action {action.tolist()!r} ({action.dtype}, shape"
                f" {action.shape}); a placement actor gives one integer in [0, {k}) per row"
            )

    def predict(self, obs: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Greedy actions for ``obs (B, D)`` / ``(D,)`` and ``mask (B, K)`` / ``(K,)``."""
        single = obs.ndim == 1
        o = np.atleast_2d(obs).astype(np.float32, copy=False)
        m = np.atleast_2d(mask).astype(bool, copy=False)
        action = self.session.run(["action"], {"obs": o, "mask": m})[0]
        return action[0] if single else action


def _onnx_signature(session: Any, path: Path) -> tuple[int, int | None]:
    """``(K, D or None)`` of a placement actor's graph (D ``None``: left free by the graph).

    Raises:
        ModelLoadError: inputs other than float32 ``obs (B, D)`` and bool ``mask (B, K)`` with a
            fixed integer ``K``, or no output ``action``.
    """
    inputs = session.get_inputs()
    names = [i.name for i in inputs]
    if names != ["obs", "mask"]:
        raise ModelLoadError(f"{path} has inputs {names}, expected ['obs', 'mask']")
    outputs = [o.name for o in session.get_outputs()]
    if "action" not in outputs:
        raise ModelLoadError(f"{path} has outputs {outputs}, expected 'action' among them")
    obs, mask = inputs
    want = {"obs": ("tensor(float)", "float32"), "mask": ("tensor(bool)", "bool")}
    for i in inputs:
        if i.type != want[i.name][0]:
            raise ModelLoadError(
                f"{path}: input {i.name!r} is {i.type}, expected {want[i.name][1]}"
                f" ({i.name} (B, {'D' if i.name == 'obs' else 'K'}) {want[i.name][1]})"
            )
        if len(i.shape) != 2:
            raise ModelLoadError(
                f"{path}: input {i.name!r} has shape {i.shape}, expected rank 2"
                f" ({i.name} (B, {'D' if i.name == 'obs' else 'K'}))"
            )
    k, d = mask.shape[1], obs.shape[1]
    if type(k) is not int or k < 1:
        raise ModelLoadError(
            f"{path}: input 'mask' has shape {mask.shape}; the number of candidates K (its"
            " second dimension) must be a fixed integer of at least 1"
        )
    if d is not None and type(d) is not int:  # a symbolic name: the graph leaves it free
        d = None
    return k, d


def export_policy(model: Any, out_dir: str | Path) -> dict[str, Path]:
    """Write ``policy.pt`` and ``policy.onnx`` of a trained ``MaskablePPO`` into ``out_dir``."""
    out_dir = Path(out_dir)
    actor = actor_from_model(model)
    return {
        "torch": save_torch(actor, out_dir / "policy.pt"),
        "onnx": save_onnx(actor, out_dir / "policy.onnx"),
    }


def load_sb3_model(path: str | Path, device: str = "cpu") -> Any:
    """Load a ``MaskablePPO`` zip, including one saved before the ``fleetmind`` namespace (0.1.0).

    Such zips pickle their policy class as ``rl.policy.CandidateScorerPolicy``; the old module names
    resolve to ``fleetmind.*`` while the file is read (:func:`fleetmind.compat.legacy_module_names`).

    Raises:
        ModelLoadError: the file is missing or not a loadable model.
    """
    from sb3_contrib import MaskablePPO

    p = Path(path)
    if not p.is_file():
        raise ModelLoadError(f"no SB3 model at {p}")
    try:
        with legacy_module_names():
            return MaskablePPO.load(p, device=device)
    except Exception as exc:  # a zip without the expected members, a foreign pickle, ...
        raise ModelLoadError(f"cannot load SB3 model {p}: {type(exc).__name__}: {exc}") from exc
