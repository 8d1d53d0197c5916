"""The GAT root-cause analyzer used by the CLI, the service, the PetShop benchmark and the demo.

An artifact is a folder with two files:

* ``config.json``: ``{"format": "fleetmind-rca-gat", "format_version": 1, "version": ...,
  "model": <GATConfig dict>, "metrics": {...}, "data": {...}, "provenance": {"commit",
  "code_modified", "created", "versions"}}`` (provenance: :func:`fleetmind.provenance.artifact_provenance`)
* ``model.pt``: the ``GATRanker`` state dict (``torch.save``; loaded with ``weights_only=True``).

:meth:`GATAnalyzer.load` accepts a local artifact folder (or its ``config.json``), an MLflow model URI
(``models:/fleetmind-rca@champion``, ``runs:/<id>/model``, ``mlflow-artifacts:/...``; needs MLflow and
the tracking server; downloaded into a temporary folder removed once loaded), or ``None`` for the
released artifact in ``models/rca/``.

Example:
    >>> gat = GATAnalyzer.load(None)                                    # doctest: +SKIP
    >>> res = gat.find_root_causes(graph, alerts, top_k=3)              # doctest: +SKIP
    >>> res.causes[0].node, res.causes[0].fault_type, res.causes[0].path  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import tempfile
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from fleetmind.data.errors import DataError, ModelLoadError
from fleetmind.data.files import read_json
from fleetmind.data.graph import DependencyGraph
from fleetmind.data.mlflow_store import bounded_requests, download, is_mlflow_uri, reason, safe_uri
from fleetmind.data.paths import MODELS_DIR
from fleetmind.data.rca_gen.faults import FAULT_TYPES, plausible_fault_types
from fleetmind.provenance import artifact_provenance
from fleetmind.rca.base import BaseAnalyzer, RankedCause, RCAResult, torch_threads
from fleetmind.rca.crop import crop_incident
from fleetmind.rca.explain import attention_paths
from fleetmind.rca.features.columnar import incident_crop
from fleetmind.rca.features.layout import FEATURE_VERSION
from fleetmind.rca.features.neighbours import neighbour_inputs
from fleetmind.rca.parsimony import LONE_ALERT_MARGIN, lone_alert_cap

log = logging.getLogger("fleetmind.rca")

ARTIFACT_FORMAT = "fleetmind-rca-gat"
ARTIFACT_FORMAT_VERSION = 1
RELEASED_DIR = MODELS_DIR / "rca"
"""Folder of the released artifact (used when no model reference is given)."""
UNKNOWN_FAULT = "unknown"
"""Fault type of a cause whose node kind allows none of the model's fault types."""


def calibration_temperature(meta: Mapping[str, Any]) -> float:
    """The softmax temperature stored in an artifact's ``config.json`` (1.0 when uncalibrated).

    ``meta["calibration"]["temperature"]`` is written by ``fleetmind rca calibrate``
    (:mod:`fleetmind.rca.calibration`): scores are ``softmax(logits / T)`` over the candidate
    subgraph, so the top cause's score is a calibrated probability that it is the root.

    Raises:
        ModelLoadError: the stored temperature is not a finite positive number.
    """
    cal = meta.get("calibration")
    if cal is None:
        return 1.0
    t = cal.get("temperature") if isinstance(cal, dict) else None
    if isinstance(t, bool) or not isinstance(t, int | float) or not (0.01 <= float(t) <= 100.0):
        raise ModelLoadError(
            f"config.json: calibration.temperature must be a number in [0.01, 100], got {t!r}"
        )
    return float(t)


@dataclass
class GATAnalyzerConfig:
    """Settings of :class:`GATAnalyzer`.

    Attributes:
        model: artifact reference (local folder, MLflow URI, or ``None`` for the released artifact).
        explain_top: causes (best first) that get a propagation path and a fault type; the rest get
            ``path=(node,)`` and ``fault_type=None`` (paths cost a Dijkstra run each).
        num_threads: torch intra-op threads during inference (``None``: leave torch's setting). One
            thread is the fastest for single incidents (small candidate subgraphs) and avoids
            oversubscribing a shared machine; the previous setting is restored after each call.
        mask_fault_types: type each cause only with fault types that the catalog
            (:func:`fleetmind.data.rca_gen.faults.plausible_fault_types`) allows at its node's kind
            and role, ``unknown`` when none fits (``False``: the fault head's best type of the
            catalog, whatever the node, for ablations; a class outside the catalog is never
            given either way).
        lone_alert_margin: keep every quiet candidate this many logits below the only alerting
            node of its connected group of candidates (:mod:`fleetmind.rca.parsimony`: a lone
            alert is its own node's fault before a silent neighbour's); ``None`` leaves the
            model's ranking as it is (for ablations).
    """

    model: str | None = None
    explain_top: int = 10
    num_threads: int | None = 1
    mask_fault_types: bool = True
    lone_alert_margin: float | None = LONE_ALERT_MARGIN


