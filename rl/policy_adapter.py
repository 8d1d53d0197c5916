"""The trained PPO agent as a placement policy (:class:`fleetmind.envs.policies.Policy` interface).

Used by ``fleetmind sched evaluate --policies ppo [--model REF]`` (through
:func:`fleetmind.envs.fgd_mode.evaluate_fgd`) and by the service's placement route.

``REF`` is one of:

* ``None``: the released artifact folder ``models/placement/``;
* a folder holding ``policy.onnx`` and/or ``policy.pt`` (plus ``metadata.json``);
* a ``policy.onnx`` or ``policy.pt`` file;
* an MLflow URI (``models:/fleetmind-placement@champion``, ``runs:/<id>/model``,
  ``mlflow-artifacts:/...``, ``file:///...``), downloaded with ``mlflow.artifacts.download_artifacts``
  into a temporary folder removed once the model is loaded.

Each decision builds the same candidate observation as ``fleetmind/GpuPlacement-v0``
(:class:`fleetmind.envs.candidates.CandidateBuilder`) and takes the exported actor's greedy action; a pod with a
single feasible node goes there, one with none fails, exactly as in the env and the heuristics.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from fleetmind.data.errors import ConfigError, DataError, ModelLoadError, NotAvailableError
from fleetmind.data.files import read_json
from fleetmind.data.mlflow_store import bounded_requests, download, is_mlflow_uri, reason
from fleetmind.data.openb import PodTrace
from fleetmind.data.paths import MODELS_DIR
from fleetmind.envs.candidates import CandidateBuilder, Candidates, PenaltyContext
from fleetmind.envs.core import ClusterState, Pod
from fleetmind.envs.policies import Policy
from fleetmind.envs.policies.fgd import typical_from_json

RELEASED_DIR = MODELS_DIR / "placement"
"""Folder of the released placement model."""
_BUILDER_OPTIONS = frozenset(
    {"n_fgd", "n_bestfit", "n_packing", "n_clustering", "n_dotprod", "penalty_features"}
)
"""Keys a model's ``metadata["builder"]`` may set (:class:`fleetmind.envs.candidates.CandidateBuilder`)."""


