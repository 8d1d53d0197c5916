"""Evaluate root-cause methods on a PetShop-format scenario folder (``fleetmind rca petshop``).

Every method ranks the candidate nodes of each issue; the rank of the ground-truth root cause gives

* ``AC@k``, ``Avg@5``, ``MRR`` as defined in :mod:`fleetmind.rca.metrics` (a method that does not return the
  root cause misses at every ``k`` and adds 0 to MRR);
* ``ms_per_incident``: mean wall time of the method's ranking call (alert detection, shared by all
  alert-based methods, is reported once as ``alerting_ms_per_incident``).

Methods: alert-based analyzers (``find_root_causes(graph, alerts)``: the FleetMind propagation ranker,
the GAT when a model is available, the simulated-data baselines of ``rca.baselines``)
and the metric-level baselines of :mod:`fleetmind.rca.petshop_baselines`.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from fleetmind.data.errors import FleetMindError
from fleetmind.data.petshop import PetShopIssue, PetShopScenario, read_metrics_csv, read_target
from fleetmind.progress import progress_disable
from fleetmind.rca.anchoring import anchor_result
from fleetmind.rca.base import BaseAnalyzer
from fleetmind.rca.baselines import BASELINES
from fleetmind.rca.drift import alert_prevalence, downweight_alerts, prevalent_pairs
from fleetmind.rca.metrics import make_analyzers, rank_of, summarize
from fleetmind.rca.petshop_baselines import METRIC_BASELINES, MetricAnalyzer
from fleetmind.rca.propagation import PropagationRanker
from fleetmind.rca.shared_callee import promote_shared_callees

PUBLISHED: dict[str, Any] = {
    "petshop_traversal": {
        "source": "PetShop repository evaluation notebook (low_traffic, 26 issues)",
        "latency": {"top1": 0.571, "top3": 0.571, "n": 14},
        "availability": {"top1": 0.833, "top3": 1.000, "n": 12},
    },
    "baro": {
        "source": "RCAEval 1.8.1 on the 26 issues (shared/data/petshop/PROVENANCE.md)",
        "ac@1": 0.115,
        "ac@3": 0.385,
        "ac@5": 0.500,
    },
    "nsigma": {
        "source": "RCAEval 1.8.1 on the 26 issues (shared/data/petshop/PROVENANCE.md)",
        "ac@1": 0.192,
        "ac@3": 0.462,
        "ac@5": 0.692,
    },
}
"""Published reference figures on ``low_traffic`` (reported next to ours, never used for ranking)."""


def default_alert_methods(
    model: str | None = None, seed: int = 0, gat: bool = True, simulated: bool = True
) -> tuple[dict[str, BaseAnalyzer], dict[str, str]]:
    """The alert-based methods available here, and ``{name: reason}`` for those that are not.

    ``propagation`` always; ``gat`` (zero-shot: the released artifact or ``model``) when it loads;
    the simulated-data baselines of :data:`fleetmind.rca.baselines.BASELINES` (through
    :func:`fleetmind.rca.metrics.make_analyzers`, so they are built exactly as ``rca evaluate`` builds them).
    """

    methods: dict[str, BaseAnalyzer] = {"propagation": PropagationRanker()}
    skipped: dict[str, str] = {}
    if gat:
        try:
            methods.update(make_analyzers(["gat"], model=model, seed=seed))
        except (FleetMindError, ImportError, OSError) as err:
            skipped["gat"] = str(err)
    if simulated:
        try:
            methods.update(make_analyzers(list(BASELINES), model=None, seed=seed))
        except (FleetMindError, ImportError) as err:
            skipped["simulated_baselines"] = str(err)
    return methods, skipped


def evaluate_scenario(
    scenario: PetShopScenario,
    split: str = "all",
    alert_methods: Mapping[str, BaseAnalyzer] | None = None,
    metric_methods: Mapping[str, MetricAnalyzer] | None = None,
    progress: bool = False,
    drift_weighting: bool = True,
    anchored: Collection[str] = ("gat_fit",),
    shared_callee: Collection[str] = ("gat_fit",),
) -> dict[str, Any]:
    """Run every method on every issue of ``split`` and summarize.

    Alert-based methods see every window's alerts after :func:`fleetmind.rca.drift.downweight_alerts`
    with the prevalence measured over all windows of the scenario (``drift_weighting``; label-free:
    only the windows' alerts are read). Methods named in ``anchored`` are symptom-anchored on the
    issue's target node (:func:`fleetmind.rca.anchoring.anchor_result`) and reported under their name;
    the same method without anchoring is reported as ``<name>:unanchored``. Methods named in
    ``shared_callee`` then move shared quiet callees above their callers
    (:func:`fleetmind.rca.shared_callee.promote_shared_callees`, prevalent pairs as in the drift
    weighting); the ranking before that step is reported as ``<name>:no_shared_callee``.

    Returns:
        ``{"n_incidents", "methods": {name: metrics}, "by_split": {split: {"n_incidents", "methods"}},
        "by_fault_type": {...}, "per_incident": [{"id", "split", "fault_type", "root_cause",
        "n_alerts", "ranks": {name: rank|None}, "top3": {name: [...]}, "shared_callees": {name:
        {callee: [callers]}} (only where the rule moved a node), "reasons": {name: why} (only
        where a metric-level method gave a reason instead of a ranking)}], "skipped": {name: why}
        (metric-level methods that could not run on any issue, ``extra["ran"] is False``: no
        figures; one that ran and found the target not anomalous is a miss and keeps its row),
        "alerting_ms_per_incident", "roles", "evidence", "published"}``; ``methods`` covers
        ``split``.
    """
    alert_methods = dict(
        {"propagation": PropagationRanker()} if alert_methods is None else alert_methods
    )
    metric_methods = dict(
        {n: cls() for n, cls in METRIC_BASELINES.items()}
        if metric_methods is None
        else metric_methods
    )
    issues = scenario.issues(split)
    anchored = [n for n in anchored if n in alert_methods]
    shared_callee = [n for n in shared_callee if n in alert_methods]
    names = (
        list(alert_methods)
        + [f"{n}:unanchored" for n in anchored]
        + [f"{n}:no_shared_callee" for n in shared_callee]
        + list(metric_methods)
    )
    rows: list[dict[str, Any]] = []
    times: dict[str, list[float]] = {n: [] for n in names}
    for method in metric_methods.values():  # import optional backends before anything is timed
        prepare = getattr(method, "prepare", None)
        if prepare is not None:
            prepare()
    bar = None
    if progress:
        from tqdm import tqdm

        off = progress_disable(True)
        bar = tqdm(total=len(issues), desc="rca petshop", unit="issue", disable=off)
    incidents, alert_ms = _detect(scenario, issues)
    all_windows = (
        [scenario.incident(i)["alerts"] for i in scenario.issues("all")]
        if split != "all"
        else [inc["alerts"] for inc in incidents]
    )
    prevalence = alert_prevalence(all_windows)
    post = _PostSteps(
        anchored=tuple(anchored),
        shared_callee=tuple(shared_callee),
        prevalent=prevalent_pairs(prevalence, len(all_windows)),
    )
    for issue, inc in zip(issues, incidents, strict=True):
        raw_alerts = inc["alerts"]
        alerts = (
            downweight_alerts(
                raw_alerts, prevalence, len(all_windows), z_threshold=scenario.config.z_threshold
            )
            if drift_weighting
            else raw_alerts
        )
        window = read_metrics_csv(issue.path / "metrics.csv")
        target = read_target(issue.path / "target.json")["target"]
        row = _incident_row(inc, len(raw_alerts), len(alerts))
        _rank_by_alerts(row, times, scenario, alerts, alert_methods, post, target)
        _rank_by_metrics(row, times, scenario, window, metric_methods, target)
        rows.append(row)
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    skipped = _drop_never_ran(rows, list(metric_methods))
    out = _summaries(rows, times, [n for n in names if n not in skipped])
    out["skipped"] = skipped
    out["alerting_ms_per_incident"] = float(sum(alert_ms) / max(1, len(alert_ms)))
    out["roles"] = scenario.roles()
    out["evidence"] = post.report(scenario, drift_weighting, len(all_windows))
    out["published"] = PUBLISHED
    return out


def _drop_never_ran(rows: list[dict[str, Any]], metric_names: list[str]) -> dict[str, str]:
    """The metric-level methods that could not run on any issue (:func:`_never_ran`: name ->
    why), taken out of every row's ``ranks`` and ``top3`` (and each row's internal ``_not_run``
    marker dropped), so that they get no figures."""
    skipped = _never_ran(rows, metric_names)
    for row in rows:
        row.pop("_not_run", None)
        for name in skipped:
            row["ranks"].pop(name, None)
            row["top3"].pop(name, None)
    return skipped


def _detect(
    scenario: PetShopScenario, issues: list[PetShopIssue]
) -> tuple[list[dict[str, Any]], list[float]]:
    """Each issue's incident (its window's alerts and labels) and the alert detection time, in ms."""
    incidents, alert_ms = [], []
    for issue in issues:
        t0 = time.perf_counter()
        incidents.append(scenario.incident(issue))
        alert_ms.append((time.perf_counter() - t0) * 1e3)
    return incidents, alert_ms


def _incident_row(inc: Mapping[str, Any], n_alerts: int, n_weighted: int) -> dict[str, Any]:
    """The ``per_incident`` row of one incident, ranks and top 3 still empty."""
    return {
        "id": inc["id"],
        "split": inc["split"],
        "fault_type": inc["fault_type"],
        "root_cause": inc["root_cause"],
        "n_alerts": n_alerts,
        "n_alerts_weighted": n_weighted,
        # the window's metric columns naming no graph node (data.petshop.NodeMatch), when any
        "not_in_graph": (inc.get("window") or {}).get("not_in_graph"),
        "ranks": {},
        "top3": {},
    }


def _record(row: dict[str, Any], name: str, ranked: list[str]) -> None:
    """Record under ``name`` in ``row`` the root cause's rank in ``ranked`` and the top 3 of ``ranked``."""
    row["ranks"][name] = rank_of(ranked, row["root_cause"])
    row["top3"][name] = ranked[:3]


