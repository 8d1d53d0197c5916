"""Synthetic incidents for one real system, from its call graph and its normal-period metrics only.

``fleetmind rca fit`` trains a GAT for a system before any of its incidents is known. What an operator
has then is the dependency graph and a stretch of normal telemetry. This module turns those two into
labelled training incidents:

1. cut a window of ``W`` consecutive rows (``W`` drawn from :attr:`SynthConfig.window_rows`) out of the
   normal period;
2. pick a root node (any node that has metrics or is called by a node that has; a node without
   metrics of its own is drawn a tenth as often as one with) and a fault:

   ========== =================================================================================
   fault      what is injected (from a random onset row on; ``w`` = a random per-edge weight)
   ========== =================================================================================
   latency    the root's latency rises by ``delta``; every caller's latency rises by ``sum w *
              delta(callee)`` (latency adds up along call chains; ``w`` log-uniform in [0.1, 3] =
              calls per request times the share of requests that take the path; some take none)
   errors     the root's success rate drops by a share ``d`` (its error counts rise); a caller's
              share is ``w * d(callee)``, ``w`` in [0.1, 0.9] (errors dilute toward callers);
              sometimes callers' latency moves too (timeouts)
   saturation the root's saturation metrics (CPU, memory, ...) rise (headroom metrics such as
              ``MemAvailable`` fall) and its latency rises (as above)
   traffic    the root's request count is multiplied or divided by 2-10; its callees' counts follow,
              diluted; a surge sometimes slows the root (latency, as above)
   stop       the root stops serving: its requests fall to 0-20 %, its success rate collapses, its
              callers see errors (as ``errors``)
   ========== =================================================================================

   with probability :attr:`SynthConfig.silent_rate` the root's own metrics are left untouched (a
   silent component: only its neighbours show the fault); nodes without metrics are always silent.
   With probability :attr:`SynthConfig.hidden_edge_rate` the fault also reaches a leaf node that
   shares a caller with the root (an edge the traced call graph misses: a load balancer or proxy in
   front of the root shows up as a leaf next to it);
   Each node downstream of the root starts at its parent's onset, one row later with probability
   :attr:`SynthConfig.lag_prob` or one row earlier with probability ``lag_prob / 3`` (scrape skew);
3. add unrelated drifts: a Poisson(:attr:`SynthConfig.noise_mean`) number of random (node, metric)
   pairs shifted for the whole window (30 % of them next to the fault), as long-running unrelated
   anomalies are in real windows;
   then domain randomisation (:meth:`SystemModel._drift`, ranges in :class:`SynthConfig`): a stale
   baseline (many columns offset for the whole window), a subtree-wide latency drift, Gaussian
   noise; lag probability, onset (sometimes inside the window's pre-onset reference rows) and which
   of the root's own effects are seen (partial symptoms) are drawn per incident. A root that has a
   metric of a role its fault implies (:data:`SYMPTOM_ROLES`) must alert in it, or the incident is
   drawn again;
4. turn the window into alerts with the adapter's detector (:func:`fleetmind.data.petshop.detect_alerts`, here
   vectorised as :meth:`SystemModel.detect`, which a test holds equal to it) and the baseline fitted
   on the normal period: the same rules and settings the adapter uses on real issue windows.

Latency rises are added in one unit along the call chains. When a system's latency columns name
different units (``latency_ms`` at one node, ``latency_seconds`` at another, by the unit words of
:data:`LATENCY_UNIT_S`), each rise is carried in seconds and converted into each column's unit (a
column without a unit word takes the system's most common one); when they agree, or name none, the
root's own unit is used as is.

Metric roles come from metric names (:mod:`fleetmind.data.metric_roles`), so nothing here depends on node or
metric names of a particular system. The only inputs are ``graph`` and ``normal``: no issue window, no
``target.json``, no label.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from fleetmind.data.errors import DataError
from fleetmind.data.graph import DependencyGraph
from fleetmind.data.metric_roles import ROLES, words
from fleetmind.data.petshop import (
    Baseline,
    DetectorConfig,
    NodeMatch,
    _pick_statistics,
    alerts_from_scores,
    fit_baseline,
    match_nodes,
    reference_rows,
)

FAULTS: tuple[str, ...] = ("latency", "errors", "saturation", "traffic", "stop")
"""Fault types the synthesiser injects."""


@dataclass
class SynthConfig:
    """Settings of the incident synthesiser (one set for every system).

    Ranges are domain randomisation: each incident draws its own value uniformly from the range, so
    the model sees every degree of drift and lag between the bounds. The bounds were set from what
    real incident windows look like in general (a normal period recorded days to months away, alerts
    that drift over whole windows, onsets a scrape or two apart), never from a system's labels.

    Attributes:
        n_incidents: incidents to synthesise.
        window_rows: inclusive range of window lengths ``W`` in rows (clipped to the normal period;
            at least 5, the reader's minimum).
        fault_mix: probability of each fault type (:data:`FAULTS`), normalised.
        silent_rate: probability that the root's own metrics are left untouched (0: a root with
            metrics always shows its fault, as every root of the real systems does).
        noise_mean: mean number of unrelated drifting (node, metric) pairs per incident.
        lag_prob: range of the probability that a node shows the fault one row after the node it
            depends on (drawn per incident).
        early_onset_rate: probability that the fault starts one row inside the window's pre-onset
            reference rows (a window opened late), so the reference is partly faulty.
        partial_symptom_rate: probability that each of the root's own effects goes unseen (its
            metric measured where the fault does not show), keeping at least one role the fault
            implies; the neighbours' effects stay.
        hidden_edge_rate: probability that the fault also reaches a leaf sibling of the root (a
            node without callees sharing a caller with it) over an edge the graph does not show.
        stale_rate / stale_share / stale_z: with probability ``stale_rate`` the baseline is stale: a
            share (drawn from ``stale_share``) of all columns is offset for the whole window by a
            log-uniform ``stale_z`` number of baseline scales, either sign.
        subtree_drift_rate / subtree_z: with probability ``subtree_drift_rate`` a random node and
            every node that (transitively) calls it drift in latency for the whole window, by
            ``subtree_z`` scales at the node, added up along the call chain as a fault would.
        noise_sd: range of the standard deviation of Gaussian noise added to every column, in
            baseline scales (drawn per incident).
        seed: random seed.
    """

    n_incidents: int = 6000
    window_rows: tuple[int, int] = (5, 12)
    fault_mix: dict[str, float] = field(
        default_factory=lambda: {
            "latency": 0.35,
            "errors": 0.25,
            "saturation": 0.15,
            "traffic": 0.10,
            "stop": 0.15,
        }
    )
    silent_rate: float = 0.0
    noise_mean: float = 2.5
    lag_prob: tuple[float, float] = (0.0, 0.6)
    early_onset_rate: float = 0.1
    partial_symptom_rate: float = 0.3
    hidden_edge_rate: float = 0.25
    stale_rate: float = 0.7
    stale_share: tuple[float, float] = (0.0, 0.4)
    stale_z: tuple[float, float] = (2.0, 40.0)
    subtree_drift_rate: float = 0.5
    subtree_z: tuple[float, float] = (3.0, 60.0)
    noise_sd: tuple[float, float] = (0.0, 1.0)
    seed: int = 0


SYMPTOM_ROLES: dict[str, frozenset[str]] = {
    "latency": frozenset({"latency"}),
    "errors": frozenset({"errors", "success"}),
    "saturation": frozenset({"saturation", "latency"}),
    "traffic": frozenset({"traffic"}),
    "stop": frozenset({"traffic", "errors", "success"}),
}
"""Roles in which a root shows each fault type (a root with a scored metric of one of them must
alert on one of them, or the incident is drawn again)."""

_Effects = dict[tuple[int, str], tuple[str, float]]
"""What a fault does to a window: ``{(node index, role): (kind, amount)}``; kind ``add`` (absolute),
``mul`` (factor), ``drop`` (share of the value), ``errs`` (error counts up by a share), ``sat``
(up by ``amount`` times the column's typical level)."""


LATENCY_UNIT_S: dict[str, float] = {
    "s": 1.0,
    "sec": 1.0,
    "secs": 1.0,
    "second": 1.0,
    "seconds": 1.0,
    "ms": 1e-3,
    "msec": 1e-3,
    "millis": 1e-3,
    "millisecond": 1e-3,
    "milliseconds": 1e-3,
    "us": 1e-6,
    "usec": 1e-6,
    "micros": 1e-6,
    "microsecond": 1e-6,
    "microseconds": 1e-6,
    "ns": 1e-9,
    "nanos": 1e-9,
    "nanosecond": 1e-9,
    "nanoseconds": 1e-9,
}
"""Seconds per unit, by the unit word of a latency metric's name (``istio_request_duration_milliseconds``
-> 1e-3)."""


def latency_unit_s(metric: str) -> float | None:
    """Seconds per unit of latency metric ``metric`` from its last unit word, ``None`` if it names
    none (``latency``); label values of a Prometheus series name are not read
    (``'latency{cluster="gke-us-central1"}'`` -> ``None``, see
    :func:`fleetmind.data.metric_roles.metric_name_part`)."""
    found = [LATENCY_UNIT_S[w] for w in words(metric) if w in LATENCY_UNIT_S]
    return found[-1] if found else None


@dataclass
class SynthIncident:
    """One synthetic incident: alerts (Alertmanager v4 dicts), root node index and id, fault, window."""

    alerts: list[dict[str, Any]]
    root: int
    root_id: str
    fault: str
    silent: bool
    window_rows: int


class SystemModel:
    """A system as the synthesiser sees it: graph, normal period, baseline, metric groups.

    Args:
        graph: the call graph (edges ``caller -> callee``, any edge kind counts as a dependency).
        normal: normal-period metrics, columns ``(node, metric, statistic)`` (:func:`~fleetmind.data.petshop.read_metrics_csv`).
        config: detection rules (the adapter's :class:`DetectorConfig` by default).

    Attributes:
        groups: ``{(node_index, role): column indices}`` where ``role`` is the role map's (:meth:`fleetmind.data.metric_roles.RoleMap.role`).
        observed: ``(|V|, len(ROLES))`` bool, node ``v`` has a scored metric of model role ``r``.
        callers / callees: adjacency lists of node indices.
        nodes: how the normal period's node names match the graph; the columns of names that are
            not graph nodes (:attr:`NodeMatch.not_in_graph`) are left out of every incident.
    """

    def __init__(
        self, graph: DependencyGraph, normal: pd.DataFrame, config: DetectorConfig | None = None
    ) -> None:
        self.graph = graph
        self.config = config or DetectorConfig()
        need = self.config.min_normal_points
        if len(normal) < need:
            raise DataError(
                f"normal period has {len(normal)} rows; at least {need} are needed "
                "(min_normal_points: a metric's baseline needs that many values)"
            )
        self.normal = normal
        self.baseline: Baseline = fit_baseline(normal, self.config)
        self.values = normal.to_numpy(dtype=float)
        cols = list(normal.columns)
        scored = set(self.baseline.median.index)
        self.med = np.array(
            [float(self.baseline.median[c]) if c in scored else np.nan for c in cols]
        )
        self.scale = np.array(
            [float(self.baseline.scale[c]) if c in scored else np.nan for c in cols]
        )
        n = graph.num_nodes
        self.nodes: NodeMatch = match_nodes(normal.columns.get_level_values(0), graph)
        self.groups: dict[tuple[int, str], list[int]] = {}
        self.observed = np.zeros((n, len(ROLES)), dtype=bool)
        for j, (node, metric, _stat) in enumerate(cols):
            i = graph.index.get(str(node))
            if i is None:
                continue
            self.groups.setdefault((i, self.config.roles.role(metric)), []).append(j)
            if cols[j] in scored:
                self.observed[i, ROLES.index(self.config.roles.model_role(metric))] = True
        # a headroom metric (MemAvailable, error budget left: direction "down" outside the success
        # role) falls where its role's fault pushes a metric up
        self._falls = np.array(
            [
                self.config.direction(m) == "down"
                and self.config.roles.role(m) not in ("success", "traffic")
                for _, m, _ in cols
            ],
            dtype=bool,
        )
        self.callers: list[list[int]] = [[] for _ in range(n)]
        self.callees: list[list[int]] = [[] for _ in range(n)]
        for s, d in graph.edge_index.T:
            if s != d:
                self.callers[int(d)].append(int(s))
                self.callees[int(s)].append(int(d))
        has_metrics = self.observed.any(axis=1)
        self.candidates = np.array(
            [i for i in range(n) if has_metrics[i] or any(has_metrics[c] for c in self.callers[i])],
            dtype=np.int64,
        )
        # unmonitored nodes (no metric of their own) are roots less often: a fault there shows only
        # through its callers, so the prior favours components an operator watches
        w = np.where(has_metrics[self.candidates], 1.0, 0.1) if self.candidates.size else None
        self.candidate_p = None if w is None else w / w.sum()
        if len(scored) == 0:
            most = int(normal.notna().sum().max()) if normal.shape[1] else 0
            raise DataError(
                f"normal period: no metric column has a baseline: one needs at least {need} "
                f"non-NaN values and the most any column has is {most} (of {len(normal)} rows)"
            )
        if self.candidates.size == 0:
            raise DataError(
                f"graph {graph.name!r}: no node has a normal-period metric with a baseline "
                "(do the metrics.csv node names match graph.csv?)"
            )
        self._unit_s = self._latency_units(cols)
        lat = [
            self._to_seconds(j, abs(self.med[j]))
            for (_, role), js in self.groups.items()
            if role == "latency"
            for j in js
            if np.isfinite(self.med[j])
        ]
        self.latency_ref = float(np.median(lat)) if lat else 1.0
        self._prepare_detector()

    def _prepare_detector(self) -> None:
        """Column arrays for :meth:`detect`: the columns :func:`~fleetmind.data.petshop.detect_alerts` scores, in its order."""
        cfg = self.config
        scored = set(self.baseline.median.index)
        chosen = _pick_statistics(self.normal.columns, cfg.statistic_preference, scored)
        pos = {c: j for j, c in enumerate(self.normal.columns)}
        self._det_cols: list[tuple[str, str, str]] = []
        for (node, metric), stat in chosen.items():
            if cfg.metrics is not None and metric not in cfg.metrics:
                continue
            if (node, metric, stat) in scored:
                self._det_cols.append((node, metric, stat))
        self._det_idx = np.array([pos[c] for c in self._det_cols], dtype=np.int64)
        self._det_med = np.array([float(self.baseline.median[c]) for c in self._det_cols])
        self._det_scale = np.array([float(self.baseline.scale[c]) for c in self._det_cols])
        self._det_dir = [cfg.direction(m) for _, m, _ in self._det_cols]
        self._det_role = [cfg.roles.role(m) for _, m, _ in self._det_cols]

    def detect(self, x: np.ndarray, times: np.ndarray) -> list[dict[str, Any]]:
        """:func:`fleetmind.data.petshop.detect_alerts` on a window given as an array (the same rules and the
        same alert objects, ``tests/test_rca_fit.py`` checks equality), vectorised over columns.

        Args:
            x: ``(W, C)`` window values in the columns of the normal period.
            times: ``(W,)`` unix seconds.
        """
        alerts, _ = alerts_from_scores(
            self._det_cols,
            x[:, self._det_idx],
            self._det_med,
            self._det_scale,
            self._det_dir,
            times,
            self.config,
        )
        return alerts

    # ------------------------------------------------------------------ helpers
    def _latency_units(self, cols: list[tuple[str, str, str]]) -> np.ndarray | None:
        """Seconds per unit of each column (``(C,)``, 1.0 outside the latency role) when the
        latency columns name two or more different units; ``None`` (rises in the root's own unit,
        as before) when they agree or name none."""
        lat = {j for (_, role), js in self.groups.items() if role == "latency" for j in js}
        units = {j: latency_unit_s(cols[j][1]) for j in lat}
        known = [u for u in units.values() if u is not None]
        if len(set(known)) < 2:
            return None
        most = max(sorted(set(known)), key=known.count)
        out = np.ones(len(cols))
        for j, u in units.items():
            out[j] = most if u is None else u
        return out

    def _to_seconds(self, j: int, value: float) -> float:
        """``value`` in column ``j``'s unit as seconds (as is when units are not converted)."""
        return value if self._unit_s is None else value * float(self._unit_s[j])

    def _from_seconds(self, j: int, value: Any) -> Any:
        """``value`` (seconds, a number or an array) in column ``j``'s unit (as is when units are
        not converted)."""
        return value if self._unit_s is None else value / float(self._unit_s[j])

    def _level(self, j: int) -> float:
        """A column's typical size: ``max(|median|, scale)`` (1.0 without a baseline)."""
        m, s = self.med[j], self.scale[j]
        if not np.isfinite(m):
            return 1.0
        return float(max(abs(m), s))

    def _spread(
        self, rng: np.random.Generator, root: int, amount: float, w_lo: float, w_hi: float, up: bool
    ) -> dict[int, float]:
        """Propagate ``amount`` from ``root`` to its callers (``up``) or callees, scaled per edge.

        Returns ``{node: amount}`` (the root included). Latency adds up: a node reached along several
        edges sums their contributions; each edge's weight is log-uniform in ``[w_lo, w_hi]``, and
        with probability 0.15 an edge carries nothing.
        """
        out = {root: amount}
        nxt = self.callers if up else self.callees
        q = deque([root])
        seen = {root}
        while q:
            v = q.popleft()
            for u in nxt[v]:
                w = (
                    0.0
                    if rng.random() < 0.15
                    else float(np.exp(rng.uniform(*np.log([w_lo, w_hi]))))
                )
                if w == 0.0 or u == root:
                    continue
                out[u] = out.get(u, 0.0) + w * out[v]
                if u not in seen:
                    seen.add(u)
                    q.append(u)
        return out

    def _onsets(self, rng: np.random.Generator, root: int, onset: int, nodes: set[int]) -> dict:
        """Onset row of every affected node: BFS from the root, +1 row w.p. ``lag_prob``."""
        out = {root: onset}
        q = deque([root])
        while q:
            v = q.popleft()
            for u in self.callers[v] + self.callees[v]:
                if u in nodes and u not in out:
                    r = rng.random()
                    lag = 1 if r < self._lag else (-1 if r < self._lag * 4 / 3 else 0)
                    out[u] = max(0, out[v] + lag)
                    q.append(u)
        for u in nodes:
            out.setdefault(u, onset)
        return out

    # ------------------------------------------------------------------ one incident
    def incident(self, rng: np.random.Generator, cfg: SynthConfig) -> SynthIncident | None:
        """Synthesise one incident, or ``None`` when the fault raised no alert near the root."""
        self._lag = float(rng.uniform(*cfg.lag_prob))
        t = len(self.values)
        lo, hi = cfg.window_rows
        w_rows = int(min(t, rng.integers(max(lo, 1), max(lo, hi) + 1)))
        s = int(rng.integers(0, t - w_rows + 1))
        x = self.values[s : s + w_rows].copy()
        root = int(rng.choice(self.candidates, p=self.candidate_p))
        faults = list(cfg.fault_mix)
        p = np.array([cfg.fault_mix[f] for f in faults], dtype=float)
        fault = str(rng.choice(faults, p=p / p.sum()))
        silent = bool(rng.random() < cfg.silent_rate)
        k_ref = reference_rows(w_rows, self.config) or 0
        onset = int(rng.integers(k_ref, max(k_ref + 1, w_rows - 1)))
        if k_ref > 0 and rng.random() < cfg.early_onset_rate:
            onset = k_ref - 1  # the window opened late: its reference already holds the fault

        effects = self._fault_effects(rng, root, fault)
        if rng.random() < cfg.hidden_edge_rate:
            self._hidden_edge(rng, root, effects)
        self._partial_symptoms(rng, cfg, root, fault, effects)
        affected = {v for v, _ in effects} | {root}
        starts = self._onsets(rng, root, onset, affected)
        self._inject(rng, x, effects, starts, skip=root if silent else None)
        self._unrelated_drifts(rng, cfg, x, affected, root)
        self._drift(rng, cfg, x)
        alerts = self.detect(x, self.normal.index.to_numpy(dtype=float)[s : s + w_rows])
        if not alerts:
            return None
        hit = {self.graph.index.get(a["labels"].get("service", "")) for a in alerts}
        if not (hit & affected):
            return None
        if not silent and not self._shows_symptom(root, fault, alerts):
            return None
        return SynthIncident(
            alerts=alerts,
            root=root,
            root_id=self.graph.nodes[root].id,
            fault=fault,
            silent=silent or not self.observed[root].any(),
            window_rows=w_rows,
        )

    # ------------------------------------------------------------------ incident steps
    def _fault_effects(self, rng: np.random.Generator, root: int, fault: str) -> _Effects:
        """What ``fault`` at ``root`` does to the root and its neighbours (the table in the module
        docstring), as ``{(node, role): (kind, amount)}``."""
        effects: _Effects = {}
        if fault == "latency":
            self._latency_effects(rng, root, effects, 0.3, 30.0)
            if rng.random() < 0.3:
                effects[(root, "saturation")] = ("sat", float(rng.uniform(0.5, 5)))
        elif fault == "errors":
            self._error_effects(rng, root, effects, 0.01, 0.8)
        elif fault == "saturation":
            effects[(root, "saturation")] = ("sat", float(rng.uniform(0.5, 5)))
            self._latency_effects(rng, root, effects, 0.2, 10.0)
            if rng.random() < 0.3:
                effects[(root, "success")] = ("drop", float(rng.uniform(0.01, 0.3)))
        elif fault == "traffic":
            f = float(np.exp(rng.uniform(np.log(2), np.log(10))))
            f = 1.0 / f if rng.random() < 0.4 else f
            for v, a in self._spread(rng, root, f - 1.0, 0.3, 1.0, up=False).items():
                effects[(v, "traffic")] = ("mul", max(0.0, 1.0 + a))
            if f > 1 and rng.random() < 0.5:
                self._latency_effects(rng, root, effects, 0.2, 5.0)
        else:  # stop
            self._error_effects(rng, root, effects, 0.3, 1.0)
            effects[(root, "traffic")] = ("mul", float(rng.uniform(0.0, 0.2)))
        return effects

    def _latency_effects(
        self,
        rng: np.random.Generator,
        root: int,
        effects: _Effects,
        scale_lo: float,
        scale_hi: float,
    ) -> None:
        """Add a latency rise at ``root`` (log-uniform ``[scale_lo, scale_hi]`` times the root's
        typical latency) that adds up along the call chains to its callers (in seconds when the
        system's latency units differ, :meth:`_latency_units`)."""
        meds = [
            self._to_seconds(j, abs(self.med[j])) for j in self.groups.get((root, "latency"), [])
        ]
        meds = [m for m in meds if np.isfinite(m) and m > 0]
        ref = float(np.median(meds)) if meds else self.latency_ref
        amount = ref * float(np.exp(rng.uniform(np.log(scale_lo), np.log(scale_hi))))
        for v, a in self._spread(rng, root, amount, 0.1, 3.0, up=True).items():
            effects[(v, "latency")] = ("add", a)

    def _error_effects(
        self, rng: np.random.Generator, root: int, effects: _Effects, d_lo: float, d_hi: float
    ) -> None:
        """Add a success-rate drop (share log-uniform in ``[d_lo, d_hi]``) at ``root``, diluted
        toward its callers; sometimes the callers' latency rises too (timeouts)."""
        d = float(np.exp(rng.uniform(np.log(d_lo), np.log(d_hi))))
        for v, a in self._spread(rng, root, d, 0.1, 0.9, up=True).items():
            effects[(v, "success")] = ("drop", min(a, 1.0))
            effects[(v, "errors")] = ("errs", min(a, 1.0))
        if rng.random() < 0.3:  # timeouts: callers wait
            for v, a in self._spread(
                rng, root, self.latency_ref * rng.uniform(0.5, 5), 0.1, 1.0, up=True
            ).items():
                if v != root:
                    effects[(v, "latency")] = ("add", a)

    def _hidden_edge(self, rng: np.random.Generator, root: int, effects: _Effects) -> None:
        """Copy the root's effects, each scaled by its own factor, to one leaf sibling of the root.

        An edge the graph misses (load balancers, proxies, shared hosts that traces do not show):
        the fault also reaches a node without callees that shares a caller with the root.
        """
        sibs = sorted(
            {u for c in self.callers[root] for u in self.callees[c] if not self.callees[u]} - {root}
        )
        if not sibs:
            return
        u = int(rng.choice(sibs))
        for (v, role), (kind, amount) in list(effects.items()):
            if v == root and (u, role) not in effects:
                w = float(np.exp(rng.uniform(np.log(0.5), np.log(5.0))))
                effects[(u, role)] = (
                    (kind, amount * w)
                    if kind == "add"
                    else (kind, min(1.0, amount * w))
                    if kind in ("drop", "errs")
                    else (kind, amount)
                )

    def _partial_symptoms(
        self, rng: np.random.Generator, cfg: SynthConfig, root: int, fault: str, effects: _Effects
    ) -> None:
        """Drop each of the root's own effects with probability ``cfg.partial_symptom_rate`` (a
        metric measured where the fault does not show), keeping one role the fault implies; the
        neighbours' effects stay."""
        own = [k for k in effects if k[0] == root]
        keep_one = [k for k in own if k[1] in SYMPTOM_ROLES[fault] and self.groups.get(k)]
        if keep_one:
            kept = keep_one[int(rng.integers(len(keep_one)))]
            for k in own:
                if k != kept and rng.random() < cfg.partial_symptom_rate:
                    del effects[k]

    def _inject(
        self,
        rng: np.random.Generator,
        x: np.ndarray,
        effects: _Effects,
        starts: dict[int, int],
        skip: int | None,
    ) -> None:
        """Apply ``effects`` to the window ``x`` ``(W, C)`` in place, each node from its onset row
        in ``starts`` (the first faulty row ramped in); node ``skip`` (a silent root) is left as is.
        A headroom column (direction ``down``: ``MemAvailable``) is divided by ``1 + rise / level``
        where its role's other columns rise."""
        w_rows = x.shape[0]
        for (v, role), (kind, amount) in effects.items():
            if v == skip:
                continue
            js = self.groups.get((v, role), [])
            if not js:
                continue
            r0 = min(starts[v], w_rows - 1)
            ramp = np.ones(w_rows - r0)
            ramp[0] = rng.uniform(0.3, 1.0)
            for j in js:
                col = x[r0:, j]
                if self._falls[j] and kind in ("add", "sat"):  # headroom shrinks as the use rises
                    rise = (
                        self._from_seconds(j, amount) * ramp / self._level(j)
                        if kind == "add"
                        else amount * ramp
                    )
                    col /= 1.0 + rise
                elif kind == "add":  # a latency rise: in the column's unit
                    col += self._from_seconds(j, amount) * ramp
                elif kind == "mul":
                    col *= 1.0 + (amount - 1.0) * ramp
                elif kind == "drop":
                    col *= 1.0 - amount * ramp
                elif kind == "errs":
                    col += self._level(j) * 50.0 * amount * ramp
                else:  # "sat": saturation rises by amount x its typical level
                    col += self._level(j) * amount * ramp

    def _unrelated_drifts(
        self,
        rng: np.random.Generator,
        cfg: SynthConfig,
        x: np.ndarray,
        affected: set[int],
        root: int,
    ) -> None:
        """Shift a Poisson(``cfg.noise_mean``) number of random (node, role) groups of ``x`` for the
        whole window by 3-60 baseline scales (30 % of them next to the ``affected`` nodes)."""
        near = sorted({u for v in affected for u in self.callers[v] + self.callees[v]} - {root})
        keys = list(self.groups)
        for _ in range(int(rng.poisson(cfg.noise_mean))):
            if near and rng.random() < 0.3:
                v = int(rng.choice(near))
                opts = [k for k in keys if k[0] == v]
                if not opts:
                    continue
                v, role = opts[int(rng.integers(len(opts)))]
            else:
                v, role = keys[int(rng.integers(len(keys)))]
            z = float(np.exp(rng.uniform(np.log(3.0), np.log(60.0))))
            sign = (
                -1.0 if role == "success" else (1.0 if role != "traffic" else rng.choice([-1, 1]))
            )
            for j in self.groups[(v, role)]:
                if np.isfinite(self.scale[j]):
                    x[:, j] += (-sign if self._falls[j] else sign) * z * self.scale[j]

    def _shows_symptom(self, root: int, fault: str, alerts: list[dict[str, Any]]) -> bool:
        """Whether the root alerts in a role its fault implies (:data:`SYMPTOM_ROLES`); a root with
        no scored metric of those roles passes (it cannot show them)."""
        want = SYMPTOM_ROLES[fault]
        rid = self.graph.nodes[root].id
        roles = self.config.roles
        can = any(
            self.graph.index.get(c[0]) == root and roles.role(c[1]) in want for c in self._det_cols
        )
        if not can:
            return True
        return any(
            a["labels"].get("service") == rid and roles.role(a["labels"].get("metric", "")) in want
            for a in alerts
        )

    def _drift(self, rng: np.random.Generator, cfg: SynthConfig, x: np.ndarray) -> None:
        """Domain randomisation on a window ``x`` ``(W, C)`` in place: a stale baseline (many
        columns offset for the whole window), a subtree-wide latency drift, Gaussian noise."""
        w_rows, n_cols = x.shape
        finite = np.isfinite(self.scale)
        if rng.random() < cfg.stale_rate:
            share = rng.uniform(*cfg.stale_share)
            cols = np.flatnonzero(finite & (rng.random(n_cols) < share))
            z = np.exp(rng.uniform(*np.log(cfg.stale_z), size=cols.size))
            x[:, cols] += rng.choice([-1.0, 1.0], size=cols.size) * z * self.scale[cols]
        if rng.random() < cfg.subtree_drift_rate and self.candidates.size:
            v = int(rng.choice(self.candidates))
            z = float(np.exp(rng.uniform(*np.log(cfg.subtree_z))))
            lat = [j for j in self.groups.get((v, "latency"), []) if finite[j]]
            ref = (
                float(np.median([self._to_seconds(j, self.scale[j]) for j in lat])) if lat else 0.0
            )
            if ref > 0:
                for u, a in self._spread(rng, v, z * ref, 0.1, 3.0, up=True).items():
                    for j in self.groups.get((u, "latency"), []):
                        aj = self._from_seconds(j, a)
                        x[:, j] += -aj if self._falls[j] else aj
        sd = rng.uniform(*cfg.noise_sd)
        if sd > 0:
            noise = rng.standard_normal(x.shape) * sd * np.where(finite, self.scale, 0.0)
            x += noise

    def _no_alerts_message(self, made: int, tries: int) -> str:
        """Why injected faults raise almost no alerts: every scored metric of role ``other`` (names
        the role rules do not know, so no fault moves them), or else a noisy normal period."""
        roles = self.config.roles
        found: dict[str, list[str]] = {}
        for _, metric, _ in self._det_cols:
            names = found.setdefault(roles.role(metric), [])
            if metric not in names:
                names.append(metric)
        listed = "; ".join(f"{r}: {', '.join(ms[:5])}" for r, ms in sorted(found.items()))
        head = (
            f"graph {self.graph.name!r}: injected faults raise almost no alerts "
            f"({made} incidents in {tries} tries)"
            if tries
            else f"graph {self.graph.name!r}: no injected fault can raise an alert"
        )
        if set(found) <= {"other"}:
            return (
                f"{head}: every scored metric has role other ({listed}), and faults move only "
                "latency, errors, success, saturation and traffic metrics; name their roles in a "
                "roles.yaml in the scenario folder or --roles FILE (e.g. 'my_metric: latency')"
            )
        return f"{head}; is the normal period too noisy? (metric roles: {listed})"

    def incidents(self, cfg: SynthConfig, progress: Any = None) -> Iterator[SynthIncident]:
        """Yield ``cfg.n_incidents`` incidents (seeded; ``progress(n)`` is called per incident).

        Raises:
            DataError: every scored metric has role ``other`` (checked before any incident is
                drawn: no fault moves such a metric, whatever alerts noise raises), or injected
                faults raise almost no alerts."""
        if self._det_role and set(self._det_role) <= {"other"}:
            raise DataError(self._no_alerts_message(0, 0))
        rng = np.random.default_rng(cfg.seed)
        made, tries = 0, 0
        while made < cfg.n_incidents:
            tries += 1
            if tries > 20 * cfg.n_incidents + 100:
                raise DataError(self._no_alerts_message(made, tries))
            inc = self.incident(rng, cfg)
            if inc is None:
                continue
            made += 1
            if progress is not None:
                progress(1)
            yield inc
