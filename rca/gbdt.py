"""Learned baselines: gradient-boosted trees and an alert-name table, trained on a dataset's train split.

These are the baselines a learned ranker has to beat. They read the alert names, as the GAT does
(the fixed heuristics in :mod:`fleetmind.rca.baselines` do not):

| name | features of a candidate node | model |
| --- | --- | --- |
| ``name_table`` | the alert tokens at the node | ``P(root | token at node)`` counted on train |
| ``node_gbdt`` | its own alerts: token counts, severities, firing/resolved, timing; kind, degrees | ``HistGradientBoostingClassifier`` |
| ``hop2_gbdt`` | ``node_gbdt``'s plus token bags of its dependencies, dependents and the four 2-hop compositions, alerting neighbours by kind | ``HistGradientBoostingClassifier`` |

A token is ``alertname`` or ``alertname:xid``. **Candidates** are the alerting nodes and their 1-hop
neighbours (so a silent root can be ranked); other nodes are not ranked (reciprocal rank 0).
Timing is relative to the incident's latest alert (the analyzer interface has no window), in minutes.
``hop2_gbdt`` ports the features of the learnability probe (``benchmarks/bench_rca_learnability.py``).

**Training** (:meth:`GBDTAnalyzer.train`): every candidate of every training incident is a row,
label 1 at the root; negatives are subsampled to ``neg_rate`` (seeded) and at most ``max_train``
incidents are used. ``rca evaluate --data DIR`` fits them lazily on ``DIR``'s ``train`` split and
caches the fitted model with joblib in ``DIR/.fleetmind_cache/<method>-seed<S>-<key>.joblib``, where
``key`` hashes ``meta.json`` and the size and mtime of ``train.jsonl`` (a regenerated dataset refits);
when ``DIR`` is read-only the model is refitted each time. Delete the folder to force a refit.
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp
from threadpoolctl import threadpool_limits

from fleetmind.data.errors import ConfigError
from fleetmind.data.graph import NODE_KINDS, DependencyGraph
from fleetmind.data.rca_dataset import load_dataset
from fleetmind.rca.base import BaseAnalyzer, RankedCause, RCAResult
from fleetmind.rca.baselines import _ts, alerts_by_node, path_to_alert
from fleetmind.rca.features.layout import ALERTNAME_ALIASES

_SEVERITIES = ("critical", "warning", "info")
CACHE_DIR = ".fleetmind_cache"


def alert_token(alert: Mapping[str, Any]) -> str:
    """``alertname`` or ``alertname:xid`` of an alert, a name of
    :data:`fleetmind.rca.features.layout.ALERTNAME_ALIASES` read as its vocabulary name
    (FleetMind's own ``GpuXidError`` is the token of ``GPUXidError``), as the GAT's features read it."""
    lab = alert.get("labels") or {}
    name = str(lab.get("alertname", ""))
    name = ALERTNAME_ALIASES.get(name, name)
    return name + (":" + str(lab["xid"]) if "xid" in lab else "")


def root_shares(
    incidents: Sequence[Mapping[str, Any]], graphs: Mapping[str, DependencyGraph]
) -> dict[str, dict[str, float]]:
    """``token -> {"firings", "at_root", "root_share"}`` over ``incidents``, sorted by root share.

    A firing is one (incident, node, token) triple (storm copies at one node count once); the root
    share is the share of a token's firings that are at the incident's root node."""
    tot: Counter = Counter()
    root: Counter = Counter()
    for inc in incidents:
        g = graphs[inc["graph"]]
        r = g.index[inc["root_cause"]]
        for i, al in alerts_by_node(g, inc["alerts"]).items():
            for t in {alert_token(a) for a in al}:
                tot[t] += 1
                root[t] += int(i == r)
    rows = {t: {"firings": tot[t], "at_root": root[t], "root_share": root[t] / tot[t]} for t in tot}
    return dict(sorted(rows.items(), key=lambda kv: (-kv[1]["root_share"], kv[0])))


def _adjacency(graph: DependencyGraph) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """``(down, up)``: sparse ``(|V|, |V|)`` adjacency to dependencies and to dependents (cached)."""
    c = getattr(graph, "_rca_gbdt_adj", None)
    if c is None:
        n = graph.num_nodes
        down = sp.csr_matrix(
            (np.ones(graph.num_edges), (graph.edge_index[0], graph.edge_index[1])), shape=(n, n)
        )
        down.data[:] = 1.0  # parallel edges count once
        c = (down, down.T.tocsr())
        graph._rca_gbdt_adj = c  # type: ignore[attr-defined]
    return c


@dataclass
class GBDTConfig:
    """Settings of the learned baselines.

    Attributes:
        hops: 0 (``node_gbdt``: the node's own alerts) or 2 (``hop2_gbdt``).
        max_iter, learning_rate, max_leaf_nodes: ``HistGradientBoostingClassifier`` settings.
        neg_rate: share of non-root candidate rows kept for training.
        max_train: at most this many training incidents (the first ones of the split).
        seed: seed of the negative subsampling and the trees.
        threads: OpenMP threads of the trees while fitting and scoring (1: fastest on a shared,
            loaded machine, where threads wait for each other; ``None``: scikit-learn's default).
    """

    hops: int = 2
    max_iter: int = 150
    learning_rate: float = 0.1
    max_leaf_nodes: int = 63
    neg_rate: float = 0.3
    max_train: int = 2000
    seed: int = 0
    threads: int | None = 1


class _Featurizer:
    """Per-candidate feature rows of one incident; the token vocabulary is fixed at fit time."""

    def __init__(self, vocab: Mapping[str, int], hops: int) -> None:
        self.vocab = dict(vocab)
        self.hops = hops
        self.n_kinds = len(NODE_KINDS)

    def __call__(
        self, graph: DependencyGraph, alerts: Sequence[Mapping[str, Any]]
    ) -> tuple[np.ndarray, np.ndarray, dict[int, list]]:
        """Returns ``(cand, X, by_node)``: candidate node indices ``(C,)``, features ``(C, F)``
        (float32) and the alerts mapped to nodes."""
        n = graph.num_nodes
        down, up = _adjacency(graph)
        by = alerts_by_node(graph, alerts)  # type: ignore[arg-type]
        n_tok = len(self.vocab)
        rows, cols = [], []
        starts = [_ts(a.get("startsAt")) for al in by.values() for a in al]
        starts = [t for t in starts if np.isfinite(t)]
        t_ref = max(starts) if starts else 0.0
        t_first_all = min(starts) if starts else 0.0
        own = np.zeros((n, 8), dtype=np.float64)  # n, firing, resolved, 3 severities, age, lead
        own[:, 6:8] = -1.0  # no alert: no age / lead
        for i, al in by.items():
            first = np.inf
            for a in al:
                j = self.vocab.get(alert_token(a))
                if j is not None:
                    rows.append(i)
                    cols.append(j)
                own[i, 0] += 1
                if a.get("status") == "resolved":
                    own[i, 2] += 1
                else:
                    own[i, 1] += 1
                sev = (a.get("labels") or {}).get("severity")
                if sev in _SEVERITIES:
                    own[i, 3 + _SEVERITIES.index(sev)] += 1
                t = _ts(a.get("startsAt"))
                if np.isfinite(t):
                    first = min(first, t)
            if np.isfinite(first):
                own[i, 6] = (t_ref - first) / 60.0
                own[i, 7] = (first - t_first_all) / 60.0
        x = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(n, n_tok))
        cand_set: set[int] = set(by)
        for i in by:
            cand_set.update(down[i].indices.tolist())
            cand_set.update(up[i].indices.tolist())
        c = np.array(sorted(cand_set), dtype=np.int64)
        kind = np.eye(self.n_kinds)[graph.node_type]
        deg_d, deg_u = np.diff(down.indptr), np.diff(up.indptr)
        al = np.zeros(n)
        if by:
            al[list(by)] = 1.0
        blocks = [x[c], sp.csr_matrix(np.column_stack([kind[c], deg_d[c], deg_u[c], own[c]]))]
        if self.hops >= 2:
            xd, xu = down @ x, up @ x
            ad, au = down @ al, up @ al
            kd = down @ (kind * al[:, None])  # alerting dependencies by node kind
            ku = up @ (kind * al[:, None])  # alerting dependents by node kind
            blocks += [
                xd[c],
                xu[c],
                (down @ xd)[c],
                (up @ xu)[c],
                (up @ xd)[c],
                (down @ xu)[c],
                sp.csr_matrix(
                    np.column_stack([ad[c], au[c], au[c] / np.maximum(deg_u[c], 1), kd[c], ku[c]])
                ),
            ]
        X = sp.hstack(blocks).tocsr().toarray().astype(np.float32)
        return c, X, by


class GBDTAnalyzer(BaseAnalyzer):
    """Gradient-boosted trees over per-candidate alert features (``node_gbdt`` / ``hop2_gbdt``).

    Call :meth:`train` (or :meth:`prepare` with a dataset folder) before ranking.
    """

    name: ClassVar[str] = "hop2_gbdt"
    config_class: ClassVar[type] = GBDTConfig

    def __init__(self, config: GBDTConfig | None = None, name: str | None = None) -> None:
        super().__init__(config)
        if name is not None:
            self.name = name  # type: ignore[misc]
        self.clf: Any = None
        self.featurizer: _Featurizer | None = None
        self.fit_info: dict[str, Any] = {}

    @property
    def version(self) -> str | None:
        return self.fit_info.get("key")

    def train(
        self, incidents: Sequence[dict[str, Any]], graphs: Mapping[str, DependencyGraph]
    ) -> None:
        """Fit on ``incidents`` (the train split): one row per candidate node, label 1 at the root."""
        from sklearn.ensemble import HistGradientBoostingClassifier

        cfg: GBDTConfig = self.config
        incs = list(incidents)[: cfg.max_train]
        if not incs:
            raise ConfigError(f"{self.name}: no training incidents")
        t0 = time.perf_counter()
        vocab: dict[str, int] = {}
        for inc in incs:
            for a in inc["alerts"]:
                vocab.setdefault(alert_token(a), len(vocab))
        self.featurizer = _Featurizer(vocab, cfg.hops)
        rng = np.random.default_rng(cfg.seed)
        xs, ys = [], []
        for inc in incs:
            g = graphs[inc["graph"]]
            c, X, _ = self.featurizer(g, inc["alerts"])
            y = (c == g.index[inc["root_cause"]]).astype(np.int8)
            keep = (y == 1) | (rng.random(len(y)) < cfg.neg_rate)
            xs.append(X[keep])
            ys.append(y[keep])
        X = np.vstack(xs)
        y = np.concatenate(ys)
        if y.min() == y.max():
            raise ConfigError(f"{self.name}: training rows hold only one class")
        with threadpool_limits(cfg.threads):
            self.clf = HistGradientBoostingClassifier(
                max_iter=cfg.max_iter,
                learning_rate=cfg.learning_rate,
                max_leaf_nodes=cfg.max_leaf_nodes,
                random_state=cfg.seed,
            ).fit(X, y)
        self.fit_info = {
            "train_incidents": len(incs),
            "train_rows": int(len(y)),
            "features": int(X.shape[1]),
            "fit_s": round(time.perf_counter() - t0, 2),
        }

    def scores(
        self, graph: DependencyGraph, alerts: Sequence[dict[str, Any]]
    ) -> tuple[np.ndarray, np.ndarray, dict[int, list]]:
        """``(cand, p, by_node)``: candidate indices ``(C,)`` and their root probability ``(C,)``."""
        if self.clf is None or self.featurizer is None:
            raise ConfigError(f"{self.name} is not trained (call train() or prepare(data_dir))")
        c, X, by = self.featurizer(graph, alerts)
        if len(c) == 0:
            return c, np.zeros(0), by
        with threadpool_limits(self.config.threads):
            return c, self.clf.predict_proba(X)[:, 1], by

    def find_root_causes(
        self, graph: DependencyGraph, alerts: Sequence[dict[str, Any]], top_k: int | None = None
    ) -> RCAResult:
        c, p, by = self.scores(graph, alerts)
        return _ranked(self.name, self.version, graph, c, p, set(by), top_k)

    def prepare(self, data_dir: str | Path) -> GBDTAnalyzer:
        """Fit on ``data_dir``'s train split, or load the cached fit (see the module docstring)."""
        _fit_cached(self, data_dir)
        return self


class NameTableAnalyzer(GBDTAnalyzer):
    """``P(root | alert token at the node)`` counted on the train split; a node scores the largest
    share over its tokens (ties: more alerts first). Tokens unseen in training score 0."""

    name: ClassVar[str] = "name_table"

    def train(
        self, incidents: Sequence[dict[str, Any]], graphs: Mapping[str, DependencyGraph]
    ) -> None:
        cfg: GBDTConfig = self.config
        incs = list(incidents)[: cfg.max_train]
        at_root: dict[str, int] = {}
        total: dict[str, int] = {}
        for inc in incs:
            g = graphs[inc["graph"]]
            r = g.index[inc["root_cause"]]
            for i, al in alerts_by_node(g, inc["alerts"]).items():
                for t in {alert_token(a) for a in al}:
                    total[t] = total.get(t, 0) + 1
                    at_root[t] = at_root.get(t, 0) + int(i == r)
        self.clf = {t: at_root.get(t, 0) / n for t, n in total.items()}
        self.featurizer = _Featurizer({}, 0)
        self.fit_info = {"train_incidents": len(incs), "tokens": len(total)}

    def scores(
        self, graph: DependencyGraph, alerts: Sequence[dict[str, Any]]
    ) -> tuple[np.ndarray, np.ndarray, dict[int, list]]:
        if self.clf is None:
            raise ConfigError("name_table is not trained (call train() or prepare(data_dir))")
        by = alerts_by_node(graph, alerts)
        c = np.array(sorted(by), dtype=np.int64)
        p = np.array(
            [
                max(self.clf.get(alert_token(a), 0.0) for a in by[int(i)]) + 1e-6 * len(by[int(i)])
                for i in c
            ]
        )
        return c, p, by


def _ranked(
    name: str,
    version: str | None,
    graph: DependencyGraph,
    cand: np.ndarray,
    p: np.ndarray,
    alerting: set[int],
    top_k: int | None,
) -> RCAResult:
    order = np.lexsort((cand, -p))  # best first; ties by node index (deterministic)
    if top_k is not None:
        order = order[:top_k]
    causes = []
    for rank, j in enumerate(order):
        i = int(cand[j])
        nd = graph.nodes[i]
        causes.append(
            RankedCause(
                node=nd.id,
                kind=nd.kind,
                cluster=nd.cluster,
                score=float(p[j]),
                path=path_to_alert(graph, i, alerting) if rank < 5 else (nd.id,),
            )
        )
    return RCAResult(causes=causes, method=name, model_version=version)


def _cache_key(data_dir: Path, an: GBDTAnalyzer) -> str:
    h = hashlib.blake2b(digest_size=6)
    meta = data_dir / "meta.json"
    h.update(meta.read_bytes() if meta.exists() else b"")
    st = (data_dir / "train.jsonl").stat()
    h.update(f"{st.st_size}:{st.st_mtime_ns}:{an.name}:{an.config!r}".encode())
    # alert_token reads these names as their vocabulary names: a fit from before is stale
    h.update(f"aliases:{sorted(ALERTNAME_ALIASES.items())!r}".encode())
    return h.hexdigest()


def _fit_cached(an: GBDTAnalyzer, data_dir: str | Path) -> None:
    import joblib

    d = Path(data_dir)
    if not (d / "train.jsonl").exists():
        raise ConfigError(
            f"{an.name} trains on the train split of the dataset, but {d / 'train.jsonl'} does not exist"
        )
    key = _cache_key(d, an)
    path = d / CACHE_DIR / f"{an.name}-seed{an.config.seed}-{key}.joblib"
    if path.exists():
        state = joblib.load(path)
        an.clf, an.featurizer, an.fit_info = state["clf"], state["featurizer"], state["fit_info"]
        return
    ds = load_dataset(d, ["train"])
    an.train(ds.split("train"), ds.graphs)
    an.fit_info["key"] = key
    try:
        path.parent.mkdir(exist_ok=True)
        joblib.dump({"clf": an.clf, "featurizer": an.featurizer, "fit_info": an.fit_info}, path)
    except OSError:  # a read-only dataset folder: refit next time
        pass


LEARNED_BASELINES: dict[str, tuple[type[GBDTAnalyzer], int]] = {
    "name_table": (NameTableAnalyzer, 0),
    "node_gbdt": (GBDTAnalyzer, 0),
    "hop2_gbdt": (GBDTAnalyzer, 2),
}
"""Method name -> (class, hops) of the baselines that train on a dataset's train split."""


def make_learned(
    name: str, data: str | Path, seed: int = 0, max_train: int | None = None
) -> GBDTAnalyzer:
    """Build ``name`` (one of :data:`LEARNED_BASELINES`) fitted on ``data``'s train split (cached).

    ``max_train``: at most this many training incidents (``None``: :class:`GBDTConfig`'s default).
    """
    cls, hops = LEARNED_BASELINES[name]
    extra = {} if max_train is None else {"max_train": int(max_train)}
    return cls(GBDTConfig(hops=hops, seed=seed, **extra), name=name).prepare(data)
