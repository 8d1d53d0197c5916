"""Down-weighting of (node, metric) pairs that alert in most windows of one system (label-free).

A metric that drifted since the normal period was recorded, or that is simply flaky, alerts in almost
every incident window of a system, whatever the fault. Such an alert says little about any one
incident. Given the alerts of a system's incident windows (unlabelled: only the alerts are read, never
a ground truth), :func:`alert_prevalence` measures for every ``(service, metric)`` pair the share of
windows in which it alerts, and :func:`downweight_alerts` scales each alert's evidence by

``w(f) = 1`` for ``f <= start``, ``w(f) = (1 - f) / (1 - start)`` above (0 at ``f = 1``),

multiplying its ``z_score`` annotation by ``w``; an alert whose weighted z-score falls to the detector
threshold or below is dropped. With fewer than ``min_windows`` windows nothing is changed (a share of a
handful of windows is noise).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

PairKey = tuple[str, str]
MIN_DRIFT_WINDOWS = 8
"""Fewer windows than this: prevalence is noise and nothing is down-weighted."""
DRIFT_START = 0.5
"""Share of windows above which a pair's alerts are drift rather than evidence."""


def alert_pair(alert: Mapping[str, Any]) -> PairKey:
    """The ``(service, metric)`` pair an alert is counted under (labels ``service`` or
    ``instance``; ``metric`` or ``alertname``)."""
    lab = alert.get("labels") or {}
    return (
        str(lab.get("service") or lab.get("instance") or ""),
        str(lab.get("metric") or lab.get("alertname") or ""),
    )


def alert_prevalence(windows: Sequence[Sequence[Mapping[str, Any]]]) -> dict[PairKey, float]:
    """Share of windows in which each ``(service, metric)`` pair alerts.

    Args:
        windows: the alerts (Alertmanager v4 dicts) of each incident window of one system.

    Returns:
        ``{(service, metric): share in [0, 1]}`` for pairs that alert at least once.
    """
    n = len(windows)
    counts: Counter[PairKey] = Counter()
    for alerts in windows:
        counts.update({alert_pair(a) for a in alerts})
    return {k: c / n for k, c in counts.items()} if n else {}


def prevalent_pairs(
    prevalence: Mapping[PairKey, float],
    n_windows: int,
    start: float = DRIFT_START,
    min_windows: int = MIN_DRIFT_WINDOWS,
) -> frozenset[PairKey]:
    """Pairs alerting in more than ``start`` of ``n_windows`` windows (none below
    ``min_windows``): the ones :func:`downweight_alerts` scales down."""
    if n_windows < min_windows:
        return frozenset()
    return frozenset(k for k, v in prevalence.items() if v > start)


def prevalence_weight(share: float, start: float = DRIFT_START) -> float:
    """``w(f)`` of the module docstring: 1 up to ``start``, then linear to 0 at ``f = 1``."""
    if share <= start:
        return 1.0
    return max(0.0, (1.0 - share) / (1.0 - start))


def downweight_alerts(
    alerts: Sequence[Mapping[str, Any]],
    prevalence: Mapping[PairKey, float],
    n_windows: int,
    start: float = DRIFT_START,
    min_windows: int = MIN_DRIFT_WINDOWS,
    z_threshold: float = 5.0,
) -> list[dict[str, Any]]:
    """Alerts with the evidence of prevalent pairs scaled down (see the module docstring).

    Args:
        alerts: one window's alerts.
        prevalence: :func:`alert_prevalence` over the system's windows.
        n_windows: how many windows ``prevalence`` was measured on.
        start: share above which an alert is down-weighted.
        min_windows: fewer windows than this: return the alerts unchanged.
        z_threshold: an alert whose weighted z-score is at most this is dropped.

    Returns:
        New alert dicts (inputs are not modified); a down-weighted alert carries the annotation
        ``prevalence`` (its pair's share) and its scaled ``z_score``.
    """
    if n_windows < min_windows:
        return [dict(a) for a in alerts]
    out = []
    for a in alerts:
        share = float(prevalence.get(alert_pair(a), 0.0))
        w = prevalence_weight(share, start)
        if w >= 1.0:
            out.append(dict(a))
            continue
        ann = dict(a.get("annotations") or {})
        try:
            z = float(ann.get("z_score", "nan"))
        except (TypeError, ValueError):
            z = float("nan")
        z = z if z == z else z_threshold * 2  # unknown z: as a moderate alert
        if w * z <= z_threshold:
            continue
        ann["z_score"] = f"{w * z:.4g}"
        ann["prevalence"] = f"{share:.3g}"
        out.append({**a, "annotations": ann})
    return out