@dataclass(frozen=True)
class _PostSteps:
    """What follows a method's ranking: symptom anchoring for ``anchored`` methods, then the shared
    quiet callee rule for ``shared_callee`` methods (with the system's ``prevalent`` pairs)."""

    anchored: tuple[str, ...] = ()
    shared_callee: tuple[str, ...] = ()
    prevalent: frozenset[tuple[str, str]] = frozenset()

    def report(
        self, scenario: PetShopScenario, drift_weighting: bool, n_windows: int
    ) -> dict[str, Any]:
        """The ``evidence`` block of :func:`evaluate_scenario`'s result."""
        return {
            "pre_onset": scenario.config.pre_onset,
            "drift_weighting": drift_weighting,
            "windows_for_prevalence": n_windows,
            "prevalent_pairs": sorted(f"{k[0]}/{k[1]}" for k in self.prevalent),
            "anchored": list(self.anchored),
            "shared_callee": list(self.shared_callee),
        }


def _rank_by_alerts(
    row: dict[str, Any],
    times: dict[str, list[float]],
    scenario: PetShopScenario,
    alerts: list[dict[str, Any]],
    methods: Mapping[str, BaseAnalyzer],
    post: _PostSteps,
    target: Mapping[str, Any],
) -> None:
    """Rank one issue's ``alerts`` with every alert-based method into ``row``, times (ms) into
    ``times``. An anchored method is recorded plain as ``<name>:unanchored`` and then anchored on
    the target node; a shared-callee method is recorded as ``<name>:no_shared_callee`` before the
    rule moves shared quiet callees. A method's time includes its steps before."""
    for name, method in methods.items():
        t0 = time.perf_counter()
        res = method.find_root_causes(scenario.graph, alerts)
        if name in post.anchored:
            times[f"{name}:unanchored"].append((time.perf_counter() - t0) * 1e3)
            _record(row, f"{name}:unanchored", res.ranked_nodes())
            res = anchor_result(res, scenario.graph, alerts, str(target.get("node")))
        if name in post.shared_callee:
            times[f"{name}:no_shared_callee"].append((time.perf_counter() - t0) * 1e3)
            _record(row, f"{name}:no_shared_callee", res.ranked_nodes())
            res = promote_shared_callees(res, scenario.graph, alerts, post.prevalent)
            if "shared_callees" in res.extra:
                row.setdefault("shared_callees", {})[name] = res.extra["shared_callees"]
        times[name].append((time.perf_counter() - t0) * 1e3)
        _record(row, name, res.ranked_nodes())


