"""The per-system GAT of ``fleetmind rca fit``: node features from metric alerts, artifact, analyzer.

A fitted model belongs to one system (one call graph). Its input is the alerts the metric detector of
:mod:`fleetmind.data.petshop` raises (``labels.service``, ``labels.metric``, annotations ``z_score``, ``delta``,
``baseline``, ``startsAt``), turned into per-node features that say nothing about node or metric
names: per metric role (:data:`fleetmind.data.metric_roles.ROLES`, from the metric's name) six columns

==============  ======================================================================================
column          meaning (0 when the node has no alert of that role)
==============  ======================================================================================
``flag``        1 if the node alerts on a metric of this role
``z_rel``       ``log1p(z) / max log1p(z)`` over the incident's alerts (relative strength)
``z_abs``       ``log1p(z) / 6`` clipped to 2
``delta_rel``   ``|delta| / max |delta|`` over the incident's alerts of this role (which change is
                biggest: latency adds up along call chains, so the root's is rarely the largest)
``change``      ``sign(delta) * log1p(|delta| / |baseline|) / 3`` clipped to [-2, 2]
``onset``       ``1 -`` dense rank of the alert's ``startsAt`` among the incident's distinct start
                times scaled to [0, 1] (1 = among the first alerts)
==============  ======================================================================================

then ``observed:<role>`` (the node has a scored normal-period metric of this role, from the fit), and
``any_alert``, ``earliest``, ``log1p`` in/out degree, share of callers and of callees that alert.
The network is :class:`fleetmind.rca.model.GATRanker` (relation-aware GATv2, both edge directions).
"""

from __future__ import annotations

import hashlib
import io
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from fleetmind.data.errors import FleetMindError
from fleetmind.data.graph import DependencyGraph
from fleetmind.data.metric_roles import ROLES, RoleMap
from fleetmind.folders import write_folder_whole
from fleetmind.provenance import artifact_provenance
from fleetmind.rca.base import BaseAnalyzer, RankedCause, RCAResult, torch_threads
from fleetmind.rca.features.times import parse_time
from fleetmind.rca.gat_analyzer import _first_mismatch

FIT_FORMAT = "fleetmind-rca-fit"
FIT_FORMAT_VERSION = 2
"""``format_version`` of a fitted model's ``config.json``; a model of another version is refused
(refit with ``rca fit``). Raised whenever what a model learned changes meaning while its feature
names stay. 2 since 2026-12-06, when metric roles moved (``http_requests_total{code="500"}`` from
traffic to errors), which changes the ``observed`` roles stored at fit time and each alert's role;
1 before, which also covers models fitted before the petshop detector and synthetic incidents of
2026-12-02."""
ROLE_COLUMNS: tuple[str, ...] = ("flag", "z_rel", "z_abs", "delta_rel", "change", "onset")
NODE_COLUMNS: tuple[str, ...] = (
    "any_alert",
    "earliest",
    "deg_in",
    "deg_out",
    "callers_alerting",
    "callees_alerting",
)
FEATURE_NAMES: tuple[str, ...] = (
    tuple(f"{r}:{c}" for r in ROLES for c in ROLE_COLUMNS)
    + tuple(f"observed:{r}" for r in ROLES)
    + NODE_COLUMNS
)
NUM_FIT_FEATURES = len(FEATURE_NAMES)


class FitModelError(FleetMindError):
    """A fitted-model artifact is missing, corrupt, or made for another format."""


def _f(x: Any) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return math.nan
    return v


def _start(a: Mapping[str, Any]) -> float:
    t = parse_time(a.get("startsAt"))
    return float(t) if t is not None else 0.0