class PPOPlacementPolicy(Policy):
    """Greedy placement with an exported PPO actor over FGD-mode candidates.

    Args:
        actor: an object with ``predict(obs (D,), mask (K,)) -> int`` (:class:`fleetmind.rl.export.OnnxActor`
            or :class:`fleetmind.rl.export.PlacementActor`).
        n_candidates: ``K`` the actor was trained with.
        metadata: the artifact's ``metadata.json`` (``typical_pods`` is the fallback workload model
            when :meth:`reset` gets no trace).
        source: where the model came from (for messages and the service's ``model_version``).
        registry_version: ``<registered name>/<version>`` when the model came from the MLflow
            registry (``models:/...``), else ``None``.
    """

    name = "ppo"

    def __init__(
        self,
        actor: Any,
        n_candidates: int,
        metadata: dict[str, Any] | None = None,
        source: str = "",
        registry_version: str | None = None,
    ) -> None:
        super().__init__()
        self.actor = actor
        self.metadata = metadata or {}
        self.source = source
        self.registry_version = registry_version
        builder_kw = self.metadata.get("builder", {})
        if (
            not isinstance(builder_kw, dict)
            or not set(builder_kw) <= _BUILDER_OPTIONS
            or not isinstance(builder_kw.get("penalty_features", False), bool)
            or not all(
                type(v) is int and v >= 0 for k, v in builder_kw.items() if k != "penalty_features"
            )
        ):
            raise ModelLoadError(
                f"model {source}: metadata 'builder' must be an object with keys among"
                f" {sorted(_BUILDER_OPTIONS)} (counts >= 0, penalty_features a boolean),"
                f" got {builder_kw!r}"
            )
        self.builder = CandidateBuilder(n_candidates, **builder_kw)
        self._penalty_context: PenaltyContext | None = None
        if self.builder.penalty_features and "penalty_context" in self.metadata:
            try:
                self._penalty_context = PenaltyContext.from_json(self.metadata["penalty_context"])
            except ValueError as exc:
                raise ModelLoadError(f"model {source}: {exc}") from exc
        self._arrived = 0
        self._last: Candidates | None = None

    @property
    def version(self) -> str:
        """``<registered name>/<version>`` when loaded from the MLflow registry (as the GAT's
        :attr:`fleetmind.rca.gat_analyzer.GATAnalyzer.version`), else ``metadata['version']``
        or the source path."""
        if self.registry_version is not None:
            return self.registry_version
        return str(self.metadata.get("version", self.source))

    def check_standalone(self) -> None:
        """Check that the model can place pods without a workload trace, as the service does.

        Without a trace :meth:`reset` takes FGD's typical pods from ``metadata["typical_pods"]``
        and, when the builder observes penalty features, the statistics of
        ``metadata["penalty_context"]``. The service calls this at load, so that a model lacking
        them is refused there (a reload keeps the served model; a start falls back with the
        reason) rather than accepted and then failing every placement request.

        Raises:
            ModelLoadError: one line naming the model and what its metadata lacks.
        """
        where = f"placement model {self.source}"
        if "typical_pods" not in self.metadata:
            raise ModelLoadError(
                f"{where}: metadata.json stores no typical_pods (FGD's typical pods, needed to"
                " place pods without a workload trace)"
            )
        try:
            typical = typical_from_json(self.metadata["typical_pods"])
            fields = {k: getattr(typical, k) for k in ("cpu_milli", "gpu_milli", "num_gpu")}
            fields.update(count=typical.count, gpu_spec=typical.gpu_spec)
            sizes = {k: len(v) for k, v in fields.items()}
            if len(set(sizes.values())) != 1 or int(typical.count.sum()) <= 0:
                raise ValueError(f"its lists must be non-empty and of one length, got {sizes}")
        except (KeyError, TypeError, ValueError) as exc:
            detail = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
            raise ModelLoadError(
                f"{where}: metadata.json typical_pods is unreadable ({detail})"
            ) from None
        if self.builder.penalty_features and self._penalty_context is None:
            raise ModelLoadError(
                f"{where}: observes penalty features but metadata.json stores no penalty_context"
                " (needed to place pods without a workload trace)"
            )

    def reset(
        self,
        state: ClusterState,
        *,
        rng: np.random.Generator | None = None,
        trace: PodTrace | None = None,
    ) -> None:
        super().reset(state, rng=rng, trace=trace)
        typical = None
        if trace is None:
            if "typical_pods" not in self.metadata:
                raise ConfigError(
                    "the PPO policy needs the workload trace (for FGD's typical pods) and the model "
                    f"{self.source} stores none"
                )
            typical = typical_from_json(self.metadata["typical_pods"])
            if self.builder.penalty_features and self._penalty_context is None:
                raise ConfigError(
                    f"the PPO policy {self.source} observes penalty features and needs the workload"
                    " trace or a stored penalty_context"
                )
        # with a trace, the penalty features use its statistics, as in training
        ctx = None if trace is not None else self._penalty_context
        self.builder.reset(state, trace=trace, typical=typical, penalty_context=ctx)
        self._arrived = 0

    def candidates(self, state: ClusterState, pod: Pod, mask: np.ndarray) -> Candidates:
        """The candidate set and observation for ``pod`` (at least one feasible node in ``mask``)."""
        if self.builder.state is not state:
            raise ConfigError("call reset(state, trace=...) before select() on a new cluster state")
        return self.builder.build(pod, mask, self._arrived)

    def select(
        self, state: ClusterState, pod: Pod, mask: np.ndarray | None = None
    ) -> tuple[int, np.ndarray]:
        if mask is None:
            mask = state.feasible(pod)
        self._arrived += pod.gpu_request
        idx = np.flatnonzero(mask)
        if idx.size == 0:
            return -1, np.zeros(0, dtype=np.int64)
        if idx.size == 1:
            node = int(idx[0])
            return node, self.builder.fgd_gpus(pod, node)
        # the service resets the policy per request and has no arrival history: arrived >= allocated
        # always holds in fgd mode, so this lower bound changes nothing there
        self._arrived = max(self._arrived, state.allocated_gpu_milli + pod.gpu_request)
        cand = self.candidates(state, pod, mask)
        self._last = cand
        a = self._act(cand)
        return int(cand.nodes[a]), cand.gpus[a]

    def _act(self, cand: Candidates) -> int:
        """The actor's candidate for ``cand``: an index of an allowed candidate.

        Raises:
            NotAvailableError: the actor fails, or picks no allowed candidate (the service answers
                503, the CLI stops with one line; the load checks of
                :class:`fleetmind.rl.export.OnnxActor` make this rare).
        """
        try:
            a = np.asarray(self.actor.predict(cand.obs, cand.mask))
        except Exception as exc:  # onnxruntime's and torch's errors run to several lines
            detail = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
            raise NotAvailableError(
                f"placement model {self.version} failed on a decision ({detail})"
            ) from None
        k = cand.mask.size
        i = int(a.reshape(-1)[0]) if a.size == 1 and np.issubdtype(a.dtype, np.integer) else -1
        if not 0 <= i < k:
            raise NotAvailableError(
                f"placement model {self.version} gave action {a.tolist()!r}, not a candidate"
                f" index in [0, {k})"
            )
        if not cand.mask[i]:
            raise NotAvailableError(
                f"placement model {self.version} picked candidate {i}, which the mask rules out"
            )
        return i

    def score(self, state: ClusterState, pod: Pod, mask: np.ndarray) -> np.ndarray:
        raise NotImplementedError("the PPO policy ranks candidates, not every node; use select()")


def _resolve_ref(ref: str | Path | None) -> Path:
    return RELEASED_DIR if ref is None else Path(ref)