def _rank_by_metrics(
    row: dict[str, Any],
    times: dict[str, list[float]],
    scenario: PetShopScenario,
    window: pd.DataFrame,
    methods: Mapping[str, MetricAnalyzer],
    target: Mapping[str, Any],
) -> None:
    """Rank one issue's metrics ``window`` with every metric-level method into ``row`` (with the
    backend each used, when it says), times (ms) into ``times``."""
    for name, method in methods.items():
        t0 = time.perf_counter()
        res = method.rank_metrics(scenario.graph, scenario.normal, window, target)
        times[name].append((time.perf_counter() - t0) * 1e3)
        _record(row, name, res.ranked_nodes())
        if "backend" in res.extra:
            row.setdefault("backend", {})[name] = res.extra["backend"]
        if res.extra.get("reason") and not res.causes:
            row.setdefault("reasons", {})[name] = str(res.extra["reason"])
        if res.extra.get("ran") is False:  # could not run (no target column): not a miss
            row.setdefault("_not_run", set()).add(name)


def _never_ran(rows: list[dict[str, Any]], names: Collection[str]) -> dict[str, str]:
    """``{name: reason}`` for the metric-level methods of ``names`` that could not run on any issue
    of ``rows`` (``extra["ran"] is False``:
    :class:`fleetmind.rca.petshop_baselines.TraversalBaseline` when no window has a scored target
    column): they get no figures (an AC@1 of 0.000 would read as a method that ran and missed). A
    method that ran and found nothing ("target not anomalous") is a miss and keeps its row."""
    out: dict[str, str] = {}
    for name in names:
        if not rows or any(name not in r.get("_not_run", ()) for r in rows):
            continue
        reasons = [r.get("reasons", {}).get(name) for r in rows]
        counts: dict[str, int] = {}
        for why in reasons:
            counts[str(why)] = counts.get(str(why), 0) + 1
        shown = "; ".join(f"{why} ({n} issues)" for why, n in counts.items())
        out[name] = f"no ranking for any of the {len(rows)} issues: {shown}"
    return out


def _summaries(
    rows: list[dict[str, Any]], times: dict[str, list[float]], names: list[str]
) -> dict[str, Any]:
    """Metrics of every method in ``names`` over all ``rows``, by split (with ``all`` when there are
    several) and by fault type, and the rows themselves as ``per_incident``."""

    def block(sel: list[int]) -> dict[str, Any]:
        return {
            "n_incidents": len(sel),
            "methods": {
                n: summarize([rows[i]["ranks"][n] for i in sel], [times[n][i] for i in sel])
                for n in names
            },
        }

    everything = list(range(len(rows)))
    out = block(everything)
    out["by_split"] = {
        s: block([i for i, r in enumerate(rows) if r["split"] == s])
        for s in sorted({r["split"] for r in rows})
    }
    if len(out["by_split"]) > 1:
        out["by_split"]["all"] = block(everything)
    out["by_fault_type"] = {
        f: block([i for i, r in enumerate(rows) if str(r["fault_type"]) == f])
        for f in sorted({str(r["fault_type"]) for r in rows})
    }
    out["per_incident"] = rows
    return out