def fit_features(
    graph: DependencyGraph,
    alerts: Sequence[Mapping[str, Any]],
    observed: np.ndarray,
    roles: RoleMap | None = None,
) -> np.ndarray:
    """Per-node features of one incident (see the module table).

    Args:
        graph: the system's graph (``|V|`` nodes).
        alerts: Alertmanager v4 alerts; an alert maps to a node by its ``service`` label when that
            names a node, else by :meth:`DependencyGraph.node_for_alert`; unmapped alerts are ignored.
        observed: ``(|V|, len(ROLES))`` bool, which roles each node has normal-period metrics for.
        roles: the system's role map (default: roles detected from metric names).

    Returns:
        float32 ``(|V|, NUM_FIT_FEATURES)``.
    """
    n, nr, nc = graph.num_nodes, len(ROLES), len(ROLE_COLUMNS)
    roles = roles or RoleMap()
    x = np.zeros((n, nr * nc + nr + len(NODE_COLUMNS)), dtype=np.float32)
    parsed = []
    for a in alerts:
        lab = a.get("labels") or {}
        node = lab.get("service")
        i = graph.index.get(str(node)) if node is not None else None
        if i is None:
            nid = graph.node_for_alert(lab)
            i = graph.index.get(nid) if nid is not None else None
        if i is None:
            continue
        ann = a.get("annotations") or {}
        role = roles.model_role(str(lab.get("metric") or lab.get("alertname") or ""))
        z = _f(ann.get("z_score"))
        z = 5.0 if not math.isfinite(z) or z <= 0 else z
        delta = _f(ann.get("delta"))
        base = _f(ann.get("baseline"))
        parsed.append((i, ROLES.index(role), z, delta, base, _start(a)))
    if parsed:
        zmax = max(math.log1p(p[2]) for p in parsed)
        dmax = [0.0] * nr
        for _, r, _, d, _, _ in parsed:
            if math.isfinite(d):
                dmax[r] = max(dmax[r], abs(d))
        starts = sorted({p[5] for p in parsed})
        rank = {
            t: (k / (len(starts) - 1) if len(starts) > 1 else 0.0) for k, t in enumerate(starts)
        }
        for i, r, z, d, b, t in parsed:
            o = r * nc
            lz = math.log1p(z)
            x[i, o] = 1.0
            x[i, o + 1] = max(x[i, o + 1], lz / zmax if zmax > 0 else 1.0)
            x[i, o + 2] = max(x[i, o + 2], min(lz / 6.0, 2.0))
            if math.isfinite(d):
                x[i, o + 3] = max(x[i, o + 3], abs(d) / dmax[r] if dmax[r] > 0 else 0.0)
                rel = abs(d) / max(abs(b), 1e-9) if math.isfinite(b) else 0.0
                ch = math.copysign(min(math.log1p(rel) / 3.0, 2.0), d)
                if abs(ch) > abs(x[i, o + 4]):
                    x[i, o + 4] = ch
            on = 1.0 - rank[t]  # stored so that earlier = larger; min over a node's alerts
            x[i, o + 5] = max(x[i, o + 5], on)
        first = starts[0]
        earliest = {i for i, _, _, _, _, t in parsed if t == first}
    else:
        earliest = set()
    base = nr * nc
    x[:, base : base + nr] = observed[:n].astype(np.float32)
    k = base + nr
    alerting = x[:, 0:base:nc].max(axis=1) > 0
    x[:, k] = alerting
    for i in earliest:
        x[i, k + 1] = 1.0
    src, dst = graph.edge_index
    deg_out = np.bincount(src, minlength=n)
    deg_in = np.bincount(dst, minlength=n)
    x[:, k + 2] = np.log1p(deg_in)
    x[:, k + 3] = np.log1p(deg_out)
    al = alerting.astype(np.float32)
    callers_al = np.bincount(dst, weights=al[src], minlength=n)
    callees_al = np.bincount(src, weights=al[dst], minlength=n)
    x[:, k + 4] = np.where(deg_in > 0, callers_al / np.maximum(deg_in, 1), 0.0)
    x[:, k + 5] = np.where(deg_out > 0, callees_al / np.maximum(deg_out, 1), 0.0)
    return x


# ---------------------------------------------------------------------------- artifact
def save_fit_artifact(
    model: Any,
    out_dir: str | Path,
    graph: DependencyGraph,
    observed: np.ndarray,
    meta: Mapping[str, Any],
) -> Path:
    """Write a fitted model folder: ``model.pt`` (state dict), ``config.json`` (format, network
    config, the system's nodes and their observed roles, fit metadata), both at once or neither
    (:func:`fleetmind.folders.write_folder_whole`; an earlier model there is replaced).
    Returns the folder."""
    import torch

    out = Path(out_dir)
    buf = io.BytesIO()
    torch.save({k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}, buf)
    blob = buf.getvalue()
    cfg = {
        "format": FIT_FORMAT,
        "format_version": FIT_FORMAT_VERSION,
        "version": "gat_fit-" + hashlib.sha256(blob).hexdigest()[:10],
        "model": model.config.to_dict(),
        "features": list(FEATURE_NAMES),
        "graph": graph.name,
        "nodes": [n.id for n in graph.nodes],
        "observed": {
            graph.nodes[i].id: [r for r, o in zip(ROLES, observed[i], strict=True) if o]
            for i in range(graph.num_nodes)
        },
        **dict(meta),
        "provenance": artifact_provenance(),
    }
    # both files or neither: a failed write (a full disk) leaves an earlier model as it was
    write_folder_whole(out, {"model.pt": blob, "config.json": json.dumps(cfg, indent=2) + "\n"})
    return out