def _load_mlflow(uri: str, backend: str) -> PPOPlacementPolicy:
    """:func:`load_ppo_policy` for an MLflow URI: downloaded into a temporary folder that is
    removed once the actor is in memory; messages and the policy's source name the URI (an
    alias: the version it resolved to), not the temporary folder."""
    with tempfile.TemporaryDirectory(prefix="fleetmind-placement-") as tmp:
        try:
            import mlflow  # noqa: F401

            with bounded_requests():  # a server that is down: an error in seconds, not minutes
                local, shown, version = download(uri, tmp)
        except Exception as exc:
            raise ModelLoadError(f"cannot fetch placement model {uri}: {reason(exc)}") from None
        found = sorted(local.rglob("policy.onnx")) or sorted(local.rglob("policy.pt"))
        if not found:
            raise ModelLoadError(f"MLflow model {shown} holds no policy.onnx or policy.pt")
        try:
            policy = _load_folder(found[0].parent, backend)
        except ModelLoadError as exc:  # name the model, not the temporary folder
            raise ModelLoadError(str(exc).replace(str(local), shown)) from None
        policy.source = policy.source.replace(str(local), shown)
        policy.registry_version = version
    return policy


def load_ppo_policy(ref: str | Path | None = None, backend: str = "auto") -> PPOPlacementPolicy:
    """Load the PPO placement agent as a :class:`PPOPlacementPolicy`.

    Args:
        ref: see the module docstring (``None``: ``models/placement/``).
        backend: ``"onnx"`` (onnxruntime), ``"torch"`` (the plain torch module) or ``"auto"``
            (ONNX when ``policy.onnx`` exists, else torch).

    Raises:
        ModelLoadError: the reference does not exist, or a file is corrupt or not a placement model.
    """
    if ref is not None and is_mlflow_uri(str(ref)):
        return _load_mlflow(str(ref), backend)
    return _load_folder(_resolve_ref(ref), backend)


def _load_folder(path: Path, backend: str) -> PPOPlacementPolicy:
    """The policy in the local folder or file ``path`` (its files read whole)."""
    from fleetmind.rl.export import OnnxActor, load_torch

    if path.is_dir():
        folder = path
        onnx_file, pt_file = folder / "policy.onnx", folder / "policy.pt"
    elif path.is_file():
        folder = path.parent
        onnx_file = path if path.suffix == ".onnx" else folder / "__absent__.onnx"
        pt_file = path if path.suffix != ".onnx" else folder / "__absent__.pt"
    else:
        raise ModelLoadError(f"placement model not found: {path}")
    meta: dict[str, Any] = {}
    meta_file = folder / "metadata.json"
    if (meta_file.exists() or meta_file.is_symlink()) and not meta_file.is_file():
        raise ModelLoadError(f"placement model metadata {meta_file} is not a readable regular file")
    if meta_file.is_file():
        try:  # read_json: a BOM is ignored, a huge integer or bad bytes are one line
            meta = read_json(meta_file, "placement model metadata")
        except DataError as exc:
            raise ModelLoadError(f"corrupt {exc}") from exc
        if not isinstance(meta, dict):
            raise ModelLoadError(f"corrupt placement model metadata {meta_file}: not an object")
        if meta.get("mode") == "dynamic":
            raise ModelLoadError(
                f'{folder} is a dynamic-mode placement model (metadata.json "mode": "dynamic"),'
                " not an fgd-mode one: evaluate it with `fleetmind sched evaluate --mode dynamic"
                f" --policies ppo --model {folder}`; fgd mode and the service take an fgd-mode"
                " model (models/placement/, or one trained with `fleetmind sched train --mode fgd`)"
            )
    if backend not in ("auto", "onnx", "torch"):
        raise ConfigError(f"unknown backend {backend!r}; use auto, onnx or torch")
    use_onnx = backend == "onnx" or (backend == "auto" and onnx_file.is_file())
    if use_onnx:
        actor = OnnxActor(onnx_file)
        k = actor.n_candidates
        source = onnx_file
    else:
        actor = load_torch(pt_file)
        k = actor.config["n_candidates"]
        source = pt_file
    if "n_candidates" in meta:
        n = meta["n_candidates"]
        if type(n) is not int:  # bool is an int subclass: excluded too
            raise ModelLoadError(
                f"corrupt placement model metadata {meta_file}: n_candidates must be an integer,"
                f" got {n!r}"
            )
        if n != k:
            raise ModelLoadError(f"{source}: actor has {k} candidates but metadata.json says {n}")
    policy = PPOPlacementPolicy(actor, k, meta, source=str(source))
    dim = getattr(actor, "obs_dim", None)
    if dim is None and use_onnx:  # a graph that leaves D free: its dry run with the builder's D
        actor.dry_run(policy.builder.obs_dim)
    if dim is None and hasattr(actor, "config"):
        c = actor.config
        dim = c["n_candidates"] * c["n_cand_features"] + c["n_global_features"]
    if dim is not None and dim != policy.builder.obs_dim:
        raise ModelLoadError(
            f"{source}: the actor takes {dim} observation values but metadata.json's builder"
            f" settings give {policy.builder.obs_dim} (penalty_features"
            f" {policy.builder.penalty_features})"
        )
    return policy