def weights_version(blob: bytes) -> str:
    """The version of a GAT whose ``model.pt`` holds ``blob``: ``gat-`` plus the first 10 hex
    digits of its SHA-256 (what :func:`save_artifact` writes into ``config.json``)."""
    return "gat-" + hashlib.sha256(blob).hexdigest()[:10]


def save_artifact(
    model: Any,
    out_dir: str | Path,
    metrics: Mapping[str, Any] | None = None,
    data: Mapping[str, Any] | None = None,
) -> Path:
    """Write ``model`` (a :class:`fleetmind.rca.model.GATRanker`) as an artifact folder; returns the folder.

    The version string is ``gat-`` plus the first 10 hex digits of the weights' SHA-256.
    """
    import torch

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    torch.save(state, buf)
    blob = buf.getvalue()
    (out / "model.pt").write_bytes(blob)
    cfg = {
        "format": ARTIFACT_FORMAT,
        "format_version": ARTIFACT_FORMAT_VERSION,
        "version": weights_version(blob),
        "model": model.config.to_dict(),
        "metrics": dict(metrics or {}),
        "data": dict(data or {}),
        "provenance": artifact_provenance(),
    }
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    return out


def _resolve_ref(ref: str | None) -> Path:
    """Local folder holding ``config.json`` + ``model.pt`` for ``ref`` (not an MLflow URI)."""
    if ref is None:
        path = RELEASED_DIR
        if not (path / "config.json").is_file():
            raise ModelLoadError(
                f"no released GAT artifact in {path}; train one with `fleetmind rca train --data DIR` "
                "or pass a model path"
            )
        return path
    path = Path(ref)
    if path.is_file() and path.name == "config.json":
        path = path.parent
    if not path.exists():
        raise ModelLoadError(f"GAT model not found: {path}")
    if not (path / "config.json").is_file():
        found = sorted(path.rglob("config.json"))
        found = [p for p in found if (p.parent / "model.pt").is_file()]
        if not found:
            raise ModelLoadError(
                f"{path} is not a GAT artifact (no config.json + model.pt; it holds {_holds(path)})"
            )
        # e.g. two `rca train --out` runs: which one is meant is not ours to guess
        if len(found) > 1:
            names = [str(p.parent.relative_to(path)) for p in found]
            more = f" and {len(names) - 8} more" if len(names) > 8 else ""
            raise ModelLoadError(
                f"{path} holds {len(found)} GAT artifacts ({', '.join(names[:8])}{more}); "
                "pass the folder of the one to load"
            )
        path = found[0].parent
    return path


def _holds(path: Path, most: int = 8) -> str:
    """The files under ``path`` (relative, sorted, at most ``most`` named), for messages."""
    files = sorted(str(f.relative_to(path)) for f in path.rglob("*") if f.is_file())
    if not files:
        return "no files"
    more = f" and {len(files) - most} more" if len(files) > most else ""
    return ", ".join(files[:most]) + more


def _load_mlflow(uri: str) -> tuple[Any, dict[str, Any], str | None]:
    """:func:`load_model` for an MLflow URI: downloaded into a temporary folder that is removed
    once the weights are read; messages name the URI (an alias: the version it resolved to)."""
    try:
        import mlflow  # noqa: F401
    except ImportError:  # pragma: no cover - mlflow is a dependency
        raise ModelLoadError(f"loading {uri!r} needs MLflow, which is not installed") from None
    with tempfile.TemporaryDirectory(prefix="fleetmind-gat-") as tmp:
        try:
            with bounded_requests():  # a server that is down: an error in seconds, not minutes
                local, shown, version = download(uri, tmp)
        except OSError as err:
            raise ModelLoadError(
                f"cannot load GAT model {uri!r} from MLflow: {safe_uri(str(err))}"
            ) from None
        except Exception as err:  # MLflow's, SQLAlchemy's and the drivers' errors: the store's
            raise ModelLoadError(
                f"cannot load GAT model {uri!r} from MLflow: {reason(err)}"
            ) from None
        try:
            model, meta = _load_folder(_resolve_ref(str(local)), shown=shown, served=version)
        except ModelLoadError as err:  # name the model, not the temporary folder
            raise ModelLoadError("MLflow model " + str(err).replace(str(local), shown)) from None
    return model, meta, version