def fit_artifact_problem(ref: str | Path | None) -> str | None:
    """Why ``ref`` is not a local folder holding a fitted-model artifact, or ``None`` when it is.

    Returns:
        A short reason (``"no such file or folder"``, ``"no config.json in it"``, ``"its
        config.json is format 'fleetmind-rca-gat', not 'fleetmind-rca-fit'"``, ...), or ``None``.
    """
    if ref is None:
        return "no model given"
    if "://" in str(ref) or str(ref).startswith(("models:/", "runs:/")):
        return "an MLflow URI; a fitted model is a local folder"
    p = Path(ref)
    if p.is_file() and p.name == "config.json":
        p = p.parent
    if not p.exists():
        return "no such file or folder"
    if not p.is_dir():
        return "a file, not a model folder"
    try:
        meta = json.loads((p / "config.json").read_text())
    except FileNotFoundError:
        return "no config.json in it"
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        return f"its config.json cannot be read ({type(err).__name__})"
    fmt = meta.get("format") if isinstance(meta, dict) else None
    if fmt != FIT_FORMAT:
        return f"its config.json is format {fmt!r}, not {FIT_FORMAT!r}"
    return None


def is_fit_artifact(ref: str | Path | None) -> bool:
    """Whether ``ref`` is a local folder holding a fitted-model artifact."""
    return fit_artifact_problem(ref) is None


