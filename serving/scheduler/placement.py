"""Placement on the live fleet snapshot: reservations and the built-in best-fit heuristic.

Units follow openb: ``gpu_milli`` is the share of one GPU (1000 = a whole GPU); a job asks for
``num_gpu`` GPUs with ``gpu_milli`` each (fractional sharing only for ``num_gpu == 1``).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import threading
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from fleetmind.data.errors import ConfigError
from fleetmind.data.fleet_io import telemetry_template_for
from fleetmind.data.gpu_alloc import best_gpu_set_bits
from fleetmind.data.openb import ANY_GPU_MODEL, GPU_MILLI, GPU_MODELS
from fleetmind.data.paths import MODELS_DIR
from fleetmind.data.topology import NodeTemplate
from fleetmind.envs.core import MAX_GPUS_PER_NODE, ClusterState, Pod
from fleetmind.envs.policies import make_policy
from fleetmind.envs.policies.fgd import typical_from_json
from fleetmind.envs.policies.scores import bestfit_scores
from fleetmind.envs.policies.topology import TopologyBestEffort
from fleetmind.serving.schemas import JobSpec
from fleetmind.serving.telemetry.base import FleetSnapshot, GpuState, NodeState

GPU_CAUSES: dict[str, str] = {
    "held": "held for pods FleetMind placed, not yet seen bound",
    "busy": "in use per DCGM",
    "busy_or_held": "in use per DCGM or held for pods FleetMind placed",
    "no_reading": "with no DCGM reading (exporter down? run `fleetmind doctor`)",
    "unhealthy": "unhealthy or out of the node's allocatable nvidia.com/gpu",
}
"""Why GPUs are not free, in the words both the kube-scheduler extender's reasons
(:mod:`fleetmind.serving.scheduler.extender`) and the 409 answer of
``POST /api/v1/placements`` (:func:`why_no_fit`) use: ``held`` FleetMind's own holds
(``GET /api/v1/scheduler/holds`` lists them), ``busy`` what telemetry reads as used, ``no_reading``
placeholders of GPUs the kubelet counts but dcgm-exporter reports nothing for
(``GpuState.missing``), ``unhealthy`` GPUs DCGM or the device plugin marked unhealthy."""


def gpu_cause(
    node: NodeState, res: Reservations, indices: Collection[int], need: int, n: int
) -> str:
    """The :data:`GPU_CAUSES` key saying why fewer than ``n`` of the healthy GPUs ``indices`` of
    ``node`` have ``need`` milli free: ``held`` when telemetry alone reads ``n`` of them with room
    (FleetMind's holds take it), ``busy`` when FleetMind holds none of them, else
    ``busy_or_held``."""
    gpus = [g for g in node.gpus if g.healthy and g.index in indices]
    if sum(g.free_milli >= need for g in gpus) >= n:
        return "held"
    held = any(res.gpu_used(node.cluster, node.name, g.index) > 0 for g in gpus)
    return "busy_or_held" if held else "busy"


_SPEC_SEPARATORS = re.compile(r"[|,]")
_MODEL_TOKEN_SEPARATORS = re.compile(r"[\s_-]+")


def parse_gpu_models(spec: str | None) -> tuple[str, ...]:
    """The GPU models a spec allows (``JobSpec.gpu_model``, the ``gpu-card-model`` annotation).

    The spec lists models separated by ``|`` (openb's ``gpu_spec``) or ``,``; entries are
    stripped and those without a word dropped, so ``None``, ``""`` and an all-separator spec
    (``"|"``, ``" "``, ``"-"``) give ``()``. Callers decide what ``()`` means: no constraint for an unset spec.
    """
    if not spec:
        return ()
    return tuple(w.strip() for w in _SPEC_SEPARATORS.split(spec) if _model_tokens(w))


@functools.lru_cache(maxsize=4096)
def _model_key(name: str) -> str:
    """``name`` lower-cased with MIG's ``+`` written ``.``: NVIDIA's k8s-device-plugin advertises
    the profile ``1g.10gb+me`` (DCGM's ``GPU_I_PROFILE``, so telemetry's model name) as the
    resource ``nvidia.com/mig-1g.10gb.me``, as NVIDIA/mig-parted's ``normalizeProfileName``
    (``pkg/mig/builder``) replaces ``+`` with ``.``."""
    return name.strip().lower().replace("+", ".")


@functools.lru_cache(maxsize=4096)
def _model_tokens(name: str) -> tuple[str, ...]:
    """The words of a model name (cached: a fleet has a handful of names, asked per GPU)."""
    return tuple(t for t in _MODEL_TOKEN_SEPARATORS.split(_model_key(name)) if t)


def gpu_model_matches(model: str, wants: Sequence[str]) -> bool:
    """Whether a GPU named ``model`` is one of ``wants`` (True when ``wants`` is empty).

    A wanted name matches, case-insensitively, the whole model name or when its words (split on
    whitespace, ``-`` and ``_``) are whole words of the model name in the same order:
    ``"A100"`` matches ``"A100"`` and ``"NVIDIA A100-SXM4-80GB"``, ``"A100-40GB"`` matches
    ``"A100-SXM4-40GB"`` (NVIDIA's names put the form factor between model and memory),
    ``"MIG 3g.40gb"`` matches ``"A100 MIG 3g.40gb"``, but ``"A10"`` does not match ``"A100"``. openb's simulator compares names for equality (``data.openb.gpu_spec_mask``;
    FGD's ``IsNodeAccessibleToPodByType``); tokens let a short name select telemetry's long one.
    ``+`` and ``.`` are the same character (:func:`_model_key`): ``"MIG 1g.10gb.me"`` (the device
    plugin's resource name) matches ``"H100 MIG 1g.10gb+me"`` (DCGM's profile name), and neither
    matches ``"MIG 1g.10gb"``.
    """
    if not wants:
        return True
    have = _model_tokens(model)
    full = _model_key(model)
    for w in wants:
        if _model_key(w) == full:
            return True
        want = _model_tokens(w)
        words = iter(have)  # each wanted word found after the previous one: in order
        if want and all(any(h == t for h in words) for t in want):
            return True
    return False


def names_mig(name: str) -> bool:
    """Whether a model name (a GPU's, or a wanted one) names MIG instances: ``MIG`` is one of its
    words, as in telemetry's ``"<model> MIG <profile>"`` and the extender's ``"MIG <profile>"``."""
    return "mig" in _model_tokens(name)


def is_mig(gpu: GpuState) -> bool:
    """Whether ``gpu`` is a MIG instance (``mig_parent`` set, or a ``"<model> MIG <profile>"``
    name)."""
    return gpu.mig_parent is not None or names_mig(gpu.model)


def mig_mixed(node: NodeState) -> bool:
    """Whether ``node`` runs NVIDIA's k8s-device-plugin MIG strategy ``mixed``, as far as
    telemetry tells: MIG instances of two or more profiles, or MIG instances beside GPUs with MIG
    disabled (placeholders for GPUs telemetry does not report left out).

    The plugin's ``single`` strategy refuses both ("For mig.strategy=single all devices on the node
    must all be configured with the same migEnabled value", "More than one MIG device type present
    on node": ``migStrategySingle.GetPlugins``, ``mig-strategy.go`` in NVIDIA/k8s-device-plugin), so
    such a node is ``mixed``: its MIG instances are only ``nvidia.com/mig-<profile>`` resources and
    its ``nvidia.com/gpu`` only the GPUs with MIG disabled. A node whose GPUs are all MIG instances
    of one profile may be either (``single`` advertises them as ``nvidia.com/gpu``): it is not
    counted as mixed."""
    profiles: set[str] = set()
    whole = False
    for g in node.gpus:
        if g.missing:
            continue
        if is_mig(g):
            profiles.add(_model_key(g.model))
        else:
            whole = True
    return len(profiles) > 1 or (bool(profiles) and whole)


def gpu_allowed(gpu: GpuState, wants: Sequence[str], mixed: bool) -> bool:
    """Whether a job that wants the models ``wants`` (any when empty) may take ``gpu`` of a node
    that is (``mixed``) or is not of the MIG mixed strategy (:func:`mig_mixed`).

    :func:`gpu_model_matches`, except that a MIG instance of a mixed node is only a
    ``nvidia.com/mig-<profile>`` resource: only a wanted name that names MIG (:func:`names_mig`,
    e.g. the extender's ``"MIG 3g.40gb"``) takes it; a job that names no model or only whole-GPU
    models (``"H100"``) gets the node's GPUs with MIG disabled, as ``nvidia.com/gpu`` does there."""
    if mixed and is_mig(gpu):
        mig_wants = [w for w in wants if names_mig(w)]
        return bool(mig_wants) and gpu_model_matches(gpu.model, mig_wants)
    return gpu_model_matches(gpu.model, wants)


VOCABULARY_MODELS = 62
"""Most GPU models of the trace vocabulary (:data:`fleetmind.data.openb.GPU_MODELS`, ids 0..61):
``data.openb.gpu_model_id`` registers no more, so that no ``gpu_spec_mask`` of a trace sets a bit
past 61."""

OVERFLOW_MODEL_ID = VOCABULARY_MODELS
"""GPU model id shared by the names that find no free id below it (62): no vocabulary name has it,
so no pod's ``gpu_spec_mask`` but :data:`~fleetmind.data.openb.ANY_GPU_MODEL` (all bits) admits
those nodes, and ``1 << 62`` is still a positive int64 (``ClusterState.model_bit``)."""

MAX_MODEL_ID = OVERFLOW_MODEL_ID
"""Largest GPU model id a placement state holds (:data:`OVERFLOW_MODEL_ID`)."""


def snapshot_model_ids(models: Sequence[str | None]) -> np.ndarray:
    """``(len(models),)`` int64: a GPU model id for each node's GPU model name in one fleet
    snapshot (``None`` for a node without GPUs: -1), chosen without registering anything, so any
    number of names works.

    A name of the trace vocabulary (:data:`fleetmind.data.openb.GPU_MODELS`: openb's models, the
    ones a placement model was trained on) keeps its id there, so that the policies' per-model
    data reads it as in training: FGD's typical pods' ``gpu_spec_mask``, the PPO observation's
    model-scarcity feature (``envs.candidates.model_scarcity_penalties``). Every other name (DCGM's
    ``modelName``, MIG profiles, a fleet's own names) gets an id after the vocabulary, in order of
    first appearance, below :data:`VOCABULARY_MODELS`; the rest share :data:`OVERFLOW_MODEL_ID`,
    which no vocabulary name has (with a full vocabulary of 62, every other name gets it). Those ids
    mean nothing to a trained model: the scarcity feature reads 0 for them, as for any model
    outside the ones it was trained on, and FGD's typical pods, whose masks name openb models,
    never fit them. A shared id is safe for the job's own constraint: :class:`PeerPolicyPlacer`
    matches ``JobSpec.gpu_model`` against each GPU's model name, not the node's id.
    """
    ids = {m: i for i, m in enumerate(GPU_MODELS[:VOCABULARY_MODELS])}
    fresh = len(ids)  # the next id for a name outside the vocabulary
    out = np.full(len(models), -1, dtype=np.int64)
    for i, raw in enumerate(models):
        if raw is None:
            continue
        name = raw.strip()
        if name not in ids:
            ids[name] = min(fresh, OVERFLOW_MODEL_ID)
            fresh += 1
        out[i] = ids[name]
    return out


@dataclass(frozen=True)
class Option:
    """One feasible placement; higher ``score`` is better."""

    cluster: str
    node: str
    gpus: tuple[int, ...]
    score: float


class Placer(Protocol):
    """What the registry serves for placement."""

    name: str
    version: str | None

    def place(
        self,
        snapshot: FleetSnapshot,
        job: JobSpec,
        reservations: Reservations,
        k: int,
        allowed: Collection[tuple[str, str]] | None = None,
        alternative_gpus: bool = True,
    ) -> list[Option]:
        """Return up to ``k`` feasible options, best first (empty when none fits). An option's
        ``score`` does not depend on ``k``; a CPU-only job's options are in
        :func:`cpu_nodes_first`'s order.

        ``allowed``: the ``(cluster, node name)`` pairs the job may go to (all when None; the rest
        of the snapshot still forms the state the policy sees; :func:`node_allowed`). ``alternative_gpus=False``: options after the first may
        leave ``gpus`` empty (a caller that only ranks nodes saves the GPU choice per node).
        """
        ...


def node_allowed(allowed: Collection[tuple[str, str]] | None, cluster: str, name: str) -> bool:
    """Whether a placer's ``allowed`` admits the node ``name`` of ``cluster`` (all when None).

    ``allowed`` holds ``(cluster, node name)`` pairs (:func:`fleetmind.serving.health.healthy_nodes`,
    the scheduler extender's candidates): a node is matched in its own cluster, so a same-named
    node of another cluster is not admitted."""
    return allowed is None or (cluster, name) in allowed


class Reservations:
    """GPU shares, CPU and memory booked by ``reserve=true`` placements (in-process, thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._gpu: dict[tuple[str, str, int], int] = {}
        self._cpu: dict[tuple[str, str], int] = {}
        self._mem: dict[tuple[str, str], int] = {}

    def gpu_used(self, cluster: str, node: str, gpu: int) -> int:
        return self._gpu.get((cluster, node, gpu), 0)

    def cpu_used(self, cluster: str, node: str) -> int:
        return self._cpu.get((cluster, node), 0)

    def mem_used(self, cluster: str, node: str) -> int:
        return self._mem.get((cluster, node), 0)

    def gpu_items(self) -> list[tuple[tuple[str, str, int], int]]:
        with self._lock:
            return list(self._gpu.items())

    def cpu_items(self) -> list[tuple[tuple[str, str], int]]:
        with self._lock:
            return list(self._cpu.items())

    def mem_items(self) -> list[tuple[tuple[str, str], int]]:
        with self._lock:
            return list(self._mem.items())

    def book(self, opt: Option, job: JobSpec) -> None:
        with self._lock:
            for g in opt.gpus:
                key = (opt.cluster, opt.node, g)
                self._gpu[key] = self._gpu.get(key, 0) + job.gpu_milli
            nk = (opt.cluster, opt.node)
            self._cpu[nk] = self._cpu.get(nk, 0) + job.cpu_milli
            self._mem[nk] = self._mem.get(nk, 0) + job.memory_mib

    @property
    def lock(self) -> threading.Lock:
        return self._lock


def free_gpus(node: NodeState, res: Reservations) -> list[tuple[int, int]]:
    """``[(gpu index, free milli)]`` of a node's healthy GPUs after reservations."""
    return [
        (g.index, g.free_milli - res.gpu_used(node.cluster, node.name, g.index))
        for g in node.gpus
        if g.healthy
    ]


class BestFitPlacer:
    """Best fit: the node (and GPUs) that leave the least free GPU capacity behind.

    Among GPUs that can hold the request, the fullest are chosen (packing, which keeps whole GPUs
    and whole nodes free for large jobs). A job of several whole GPUs gets the node's best-linked
    set of idle GPUs (:func:`topology_gpus`: most NVLinks, then the same PCIe switch and CPU
    socket, on the node's topology template); a job of several time-slicing replicas gets the
    tightest contiguous block of indices that fits. Nodes rank by the free GPU capacity they
    leave (least first), then by the index span of the chosen GPUs.
    """

    name = "builtin-bestfit"
    version: str | None = None

    def place(
        self,
        snapshot: FleetSnapshot,
        job: JobSpec,
        reservations: Reservations,
        k: int,
        allowed: Collection[tuple[str, str]] | None = None,
        alternative_gpus: bool = True,
    ) -> list[Option]:
        options: list[Option] = []
        wants = parse_gpu_models(job.gpu_model)
        for node in snapshot.nodes:
            if job.cluster is not None and node.cluster != job.cluster:
                continue
            if not node_allowed(allowed, node.cluster, node.name):
                continue
            if job.cpu_milli and node.cpu_milli:
                if (
                    node.cpu_milli_free - reservations.cpu_used(node.cluster, node.name)
                    < job.cpu_milli
                ):
                    continue
            if job.memory_mib and node.memory_mib:
                if (
                    node.memory_mib_free - reservations.mem_used(node.cluster, node.name)
                    < job.memory_mib
                ):
                    continue
            mixed = job.num_gpu > 0 and mig_mixed(node)
            ok = {g.index for g in node.gpus if gpu_allowed(g, wants, mixed)}
            free = [(i, f) for i, f in free_gpus(node, reservations) if i in ok]
            total_free = sum(f for _, f in free)
            if job.num_gpu == 0:
                options.append(Option(node.cluster, node.name, (), -total_free / 1000.0))
                continue
            fits = [(i, f) for i, f in free if f >= job.gpu_milli]
            if len(fits) < job.num_gpu:
                continue
            chosen = _choose(fits, job.num_gpu, node if job.gpu_milli >= 1000 else None)
            leftover = total_free - job.num_gpu * job.gpu_milli
            spread = (max(chosen) - min(chosen) + 1 - len(chosen)) if chosen else 0
            options.append(
                Option(node.cluster, node.name, tuple(chosen), -(leftover / 1000.0) - 0.01 * spread)
            )
        options.sort(key=lambda o: (-o.score, o.cluster, o.node))
        return (options if job.num_gpu else cpu_nodes_first(options, snapshot.nodes))[:k]


def _choose(fits: list[tuple[int, int]], n: int, node: NodeState | None = None) -> list[int]:
    """Pick ``n`` GPUs of ``fits`` (``[(gpu index, free milli)]``, each able to hold the request):
    the fullest for n == 1; for n > 1 on ``node`` (a whole-GPU job: ``fits`` are idle GPUs) the
    best-linked set (:func:`topology_gpus`), else the tightest contiguous index window."""
    by_fill = sorted(fits, key=lambda t: (t[1], t[0]))
    if n == 1:
        return [by_fill[0][0]]
    if node is not None:
        pos = {g.index: p for p, g in enumerate(node.gpus)}
        linked = topology_gpus(node, [pos[i] for i, _ in fits if i in pos], n)
        if linked is not None:
            return sorted(node.gpus[p].index for p in linked)
    idx = sorted(i for i, _ in fits)
    best: list[int] | None = None
    for s in range(len(idx) - n + 1):
        window = idx[s : s + n]
        if best is None or window[-1] - window[0] < best[-1] - best[0]:
            best = window
    return best if best is not None else sorted(i for i, _ in by_fill[:n])


def topology_gpus(node: NodeState, idle: Sequence[int], n: int) -> tuple[int, ...] | None:
    """The best-linked ``n`` of a node's idle GPUs, as sorted positions in ``node.gpus``.

    ``idle``: positions (0-based) in ``node.gpus`` of the GPUs free for a whole-GPU job. GPU ``i``
    of the node's template is the physical GPU ``i`` (``GpuState.index``; a MIG instance sits on
    its ``mig_parent``) and the template has ``max(physical index) + 1`` GPUs, so a GPU telemetry
    does not report (GPUs 0-2 and 4-7 of a DGX-1) or MIG instances listed beside the whole GPUs
    move no GPU off its place on the board. Only whole GPUs (no MIG instance) are chosen.
    The choice is :func:`fleetmind.data.gpu_alloc.best_gpu_set` (NVIDIA go-gpuallocator's pair
    scores, greedy rule) on the node's template (:func:`fleetmind.data.fleet_io.telemetry_template_for`
    of its GPU model, as :class:`~fleetmind.envs.policies.topology.TopologyBestEffort` reads it):
    more NVLinks first, then GPUs under one PCIe switch, then one CPU socket. ``None`` when fewer
    than ``n`` whole GPUs are idle or the node has no template of that size (the caller keeps
    its own choice)."""
    if n < 2 or len(idle) < n or not node.gpus:
        return None
    size = 1 + max(g.index if g.mig_parent is None else g.mig_parent for g in node.gpus)
    if size > 63:  # a MIG instance known by name only (index 100 (parent + 1) + GI) holds no place
        size = 1 + max(_physical(g) for g in node.gpus)
    at: dict[int, int] = {}  # physical index -> position of an idle whole GPU
    bits = 0
    for p in idle:
        g = node.gpus[p]
        if 0 <= g.index < size and g.mig_parent is None and not names_mig(g.model):
            at.setdefault(g.index, p)
            bits |= 1 << g.index
    if len(at) < n:
        return None
    template = _topology_template(_board_model(node), size)
    if template is None or template.n_gpus != size:
        return None
    got = best_gpu_set_bits(template, bits, n)
    return None if got is None else tuple(sorted(at[i] for i in got))


def _physical(gpu: GpuState) -> int:
    """The board position of ``gpu``: its ``mig_parent`` for a MIG instance, else its index
    (-1 for a MIG instance of unknown parent, which holds no place)."""
    if gpu.mig_parent is not None:
        return gpu.mig_parent
    return -1 if is_mig(gpu) else gpu.index


@functools.lru_cache(maxsize=512)
def _topology_template(model: str, n_gpus: int) -> NodeTemplate | None:
    """:func:`fleetmind.data.fleet_io.telemetry_template_for` memoised per (model name, GPU count),
    ``None`` where it has none: it parses the name on every call, and BestFit asks for every
    feasible node of every request. Templates are shared, read-only objects
    (:func:`fleetmind.data.topology.get_template` returns the same one per name), so handing
    the same one out again is safe."""
    try:
        return telemetry_template_for(model, n_gpus)
    except (ConfigError, KeyError, ValueError):
        return None


@dataclass(frozen=True)
class _SlotModels:
    """The GPU model of each slot of a placement state: ``index[row, slot]`` is an entry of
    ``names`` (-1 for a slot without a GPU); ``mig[row, slot]``: the slot is a MIG instance;
    ``mixed[row]``: the node is of the MIG mixed strategy (:func:`mig_mixed`); ``wide[row]``: the
    node has more GPUs than the state's ``MAX_GPUS_PER_NODE`` slots (only its first ones are in
    it)."""

    names: tuple[str, ...]
    index: np.ndarray
    mig: np.ndarray
    mixed: np.ndarray
    wide: np.ndarray

    def _named(self, wants: Sequence[str]) -> np.ndarray:
        ok = np.fromiter(
            (gpu_model_matches(m, wants) for m in self.names), dtype=bool, count=len(self.names)
        )
        return np.append(ok, False)[self.index]  # index -1 reads the appended False

    def matching(self, wants: Sequence[str], mixed_rule: bool = True) -> np.ndarray:
        """``(N, 8)`` bool: the slots a job that wants ``wants`` may take (:func:`gpu_allowed`:
        :func:`gpu_model_matches` once per distinct name; with ``mixed_rule``, a MIG instance of
        a mixed node only for a wanted name that names MIG)."""
        ok = self._named(wants)
        if mixed_rule and self.mixed.any():
            mig_wants = [w for w in wants if names_mig(w)]
            ok_mig = self._named(mig_wants) if mig_wants else np.zeros_like(ok)
            ok = np.where(self.mig & self.mixed[:, None], ok_mig, ok)
        return ok


def _board_model(node: NodeState) -> str:
    """The model name that picks a node's topology template: the most common among its healthy
    GPUs (the first seen on a tie), not ``gpus[0]``, which may be an unhealthy placeholder of a GPU
    telemetry does not report; ``gpus[0].model`` when no GPU is healthy."""
    counts: dict[str, int] = {}
    for g in node.gpus:
        if g.healthy:
            counts[g.model] = counts.get(g.model, 0) + 1
    return max(counts, key=counts.__getitem__) if counts else node.gpus[0].model


class PeerPolicyPlacer:
    """Adapter from an ``envs.policies.Policy``-like object (``score``/``select``/``choose_gpus`` on an
    ``envs.core.ClusterState``) to the service's :class:`Placer`.

    The snapshot (minus reservations) becomes a ``ClusterState``; the policy's ``select`` gives the
    decision and its ``score`` ranks the alternatives. A node with more GPUs than the simulator's
    ``MAX_GPUS_PER_NODE`` (8; GCP's ``a2-megagpu-16g`` and a DGX-2 have 16, a node of many MIG
    instances more) stays in the state the policy observes with its first 8, but the policy never
    decides on it: :meth:`place` places jobs there with :class:`BestFitPlacer`, which sees all its
    GPUs. A node's GPU model id is its first GPU's, numbered per snapshot by
    :func:`snapshot_model_ids`; a GPU job's ``gpu_model`` is matched by name against each GPU
    (:func:`gpu_model_matches`), as :class:`BestFitPlacer` does: the policy sees the GPUs of other
    models as having nothing free, so on a node that mixes models (MIG instances of several
    profiles, cards named by ``gpu-card-model``) the job is placed, and held, only on GPUs of the
    models it allows. On a node of the MIG mixed strategy (:func:`mig_mixed`) a job that names
    no MIG profile sees the MIG instances as having nothing free: it gets the GPUs with MIG
    disabled, or not the node (:func:`gpu_allowed`). The observation's shape is unchanged.
    """

    def __init__(self, policy: Any, name: str, version: str | None = None) -> None:
        self.policy = policy
        self.name = name
        self.version = version
        self._lock = threading.Lock()  # policies keep per-state caches
        # TopologyBestEffort finds a node's template by its model id in data.openb.GPU_MODELS,
        # which knows only the trace vocabulary: it gets each snapshot's templates by name instead,
        # unless it was built with its own (``templates`` alone is filled in by any reset)
        self._topology = type(policy) is TopologyBestEffort and policy._templates_given is None
        # (key, state, where, nodes, policy, slot models): the node list is kept so that its id
        # cannot be reused
        self._cache: tuple[tuple[int, float], Any, dict, list, Any, _SlotModels] | None = None

    def _base_state(self, snapshot: FleetSnapshot) -> tuple[Any, dict, Any]:
        """The snapshot as a ClusterState (before reservations), cached per snapshot, plus a map
        ``(cluster, node, gpu index) -> (row, slot)`` and ``(cluster, node, -1) -> (row,)``, and
        the policy to ask on it. GPU model ids come from :func:`snapshot_model_ids`."""
        return self._base(snapshot)[:3]

    def _base(self, snapshot: FleetSnapshot) -> tuple[Any, dict, Any, _SlotModels]:
        """:meth:`_base_state` and the GPU model of each slot (:class:`_SlotModels`)."""
        key = (id(snapshot.nodes), snapshot.collected_ts if snapshot.source != "sim" else 0.0)
        cached = self._cache
        if cached is not None and cached[0] == key and cached[3] is snapshot.nodes:
            return cached[1], cached[2], cached[4], cached[5]
        nodes = snapshot.nodes
        num_gpu = np.array([min(len(x.gpus), MAX_GPUS_PER_NODE) for x in nodes], dtype=np.int64)
        model_id = snapshot_model_ids([x.gpus[0].model if x.gpus else None for x in nodes])
        cpu = np.array([x.cpu_milli or 10**9 for x in nodes], dtype=np.int64)
        mem = np.array([x.memory_mib or 10**12 for x in nodes], dtype=np.int64)
        state = ClusterState(cpu, mem, num_gpu, model_id, names=np.array([x.name for x in nodes]))
        where: dict[tuple[str, str, int], tuple[int, ...]] = {}
        slot_model = np.full((len(nodes), MAX_GPUS_PER_NODE), -1, dtype=np.int64)
        slot_mig = np.zeros((len(nodes), MAX_GPUS_PER_NODE), dtype=bool)
        mixed = np.fromiter((mig_mixed(x) for x in nodes), dtype=bool, count=len(nodes))
        model_names: dict[str, int] = {}
        for i, x in enumerate(nodes):
            where[(x.cluster, x.name, -1)] = (i,)
            for j, g in enumerate(x.gpus[:MAX_GPUS_PER_NODE]):
                state.gpu_idle[i, j] = max(0, g.free_milli) if g.healthy else 0
                where[(x.cluster, x.name, g.index)] = (i, j)
                slot_model[i, j] = model_names.setdefault(g.model, len(model_names))
                slot_mig[i, j] = is_mig(g)
            if x.cpu_milli:
                state.cpu_free[i] = x.cpu_milli_free
            if x.memory_mib:
                state.mem_free[i] = x.memory_mib_free
        policy = self.policy
        if self._topology:
            templates = [
                telemetry_template_for(_board_model(x), int(g)) if g > 0 else None
                for x, g in zip(nodes, num_gpu.tolist(), strict=True)
            ]
            policy = TopologyBestEffort(templates=templates, allocation=self.policy.allocation)
            policy.rng = self.policy.rng  # its seed's generator, as the given policy draws it
        wide = np.fromiter((len(x.gpus) > MAX_GPUS_PER_NODE for x in nodes), bool, len(nodes))
        slots = _SlotModels(tuple(model_names), slot_model, slot_mig, mixed, wide)
        self._cache = (key, state, where, nodes, policy, slots)
        return state, where, policy, slots

    def place(
        self,
        snapshot: FleetSnapshot,
        job: JobSpec,
        reservations: Reservations,
        k: int,
        allowed: Collection[tuple[str, str]] | None = None,
        alternative_gpus: bool = True,
    ) -> list[Option]:
        """:meth:`Placer.place` with the policy, except on nodes of more than 8 GPUs and for a job
        of several time-slicing replicas.

        A node with more GPUs than the policy's state holds (``MAX_GPUS_PER_NODE``, 8: the PPO
        observation and the heuristics see its first 8 only, so they would find no room there once
        those are busy, and never for a job of more than 8 GPUs) is placed on by
        :class:`BestFitPlacer`, on the same snapshot and reservations, per node: the policy decides
        among the other nodes. The policy's options come first, then BestFit's on the wide nodes
        (scores of the two are not comparable: when both give options, each option's ``score`` is
        its rank, 0, -1, ...); a job of more than 8 GPUs gets BestFit's only.

        A job with ``num_gpu`` > 1 and ``gpu_milli`` < 1000 is a pod asking ``nvidia.com/gpu: n``
        on a time-sliced node (the scheduler extender's one replica, ``1000 // r`` milli, on each
        of ``n`` GPUs; ``POST /api/v1/placements`` refuses such jobs itself). The simulator the
        policy runs on reads ``num_gpu`` > 1 as ``n`` whole GPUs (``ClusterState`` in
        ``envs/core.py`` asks each to be fully idle), so it would find no room once a replica is
        held: such a job is placed by :class:`BestFitPlacer` instead, on the same snapshot and
        reservations (every GPU of the node, not only the first 8).
        """
        if job.num_gpu > 1 and job.gpu_milli < 1000:
            return BestFitPlacer().place(
                snapshot, job, reservations, k, allowed=allowed, alternative_gpus=alternative_gpus
            )
        wide = self._base(snapshot)[3].wide if snapshot.nodes else None
        if wide is None or not wide.any():
            return self._place_by_policy(snapshot, job, reservations, k, allowed, alternative_gpus)
        nodes = [snapshot.nodes[i] for i in np.flatnonzero(wide).tolist()]
        on_wide = BestFitPlacer().place(
            FleetSnapshot(snapshot.source, nodes, snapshot.collected_ts),
            job,
            reservations,
            k,
            allowed=allowed,
            alternative_gpus=alternative_gpus,
        )
        if job.num_gpu > MAX_GPUS_PER_NODE:
            return on_wide
        own = self._place_by_policy(snapshot, job, reservations, k, allowed, alternative_gpus)
        if not own or not on_wide:
            return own or on_wide
        return [dataclasses.replace(o, score=float(-i)) for i, o in enumerate((own + on_wide)[:k])]

    def _place_by_policy(
        self,
        snapshot: FleetSnapshot,
        job: JobSpec,
        reservations: Reservations,
        k: int,
        allowed: Collection[tuple[str, str]] | None,
        alternative_gpus: bool,
    ) -> list[Option]:
        """:meth:`place` through the policy on the simulator's ``ClusterState``.

        Each option's ``score`` is :func:`policy_scores`' value for its node, whatever ``k``; a
        CPU-only job ranks every feasible node and gets :func:`cpu_nodes_first`'s order."""
        nodes = snapshot.nodes
        n = len(nodes)
        if n == 0:
            return []
        base, where, policy, slots = self._base(snapshot)
        state = _after_reservations(base, where, reservations)
        mask_model = ANY_GPU_MODEL
        gpu_job = job.num_gpu > 0
        # a CPU-only job takes no GPU, so no GPU model binds it (as BestFitPlacer and the extender
        # read it): only a GPU job's model narrows the nodes
        wants = parse_gpu_models(job.gpu_model) if gpu_job else ()
        matches = None
        if wants or (gpu_job and slots.mixed.any()):
            # by name, per GPU: the other models' GPUs show nothing free to the policy, so that
            # neither its choice nor its GPUs (the hold) fall on them (a MIG node of the mixed
            # strategy has instances of several profiles, each its own model, and gives a job
            # that names no MIG profile only its GPUs with MIG disabled: gpu_allowed)
            ok = slots.matching(wants, mixed_rule=gpu_job)
            state.gpu_idle[~ok] = 0
            matches = ok.any(axis=1)
            mask_model = 0
            for m in set(state.model_id[matches].tolist()):
                mask_model |= 1 << m
        pod = Pod(
            job.cpu_milli,
            job.memory_mib,
            job.num_gpu,
            job.gpu_milli if job.num_gpu else 0,
            mask_model,
        )
        mask = state.feasible(pod) if mask_model else np.zeros(n, dtype=bool)
        mask &= ~slots.wide  # BestFit's (place): the state holds only their first 8 GPUs
        if matches is not None:  # by name: a model id may be shared (snapshot_model_ids)
            mask &= matches
        if job.cluster is not None:
            mask &= np.array([x.cluster == job.cluster for x in nodes])
        if allowed is not None:
            mask &= np.fromiter(
                (node_allowed(allowed, x.cluster, x.name) for x in nodes), dtype=bool, count=n
            )
        if not mask.any():
            return []
        # a CPU-only job: every feasible node, so that nodes without GPUs can come first
        many = k if gpu_job else n
        with self._lock:
            if hasattr(policy, "reset"):
                policy.reset(state)
            node, gpus = policy.select(state, pod, mask)
            scores = policy_scores(policy, state, pod, mask)
            picks = [int(node)] if node >= 0 else []
            order = np.argsort(-np.where(mask, scores, -np.inf), kind="stable")
            picks += [int(i) for i in order[: many + 1] if mask[i] and int(i) != node][: many - 1]
            out = []
            for i in picks:
                if i == node:
                    g = gpus
                else:
                    g = state.choose_gpus(pod, i) if alternative_gpus and gpu_job else ()
                g = self._linked(state, pod, nodes[i], i, g)
                idx = [nodes[i].gpus[int(j)].index for j in np.asarray(g).tolist()]
                out.append(Option(nodes[i].cluster, nodes[i].name, tuple(idx), float(scores[i])))
        return out if gpu_job else cpu_nodes_first(out, nodes)[:k]

    def _linked(
        self, state: ClusterState, pod: Pod, node: NodeState, row: int, gpus: Any
    ) -> np.ndarray:
        """``gpus`` (slots of ``row``) of a job of several whole GPUs replaced by the best-linked
        idle GPUs of the node (:func:`topology_gpus`): the policies' scores (FGD's fragmentation,
        BestFit's fit) do not depend on which idle GPUs such a job takes, so their pick follows
        slot order, across CPU sockets and NVLink islands. TopologyBestEffort's own pick is kept
        (it chooses by links, with its own allocation rule)."""
        if pod.num_gpu < 2 or len(gpus) == 0 or type(self.policy) is TopologyBestEffort:
            return gpus
        idle = np.flatnonzero(state.gpu_idle[row] >= GPU_MILLI).tolist()
        linked = topology_gpus(node, idle, pod.num_gpu)
        return np.asarray(gpus) if linked is None else np.asarray(linked, dtype=np.int64)


def _after_reservations(
    base: ClusterState,
    where: dict[tuple[str, str, int], tuple[int, ...]],
    reservations: Reservations,
) -> ClusterState:
    """A copy of ``base`` less the GPU shares, CPU and memory that ``reservations`` hold
    (``where``: :meth:`PeerPolicyPlacer._base_state`'s map to rows and slots)."""
    state = base.copy()
    for (c, name, g), milli in reservations.gpu_items():
        slot = where.get((c, name, g))
        if slot is not None:
            state.gpu_idle[slot] = max(0, int(state.gpu_idle[slot]) - milli)
    for (c, name), milli in reservations.cpu_items():
        i = where.get((c, name, -1))
        if i is not None:
            state.cpu_free[i[0]] -= milli
    for (c, name), milli in reservations.mem_items():
        i = where.get((c, name, -1))
        if i is not None:
            state.mem_free[i[0]] -= milli
    return state


def policy_scores(policy: Any, state: ClusterState, pod: Pod, mask: np.ndarray) -> np.ndarray:
    """``(N,)`` float64: the policy's score of each node (higher is better; meaningful on ``mask``
    only), the ``score`` of :class:`PeerPolicyPlacer`'s options.

    A policy that only chooses (``score`` raises ``NotImplementedError``: the PPO agent picks among
    its candidates) gets BestFit's 0..100 scores
    (:func:`~fleetmind.envs.policies.scores.bestfit_scores`), which order its alternatives; its own
    choice may then score below one of them."""
    try:
        return np.asarray(policy.score(state, pod, mask), dtype=np.float64)
    except NotImplementedError:
        return np.asarray(bestfit_scores(state, pod, mask), dtype=np.float64)


def cpu_nodes_first(options: Sequence[Option], nodes: Iterable[NodeState]) -> list[Option]:
    """``options`` of a CPU-only job (``num_gpu`` 0) with those on nodes without GPUs first, each
    kind in its given order (a stable sort): a CPU-only job should not take a GPU node's CPU and
    memory while a node without GPUs has room. ``nodes``: the nodes the options name (a node is a
    GPU node when telemetry shows it any GPU, healthy or not, or accelerators of another vendor:
    :attr:`~fleetmind.serving.telemetry.base.NodeState.accelerator_node`; an AMD, Gaudi or TPU
    node is no CPU node for being without NVIDIA GPUs).

    The one rule for both ways in: ``POST /api/v1/placements`` (:class:`BestFitPlacer`,
    :class:`PeerPolicyPlacer`) and the scheduler extender
    (:func:`fleetmind.serving.scheduler.extender.decide`), so that both put the job on the same
    node."""
    gpu = {(x.cluster, x.name) for x in nodes if x.accelerator_node}
    return sorted(options, key=lambda o: (o.cluster, o.node) in gpu)


def free_gpus_all(node: NodeState, res: Reservations) -> list[tuple[int, int]]:
    """``[(gpu index, free milli)]`` of all GPUs (unhealthy ones report 0 free)."""
    return [
        (
            g.index,
            (g.free_milli - res.gpu_used(node.cluster, node.name, g.index)) if g.healthy else 0,
        )
        for g in node.gpus
    ]


def peer_heuristic(name: str) -> PeerPolicyPlacer | None:
    """The ``envs.policies`` heuristic ``name`` wrapped as a Placer; None for an unknown name."""
    try:
        policy = make_policy(name)
        if getattr(policy, "name", "") == "FGD":
            # FGD needs its typical pods; the service has no trace: use the released model's
            typical = released_typical_pods()
            if typical is None:
                return None
            policy = make_policy(name, typical=typical)
    except Exception:
        return None
    return PeerPolicyPlacer(policy, name=f"heuristic:{getattr(policy, 'name', name)}")


def released_typical_pods() -> Any:
    """FGD's typical pods stored with the released placement model (``None`` when unreadable)."""
    try:
        meta = json.loads((MODELS_DIR / "placement" / "metadata.json").read_text())
        return typical_from_json(meta["typical_pods"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _mixed_mig_hint(nodes: Sequence[NodeState], wants: Sequence[str]) -> str:
    """For :func:`why_no_fit`: a note on the healthy MIG instances of mixed-strategy nodes that a
    job naming no MIG profile may not take (:func:`gpu_allowed`), or ``""``."""
    if any(names_mig(w) for w in wants):
        return ""
    held = sum(
        is_mig(g) and g.healthy and gpu_model_matches(g.model, wants)
        for x in nodes
        if mig_mixed(x)
        for g in x.gpus
    )
    if not held:
        return ""
    return (
        f" ({held} MIG instance(s) on nodes of the MIG mixed strategy are "
        "nvidia.com/mig-<profile> resources: name a profile, e.g. gpu_model 'MIG 1g.10gb')"
    )


def _unhealthy_hint(nodes: Sequence[NodeState], allowed: dict[int, set[int]]) -> str:
    """For :func:`why_no_fit`: how many of the job's GPUs (``allowed``: indices by ``id(node)``)
    are placeholders without a DCGM reading, and how many unhealthy (:data:`GPU_CAUSES`), or
    ``""``."""
    gpus = [g for n in nodes for g in n.gpus if g.index in allowed[id(n)] and not g.healthy]
    missing = sum(g.missing for g in gpus)
    parts = [f"{missing} GPU(s) {GPU_CAUSES['no_reading']}"] if missing else []
    if len(gpus) > missing:
        parts.append(f"{len(gpus) - missing} GPU(s) {GPU_CAUSES['unhealthy']}")
    return f" ({'; '.join(parts)})" if parts else ""


def _rest_cause(
    nodes: Sequence[NodeState], allowed: dict[int, set[int]], total: int, request: int
) -> str:
    """For :func:`why_no_fit`: what takes the GPU that is not free (:data:`GPU_CAUSES`), from
    the healthy ``allowed`` GPUs' free milli as telemetry reads it against ``total`` (milli free
    after holds) and the job's ``request`` (milli): no hold on them, ``busy``; telemetry alone
    reading room for the request, ``held``; else ``busy_or_held``."""
    read = sum(
        max(g.free_milli, 0)
        for n in nodes
        for g in n.gpus
        if g.healthy and g.index in allowed[id(n)]
    )
    cause = "busy" if read <= total else "held" if read >= request else "busy_or_held"
    return f" (the rest {GPU_CAUSES[cause]})"


def why_no_fit(snapshot: FleetSnapshot, job: JobSpec, reservations: Reservations) -> str:
    """Why no node can hold ``job``, in one sentence for the 409 answer.

    Reads the snapshot as :class:`BestFitPlacer` does (healthy GPUs, free capacity after
    reservations, CPU and memory only on nodes that report them) and names the first of these that
    applies, with the figures behind it:

    * the cluster or GPU model asked for has no node or GPU;
    * no node has as many healthy (matching) GPUs as the job asks for, free or not;
    * ``host``: some nodes have GPU room for the job but lack its CPU or memory (the same cause as
      ``envs.failure_causes``);
    * GPU room is split: enough free GPU in all, but no node has the GPUs the job needs;
    * too little free GPU on the matching GPUs;
    * (CPU-only jobs) no node has the CPU and memory.

    A policy that searches differently (e.g. the PPO placer's candidate set) may miss a node this
    view finds; the answer then says so rather than guess.
    """
    nodes = [n for n in snapshot.nodes if job.cluster is None or n.cluster == job.cluster]
    if not nodes:
        if job.cluster is None:
            return "the fleet snapshot has no nodes"
        known = sorted({n.cluster for n in snapshot.nodes})
        return f"cluster {job.cluster!r} has no nodes (clusters: {', '.join(known) or 'none'})"

    def cpu_free(n: NodeState) -> int | None:
        if not n.cpu_milli:
            return None  # the source does not report CPU: not a constraint
        return n.cpu_milli_free - reservations.cpu_used(n.cluster, n.name)

    def mem_free(n: NodeState) -> int | None:
        if not n.memory_mib:
            return None
        return n.memory_mib_free - reservations.mem_used(n.cluster, n.name)

    def host_ok(n: NodeState) -> tuple[bool, bool]:
        c, m = cpu_free(n), mem_free(n)
        return (c is None or c >= job.cpu_milli), (m is None or m >= job.memory_mib)

    def host_summary(group: list[NodeState]) -> str:
        cpus = [c for n in group if (c := cpu_free(n)) is not None]
        mems = [m for n in group if (m := mem_free(n)) is not None]
        parts = []
        if cpus:
            parts.append(f"at most {max(cpus)} mCPU free (job: {job.cpu_milli})")
        if mems:
            parts.append(f"at most {max(mems)} MiB free (job: {job.memory_mib})")
        return " and ".join(parts)

    nowhere = (
        "can hold it by the free capacity the service sees, but the serving policy placed it"
        " nowhere"
    )
    if job.num_gpu == 0:  # no GPU, so no GPU model: ``gpu_model`` binds GPU jobs only
        fit = sum(all(host_ok(n)) for n in nodes)
        if fit:
            return f"{fit} node(s) {nowhere}"
        return f"no node has both the CPU and the memory: {host_summary(nodes)}"
    wants = parse_gpu_models(job.gpu_model)
    allowed = {
        id(n): {g.index for g in n.gpus if gpu_allowed(g, wants, mig_mixed(n))} for n in nodes
    }
    free = {id(n): [f for i, f in free_gpus(n, reservations) if i in allowed[id(n)]] for n in nodes}
    if wants and not any(gpu_model_matches(g.model, wants) for n in nodes for g in n.gpus):
        models = sorted({g.model for n in nodes for g in n.gpus})
        return (
            f"no GPU model matches {' or '.join(map(repr, wants))} (models here: "
            f"{', '.join(models) or 'none'})"
        )
    label = f"{' or '.join(map(repr, wants))} GPUs" if wants else "GPUs"
    if (most := max(len(fs) for fs in free.values())) < job.num_gpu:
        n = job.num_gpu
        mig = _mixed_mig_hint(nodes, wants) + _unhealthy_hint(nodes, allowed)
        return f"no node has {n} healthy {label}, free or not: the most on one node is {most}{mig}"
    need = max(job.gpu_milli, 0)
    room = [n for n in nodes if sum(f >= need for f in free[id(n)]) >= job.num_gpu]
    if room:
        lack = [host_ok(n) for n in room]
        no_cpu = sum(not c for c, _ in lack)
        no_mem = sum(not m for _, m in lack)
        if no_cpu or no_mem:
            return (
                f"{len(room)} node(s) have GPU room for it but not the host resources "
                f"({no_cpu} lack CPU, {no_mem} lack memory; among them {host_summary(room)})"
            )
        return f"{len(room)} node(s) {nowhere}"
    total = sum(sum(max(f, 0) for f in fs) for fs in free.values())
    request = job.num_gpu * need
    if total >= request:
        largest = max((max(fs) for fs in free.values() if fs), default=0)
        most = max(sum(f >= need for f in fs) for fs in free.values())
        return (
            f"free GPU is split: {total} milli free on healthy {label} in all, but no node has "
            f"{job.num_gpu} GPU(s) with {need} milli free each (largest free share on one GPU: "
            f"{largest} milli; most GPUs with {need} milli free on one node: {most})"
        )
    why = f"not enough free GPU: {total} milli free on healthy {label}, the job needs {request}"
    return why + _rest_cause(nodes, allowed, total, request)