def load_model(ref: str | None) -> tuple[Any, dict[str, Any], str | None]:
    """Load ``(GATRanker in eval mode, config.json dict, registry version or None)``.

    Raises:
        ModelLoadError: the artifact is missing, corrupt, or made for another format/feature version.
    """
    if ref is not None and is_mlflow_uri(str(ref)):
        return _load_mlflow(str(ref))
    model, meta = _load_folder(_resolve_ref(ref))
    return model, meta, None


def _load_folder(
    path: Path, shown: str | None = None, served: str | None = None
) -> tuple[Any, dict[str, Any]]:
    """The model and ``config.json`` of the artifact folder ``path``, read whole.

    Args:
        shown: the name of the model in the warning about a version label that does not match
            the weights (an MLflow URI instead of its temporary download folder).
        served: the version the model is served as when that is not the weights' hash (a
            registry version such as ``fleetmind-rca/2``).
    """
    import torch

    from fleetmind.rca.model import GATConfig, GATRanker, input_width

    try:  # names the file for every way it is unreadable: a folder, not UTF-8, not JSON, ...
        meta = read_json(path / "config.json", "model config")
    except DataError as err:
        raise ModelLoadError(str(err)) from None
    if not isinstance(meta, dict) or meta.get("format") != ARTIFACT_FORMAT:
        raise ModelLoadError(f"{path / 'config.json'} is not a {ARTIFACT_FORMAT} artifact")
    if meta.get("format_version") != ARTIFACT_FORMAT_VERSION:
        raise ModelLoadError(
            f"{path}: artifact format version {meta.get('format_version')} is not supported "
            f"(this FleetMind reads {ARTIFACT_FORMAT_VERSION}); retrain with `fleetmind rca train`"
        )
    try:
        cfg = GATConfig.from_dict(dict(meta["model"]))
    except (KeyError, TypeError, ValueError) as err:
        raise ModelLoadError(f"{path / 'config.json'}: bad model config ({err})") from None
    width = input_width(cfg.neighbours)
    if cfg.feature_version != FEATURE_VERSION or cfg.in_dim != width:
        raise ModelLoadError(
            f"{path}: model was trained on feature version {cfg.feature_version} ({cfg.in_dim} "
            f"features), this FleetMind computes version {FEATURE_VERSION} ({width}); retrain "
            "with `fleetmind rca train`"
        )
    try:
        # its random initial weights are overwritten below: drawn from a forked generator, so
        # loading a model leaves the caller's torch random sequence where it was
        with torch.random.fork_rng(devices=[]):
            model = GATRanker(cfg)
    except ValueError as err:
        raise ModelLoadError(f"{path / 'config.json'}: bad model config ({err})") from None
    try:
        blob = (path / "model.pt").read_bytes()  # read once: the version is of these bytes
        with warnings.catch_warnings():  # torch warns about foreign pickles before it refuses
            warnings.simplefilter("ignore")
            state = torch.load(io.BytesIO(blob), map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise ModelLoadError(f"{path / 'model.pt'} is missing") from None
    except Exception as err:  # torch raises RuntimeError/UnpicklingError/EOFError/... on bad bytes
        raise ModelLoadError(
            f"{path / 'model.pt'} is corrupt or not a state dict ({type(err).__name__})"
        ) from None
    if not isinstance(state, dict):
        raise ModelLoadError(f"{path / 'model.pt'} is not a state dict")
    for key, tensor in state.items():  # NaN/inf weights would rank every node at score 0
        if (
            isinstance(tensor, torch.Tensor)
            and tensor.is_floating_point()
            and not bool(torch.isfinite(tensor).all())
        ):
            raise ModelLoadError(f"{path / 'model.pt'} holds non-finite weights ({key})")
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as err:
        first = _first_mismatch(str(err))
        raise ModelLoadError(
            f"{path / 'model.pt'} does not fit the model in config.json ({first})"
        ) from None
    model.eval()
    version = weights_version(blob)
    if meta.get("version") != version:  # e.g. a retrained model.pt copied over the served one
        log.warning(
            "%s: config.json says version %r, model.pt's SHA-256 gives %s (%s)",
            shown or path,
            meta.get("version"),
            version,
            f"served as {served}" if served else "the version served",
        )
        meta = {**meta, "version": version}
    return model, meta


def _first_mismatch(text: str, most: int = 300) -> str:
    """The first line of torch's ``load_state_dict`` error joined with its first cause: torch
    writes ``Error(s) in loading state_dict for GATRanker:`` and then one tab-indented line per
    problem (``size mismatch for ...``, ``Missing key(s) ...``); at most ``most`` characters."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        return "no detail"
    out = lines[0]
    if out.endswith(":") and len(lines) > 1:
        out = f"{out} {lines[1]}"
    return out if len(out) <= most else out[: most - 3] + "..."


_MIN_BATCHED_ROWS = 16
"""Crops with fewer nodes or edges than this are ranked alone by
:meth:`GATAnalyzer.find_root_causes_many` (exact equality with a single forward; tiny crops
are cheap)."""


class GATAnalyzer(BaseAnalyzer):
    """Root-cause ranking with the trained GAT (:mod:`fleetmind.rca.model`), with fault types and paths.

    Construct with :meth:`load` (or ``GATAnalyzer(GATAnalyzerConfig(model=ref))``).
    """

    name: ClassVar[str] = "gat"
    config_class: ClassVar[type] = GATAnalyzerConfig
    accepts_epoch_seconds: ClassVar[bool] = True
    """``startsAt`` / ``endsAt`` may be unix seconds as well as RFC 3339 strings (the service passes
    seconds: ``rca.features.times.parse_time`` reads both)."""
    accepts_alert_columns: ClassVar[bool] = True
    """``alerts`` may be :class:`fleetmind.rca.features.columnar.AlertColumns` on the graph ranked (the service parses
    request bodies straight into them)."""
    reads_alert_labels: ClassVar[bool] = False
    """Whether :class:`fleetmind.rca.features.columnar.AlertColumns` passed in must keep each
    alert's labels (``True`` for a ``neighbours`` model, which reads label values)."""

    def __init__(self, config: GATAnalyzerConfig | None = None) -> None:
        super().__init__(config)
        self.model, self.meta, reg_version = load_model(self.config.model)
        self._version = reg_version or str(self.meta.get("version"))
        self.fault_types: list[str] = list(self.model.config.fault_types)
        self.temperature: float = calibration_temperature(self.meta)
        self._fault_mask_cache: dict[tuple[str, str | None], np.ndarray] = {}
        if self.model.config.neighbours:
            # its inputs read label values (XID codes): columns must keep each alert's labels
            self.reads_alert_labels = True  # type: ignore[misc]

    @classmethod
    def load(cls, ref: str | Path | None = None, **kwargs: Any) -> GATAnalyzer:
        """Load an artifact: a local folder, an MLflow model URI, or ``None`` for ``models/rca/``.

        Raises:
            ModelLoadError: missing, corrupt or incompatible artifact (one-line reason).
        """
        return cls(GATAnalyzerConfig(model=None if ref is None else str(ref), **kwargs))

    @property
    def version(self) -> str:
        """``<registered name>/<version>`` when loaded from the registry, else ``gat-<weights hash>``."""
        return self._version

    # ------------------------------------------------------------------ scoring
    _IDS_KEY: ClassVar[str] = "gat_node_id_ranks"
    """The key of :meth:`_node_ids`'s entry in the graph's own cache dict (``graph._derived``)."""

    def _node_ids(self, graph: DependencyGraph) -> np.ndarray:
        """Rank of each node id in sorted id order, for tie-breaking (int64 ``(|V|,)``).

        Cached on the graph itself (its ``_derived`` dict, which an incident's graph with extra
        edges, :mod:`fleetmind.rca.incident_graph`, shares with its served graph along with the
        node list), so the entry lives exactly as long as the graph: a class-level table keyed by
        ``id(graph.nodes)`` held every ranked graph's node list (an inline 50,000-node graph of
        ``/api/v1/rca`` kept about 46 MiB per request) until it was cleared past 64 entries.
        """
        nodes = graph.nodes
        cache = getattr(graph, "_derived", None)
        hit = cache.get(self._IDS_KEY) if isinstance(cache, dict) else None
        if hit is not None and hit[0] is nodes and hit[1].size == len(nodes):
            return hit[1]
        ids = np.argsort(np.argsort(np.array([nd.id for nd in nodes]), kind="stable"))
        if isinstance(cache, dict):
            cache[self._IDS_KEY] = (nodes, ids)
        return ids

    def _threads(self) -> Any:
        import contextlib

        n = self.config.num_threads
        if n is None:
            return contextlib.nullcontext()
        return torch_threads(n)

    def _fault_type(self, node: Any, logits: np.ndarray) -> str:
        """The most likely fault type that the catalog allows at ``node``'s kind (and role).

        ``logits``: ``(C,)`` fault-head outputs over :attr:`fault_types`. A class named
        :data:`UNKNOWN_FAULT` (or empty), learned from feedback that named no fault type before
        such labels were left untyped, is never the answer. Catalog types
        (:data:`fleetmind.data.rca_gen.faults.FAULT_TYPES`) are given only at node kinds (and
        roles) that can have them; names outside the catalog (a model trained on another
        dataset's fault names, e.g. PetShop's metrics) are not masked. A node whose kind allows
        none of the model's types gets :data:`UNKNOWN_FAULT`; with ``mask_fault_types`` off, the
        best type whatever the node.
        """
        if not self.config.mask_fault_types:
            key: tuple[str, str | None] = ("*", None)
        else:
            role = node.attrs.get("role") if isinstance(node.attrs, dict) else None
            key = (node.kind, role if isinstance(role, str) else None)
        mask = self._fault_mask_cache.get(key)
        if mask is None:
            ok = FAULT_TYPES if key[0] == "*" else plausible_fault_types(*key)
            mask = np.array(
                [
                    t not in (UNKNOWN_FAULT, "") and (t in ok or t not in FAULT_TYPES)
                    for t in self.fault_types
                ]
            )
            self._fault_mask_cache[key] = mask
        if not mask.any():
            return UNKNOWN_FAULT
        return self.fault_types[int(np.argmax(np.where(mask, logits, -np.inf)))]

    def _capped(self, c: Any, logits: np.ndarray) -> np.ndarray | None:
        """``logits`` (float ``(m,)``, of crop ``c``) after the lone-alert rule, or ``None`` when
        the rule is off or changes nothing (:func:`fleetmind.rca.parsimony.lone_alert_cap`)."""
        if self.config.lone_alert_margin is None:
            return None
        return lone_alert_cap(
            logits, c.edge_index, c.alerting[c.keep], self.config.lone_alert_margin
        )

    def score(self, graph: DependencyGraph, alerts: Sequence[Mapping[str, Any]]) -> np.ndarray:
        """Root-cause probabilities of every node, float64 ``(|V|,)`` summing to 1."""
        return self.score_many([(graph, alerts)])[0]

    def _forward_many(
        self,
        items: Sequence[tuple[DependencyGraph, Sequence[Mapping[str, Any]]]],
        batch_size: int,
    ) -> Any:
        """Yield ``(crops, node logits of the crops, batch)``, one PyG batch at a time; the
        logits are the model's, after the lone-alert rule (:meth:`_capped`)."""
        import torch
        from torch_geometric.data import Batch, Data

        hops = self.model.config.crop_hops
        with self._threads(), torch.inference_mode():
            for s in range(0, len(items), batch_size):
                chunk = items[s : s + batch_size]
                crops = [crop_incident(g, a, hops) for g, a in chunk]
                datas = []
                for (g, a), c in zip(chunk, crops, strict=True):
                    x, ea = self._inputs(g, a, c.x, c.keep, c.edge_index)
                    d = Data(
                        x=torch.from_numpy(x),
                        edge_index=torch.from_numpy(c.edge_index),
                        edge_type=torch.from_numpy(c.edge_type),
                        num_nodes=c.x.shape[0],
                    )
                    if ea is not None:
                        d.edge_attr = torch.from_numpy(ea)
                    datas.append(d)
                b = Batch.from_data_list(datas)
                ea_b = b.edge_attr if self.model.config.neighbours else None
                logits, _, _ = self.model(b.x, b.edge_index, b.edge_type, b.batch, edge_attr=ea_b)
                ptr = b.ptr.numpy()
                for i, c in enumerate(crops):
                    z = self._capped(c, logits[ptr[i] : ptr[i + 1]].double().numpy())
                    if z is not None:
                        logits[ptr[i] : ptr[i + 1]] = torch.from_numpy(z).to(logits.dtype)
                yield crops, logits, b

    def score_many(
        self,
        items: Sequence[tuple[DependencyGraph, Sequence[Mapping[str, Any]]]],
        batch_size: int = 64,
    ) -> list[np.ndarray]:
        """Batched :meth:`score` of many incidents (one PyG batch per ``batch_size`` graphs)."""
        from fleetmind.rca.model import graph_log_softmax

        out: list[np.ndarray] = []
        for crops, logits, b in self._forward_many(items, batch_size):
            p = graph_log_softmax(logits / self.temperature, b.batch).exp().double().numpy()
            ptr = b.ptr.numpy()
            for i, c in enumerate(crops):
                full = np.zeros(items[len(out)][0].num_nodes)
                full[c.keep] = p[ptr[i] : ptr[i + 1]]
                out.append(full)
        return out

    def crop_logits_many(
        self,
        items: Sequence[tuple[DependencyGraph, Sequence[Mapping[str, Any]]]],
        batch_size: int = 64,
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Uncalibrated GAT logits of each incident's candidate subgraph (after the lone-alert
        rule, as :meth:`find_root_causes` ranks them).

        Returns:
            per incident ``(keep, logits)``: ``keep`` int64 ``(m,)`` node indices of the candidate
            subgraph in the graph, ``logits`` float64 ``(m,)`` (softmax of ``logits / T`` gives the
            scores; :mod:`fleetmind.rca.calibration` fits ``T``).
        """
        out: list[tuple[np.ndarray, np.ndarray]] = []
        for crops, logits, b in self._forward_many(items, batch_size):
            z = logits.double().numpy()
            ptr = b.ptr.numpy()
            out.extend((c.keep, z[ptr[i] : ptr[i + 1]].copy()) for i, c in enumerate(crops))
        return out

    def find_root_causes(
        self, graph: DependencyGraph, alerts: Sequence[Mapping[str, Any]], top_k: int | None = None
    ) -> RCAResult:
        """Rank every node of ``graph`` as the root cause of ``alerts``.

        Returns:
            :class:`RCAResult` (method ``gat``) with causes best first; the first
            ``config.explain_top`` causes carry a fault type and the highest-attention propagation
            path to an alerting node. ``extra`` holds ``unmapped_alerts`` (alerts matching no node).
            When no alert maps onto a node of ``graph`` (``alerts`` empty, or none of them names a
            node), a ranking would rest on the graph alone: the result then has no causes, as the
            service answers such an incident.
        """

        n = graph.num_nodes
        if n == 0:  # nothing to rank, and no alert can map
            return self._empty(alerts)
        c = incident_crop(graph, alerts, self.model.config.crop_hops)
        if not c.alerting.any():  # no alert names a node: no evidence to rank on
            return self._empty(alerts, c.unmapped)
        return self._rank_crop(graph, alerts, c, top_k)

    def _empty(self, alerts: Any, unmapped: int | None = None) -> RCAResult:
        """The result without evidence (a graph without nodes, or no alert mapping onto one): no
        cause; ``unmapped`` alerts matched no node (default: every alert)."""
        return RCAResult(
            [],
            method=self.name,
            model_version=self.version,
            extra={"unmapped_alerts": len(alerts) if unmapped is None else unmapped},
        )

    def _rank_crop(
        self, graph: DependencyGraph, alerts: Any, c: Any, top_k: int | None
    ) -> RCAResult:
        """:meth:`find_root_causes` of an incident whose crop ``c`` is computed already."""
        import torch

        x, ea = self._inputs(graph, alerts, c.x, c.keep, c.edge_index)
        with self._threads(), torch.inference_mode():
            ei = torch.from_numpy(c.edge_index)
            et = torch.from_numpy(c.edge_type)
            ea_t = None if ea is None else torch.from_numpy(ea)
            logits, h, att = self.model.infer(torch.from_numpy(x), ei, et, edge_attr=ea_t)
            return self._result(graph, c, logits, h, att, top_k)

    def _inputs(
        self,
        graph: DependencyGraph,
        alerts: Any,
        x: np.ndarray,
        keep: np.ndarray,
        edge_index: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """The model's node input ``(|V'|, in_dim)`` and per-edge input (``None`` unless the model
        is a ``neighbours`` one, see :mod:`fleetmind.rca.features.neighbours`)."""
        if not self.model.config.neighbours:
            return x, None
        node, edge = neighbour_inputs(graph, alerts, x, keep, edge_index)
        return np.ascontiguousarray(np.concatenate([x, node], axis=1)), edge

    def find_root_causes_many(
        self,
        items: Sequence[tuple[DependencyGraph, Sequence[Mapping[str, Any]], int | None]],
    ) -> list[RCAResult]:
        """:meth:`find_root_causes` of several incidents with one batched GAT forward.

        Gives exactly the results of calling :meth:`find_root_causes` on each item (same ranking,
        bit-identical scores, fault types and paths): the message passing of disjoint graphs in one
        batch computes every node the same way, and the two steps whose floating-point result
        depends on the batch layout (the final ``hidden -> 1`` projection, a matrix-vector product,
        and the mean pooling of the fault head) run per incident, and so does the input layer
        (its product over a batch's rows, 131 or 157 features wide, was seen to round differently
        in the last bit from one graph's 49 rows). An incident whose crop has
        fewer than :data:`_MIN_BATCHED_ROWS` nodes or edges is ranked on its own: a matrix product
        over a handful of rows takes another kernel path on CPU and can round differently in the
        last bit than the same rows inside a batch (seen up to 6 rows). The layers' activation is
        :func:`fleetmind.rca.model.elu`, whose result does not depend on an element's place in
        the batch (``F.elu``'s did, for the last partial vector block).

        Args:
            items: ``(graph, alerts, top_k)`` per incident; graphs may differ.

        Returns:
            One :class:`RCAResult` per item, in order.

        Raises:
            DataError: when any incident's alerts are malformed (nothing is returned then; call
                :meth:`find_root_causes` per item to find which).
        """
        import torch

        out: list[RCAResult | None] = [None] * len(items)
        crops = []
        for i, (graph, alerts, top_k) in enumerate(items):
            if graph.num_nodes == 0:
                out[i] = self._empty(alerts)
                continue
            c = incident_crop(graph, alerts, self.model.config.crop_hops)
            if not c.alerting.any():  # no alert names a node (see find_root_causes)
                out[i] = self._empty(alerts, c.unmapped)
                continue
            if c.keep.size < _MIN_BATCHED_ROWS or c.edge_index.shape[1] < _MIN_BATCHED_ROWS:
                out[i] = self._rank_crop(graph, alerts, c, top_k)  # tiny: alone (see below)
            else:
                crops.append((i, c))
        if not crops:
            return [r for r in out if r is not None]
        sizes = np.array([c.keep.size for _, c in crops], dtype=np.int64)
        esizes = np.array([c.edge_index.shape[1] for _, c in crops], dtype=np.int64)
        noff = np.concatenate([[0], np.cumsum(sizes)])
        eoff = np.concatenate([[0], np.cumsum(esizes)])
        inputs = [
            self._inputs(items[i][0], items[i][1], c.x, c.keep, c.edge_index) for i, c in crops
        ]
        x = np.concatenate([xi for xi, _ in inputs])
        ea = None if inputs[0][1] is None else np.concatenate([e for _, e in inputs])
        ei = np.concatenate([c.edge_index + noff[j] for j, (_, c) in enumerate(crops)], axis=1)
        et = np.concatenate([c.edge_type for _, c in crops])
        e_tot = int(eoff[-1])
        with self._threads(), torch.inference_mode():
            # the input layer per incident: over a whole batch its product can round differently
            h0 = torch.cat([self.model.embed(torch.from_numpy(xi)) for xi, _ in inputs])
            _, h_all, att_all = self.model.infer(
                torch.from_numpy(x),
                torch.from_numpy(ei),
                torch.from_numpy(et),
                logits=False,
                edge_attr=None if ea is None else torch.from_numpy(ea),
                h0=h0,
            )
            for j, (i, c) in enumerate(crops):
                n0, n1, e0, e1 = int(noff[j]), int(noff[j + 1]), int(eoff[j]), int(eoff[j + 1])
                h = h_all[n0:n1]
                logits = self.model.score(h)

                # the batch's message graph is [all forward edges, all reversed, all self loops];
                # one incident's is [its forward, its reversed, its loops] (sliced only when a
                # path needs the attention)
                def att(n0: int = n0, n1: int = n1, e0: int = e0, e1: int = e1) -> list[Any]:
                    return [
                        torch.cat(
                            [
                                a[e0:e1],
                                a[e_tot + e0 : e_tot + e1],
                                a[2 * e_tot + n0 : 2 * e_tot + n1],
                            ]
                        )
                        for a in att_all
                    ]

                graph, _, top_k = items[i]
                out[i] = self._result(graph, c, logits, h, att, top_k)
        return [r for r in out if r is not None]

    def _result(
        self,
        graph: DependencyGraph,
        c: Any,
        logits: Any,
        h: Any,
        att: Sequence[Any] | Callable[[], Sequence[Any]],
        top_k: int | None,
    ) -> RCAResult:
        """Rank, type and explain from one incident's forward outputs (``c``: its crop; ``att``:
        the attention of each layer, or a function that returns it when a path needs it)."""
        import torch

        n = graph.num_nodes
        m = c.keep.size
        capped = self._capped(c, logits.double().numpy())
        if capped is not None:
            logits = torch.from_numpy(capped).to(logits.dtype)
        sub_probs = torch.softmax(logits / self.temperature, 0).double().numpy()
        probs = np.zeros(n)
        probs[c.keep] = sub_probs
        # best first; ties (e.g. the zero scores outside the candidate subgraph) broken by node id,
        # so the order does not depend on node order
        order = np.lexsort((self._node_ids(graph), -probs))
        k = n if top_k is None else max(0, min(int(top_k), n))
        order = order[:k]
        faults: list[str | None] = [None] * k
        paths: list[tuple[str, ...]] = [(graph.nodes[int(i)].id,) for i in order]
        # explained causes: the best ones inside the candidate subgraph
        n_exp = min(k, max(self.config.explain_top, 0), m)
        if n_exp:
            sub_of = np.full(n, -1, dtype=np.int64)
            sub_of[c.keep] = np.arange(m)
            top_sub = sub_of[order[:n_exp]]
            top_sub = top_sub[top_sub >= 0]
            if top_sub.size and self.fault_types:
                fl = self.model.fault_logits(h, torch.from_numpy(top_sub)).double().numpy()
                for j in range(top_sub.size):
                    faults[j] = self._fault_type(graph.nodes[int(c.keep[top_sub[j]])], fl[j])
            alerting_sub = c.alerting[c.keep]
            # a cause that alerts itself is its own path: the attention costs are only needed
            # (and only built) when some explained cause does not alert
            if not alerting_sub[top_sub].all() and alerting_sub.any():
                loops = np.arange(m, dtype=c.edge_index.dtype)
                mei = np.concatenate(
                    [c.edge_index, c.edge_index[::-1], np.stack([loops, loops])], axis=1
                )
                if callable(att):
                    att = att()
                for j, p in enumerate(
                    attention_paths(mei, [a.numpy() for a in att], m, top_sub, alerting_sub)
                ):
                    paths[j] = tuple(graph.nodes[int(c.keep[v])].id for v in p)
        causes = []
        for j, i in enumerate(order):
            node = graph.nodes[int(i)]
            causes.append(
                RankedCause(
                    node=node.id,
                    kind=node.kind,
                    cluster=node.cluster,
                    score=float(probs[int(i)]),
                    fault_type=faults[j],
                    path=paths[j],
                )
            )
        return RCAResult(
            causes,
            method=self.name,
            model_version=self.version,
            extra={"unmapped_alerts": c.unmapped},
        )


def make_analyzer(model: str | None = None, seed: int = 0) -> GATAnalyzer:
    """Factory for ``rca.metrics`` (``fleetmind rca evaluate``): the GAT from ``model`` (or released).

    ``seed`` is unused: inference is deterministic.
    """
    return GATAnalyzer.load(model)