def load_fit_model(ref: str | Path) -> tuple[Any, dict[str, Any]]:
    """Load ``(GATRanker in eval mode, config.json dict)`` of a fitted-model folder.

    Raises:
        FitModelError: missing, corrupt, or another format.
    """
    import torch

    from fleetmind.rca.model import GATConfig, GATRanker

    p = Path(ref)
    if p.is_file() and p.name == "config.json":
        p = p.parent
    try:
        meta = json.loads((p / "config.json").read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise FitModelError(f"{p}: not a fitted RCA model ({err})") from None
    if not isinstance(meta, dict) or meta.get("format") != FIT_FORMAT:
        raise FitModelError(f"{p / 'config.json'} is not a {FIT_FORMAT} artifact")
    version = meta.get("format_version")
    if version != FIT_FORMAT_VERSION:
        raise FitModelError(
            f"{p}: made by another FleetMind version (fit format version {version!r}, this one"
            f" reads {FIT_FORMAT_VERSION}); refit with `rca fit`"
        )
    if meta.get("features") != list(FEATURE_NAMES):
        raise FitModelError(
            f"{p}: its feature list differs from this version's; refit with `rca fit`"
        )
    problem = _meta_problem(meta)
    if problem is not None:
        raise FitModelError(f"{p / 'config.json'}: {problem}; refit with `rca fit`")
    try:
        # random initial weights, overwritten below: keep the caller's torch random sequence
        with torch.random.fork_rng(devices=[]):
            model = GATRanker(GATConfig.from_dict(dict(meta["model"])))
        state = torch.load(p / "model.pt", map_location="cpu", weights_only=True)
        model.load_state_dict(state, strict=True)
    except Exception as err:  # torch raises many kinds on bad bytes
        # torch's load_state_dict error is one line per mismatched tensor (6 kB): keep the first
        first = _first_mismatch(str(err))
        raise FitModelError(f"{p}: cannot load the model ({type(err).__name__}: {first})") from None
    model.eval()
    return model, meta


def _meta_problem(meta: Mapping[str, Any]) -> str | None:
    """What is wrong with the types of a fitted model's ``config.json`` (``nodes``: a list of node
    ids, ``observed``: ``{node id: [role, ...]}``, ``roles``: ``{metric: role}``, ``model``: an
    object), or ``None``: each would otherwise fail every ranking, not the load."""
    nodes = meta.get("nodes", [])
    if not isinstance(nodes, list) or not all(isinstance(n, str) for n in nodes):
        return "'nodes' is not a list of node ids"
    observed = meta.get("observed", {})
    if not isinstance(observed, dict) or not all(
        isinstance(v, list) and all(isinstance(r, str) for r in v) for v in observed.values()
    ):
        return "'observed' is not an object of node id -> list of roles"
    roles = meta.get("roles") or {}
    if not isinstance(roles, dict) or not all(isinstance(r, str) for r in roles.values()):
        return "'roles' is not an object of metric -> role"
    try:
        RoleMap(roles)
    except ValueError as err:
        return f"'roles': {str(err).splitlines()[0]}"
    if not isinstance(meta.get("model"), dict):
        return "'model' is not an object"
    return None


def fit_node_overlap(
    meta: Mapping[str, Any], node_ids: Sequence[str], where: str
) -> tuple[str | None, str]:
    """How many of a graph's nodes a fitted model knows (its ``config.json`` ``nodes``).

    Args:
        meta: the model's ``config.json``.
        node_ids: the ids of the graph it is to rank.
        where: names that graph in the message (a scenario folder, a served graph's name).

    Returns:
        ``(level, message)``: level ``"none"`` when no graph node is a node of the fit (a model of
        another system), ``"few"`` when fewer than half are (the others count as unmonitored),
        else ``None`` with an empty message.
    """
    known = set(meta.get("nodes") or [])
    hits = sum(1 for n in node_ids if n in known)
    fitted_on = meta.get("graph") or "another system"
    if hits == 0 and node_ids:
        return "none", (
            f"fitted on {fitted_on!r}, whose {len(known)} nodes include none of the "
            f"{len(node_ids)} graph nodes of {where}; fit a model on this system with "
            "'fleetmind rca fit'"
        )
    if 2 * hits < len(node_ids):
        return "few", (
            f"only {hits} of the {len(node_ids)} graph nodes of {where} are nodes it was fitted "
            f"on ({fitted_on!r}); the others count as unmonitored"
        )
    return None, ""


def observed_matrix(graph: DependencyGraph, observed: Mapping[str, Sequence[str]]) -> np.ndarray:
    """``(|V|, len(ROLES))`` bool from the artifact's ``{node id: [roles]}`` (unknown nodes: none)."""
    out = np.zeros((graph.num_nodes, len(ROLES)), dtype=bool)
    for node, roles in observed.items():
        i = graph.index.get(node)
        if i is not None:
            for r in roles:
                if r in ROLES:
                    out[i, ROLES.index(r)] = True
    return out


def model_inputs(graph: DependencyGraph) -> tuple[Any, Any]:
    """``(edge_index, edge_type)`` tensors of ``graph`` for :class:`~fleetmind.rca.model.GATRanker`."""
    import torch

    return (
        torch.as_tensor(graph.edge_index, dtype=torch.long),
        torch.as_tensor(graph.edge_type, dtype=torch.long),
    )


def ranked_causes(
    graph: DependencyGraph, order_by: np.ndarray, scores: np.ndarray, top_k: int | None = None
) -> list[RankedCause]:
    """The nodes of ``graph`` as causes, highest ``order_by`` first (a stable sort: ties keep graph
    order), each scored ``scores[i]``; the first ``top_k`` only (all when ``None``).

    Args:
        order_by, scores: shape ``(|V|,)``, in ``graph.nodes`` order (logits, and the same logits or
            their softmax).
    """
    order = np.argsort(-order_by, kind="stable")
    if top_k is not None:
        order = order[:top_k]
    return [
        RankedCause(
            node=graph.nodes[i].id,
            kind=graph.nodes[i].kind,
            cluster=graph.nodes[i].cluster,
            score=float(scores[i]),
            path=(graph.nodes[i].id,),
        )
        for i in order
    ]


class FittedGATAnalyzer(BaseAnalyzer):
    """Root-cause ranking with a GAT fitted to one system by ``fleetmind rca fit``.

    Construct with :meth:`load`. Ranks every node of the graph it is given; nodes the fit did not know
    count as having no metrics.
    """

    name: ClassVar[str] = "gat_fit"

    def __init__(self, model: Any, meta: Mapping[str, Any]) -> None:
        super().__init__(None)
        self.model = model
        self.meta = dict(meta)
        # the graph itself, not its id(): a new graph may get a freed graph's address
        self._cache: tuple[DependencyGraph, Any, Any, np.ndarray] | None = None
        self.roles = RoleMap(self.meta.get("roles") or {})

    @classmethod
    def load(cls, ref: str | Path) -> FittedGATAnalyzer:
        model, meta = load_fit_model(ref)
        return cls(model, meta)

    @property
    def version(self) -> str | None:
        return str(self.meta.get("version"))

    def scores(self, graph: DependencyGraph, alerts: Sequence[Mapping[str, Any]]) -> np.ndarray:
        """Root-cause logits, float ``(|V|,)``."""
        import torch

        cached = self._cache  # one read: another thread may swap it meanwhile
        if cached is None or cached[0] is not graph:
            ei, et = model_inputs(graph)
            cached = (graph, ei, et, observed_matrix(graph, self.meta.get("observed", {})))
            self._cache = cached
        _, ei, et, obs = cached
        x = torch.from_numpy(fit_features(graph, alerts, obs, self.roles))
        # one small graph: one thread is fastest and spares the machine
        with torch_threads(1), torch.no_grad():
            logits, _, _ = self.model(x, ei, et)
        return logits.numpy().astype(float)

    def find_root_causes(
        self, graph: DependencyGraph, alerts: Sequence[dict[str, Any]], top_k: int | None = None
    ) -> RCAResult:
        s = self.scores(graph, alerts)
        causes = ranked_causes(graph, s, s, top_k)
        return RCAResult(causes=causes, method=self.name, model_version=self.version)
