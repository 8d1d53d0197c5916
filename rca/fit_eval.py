"""Bootstrap confidence intervals for per-incident ranks (``rca petshop`` reports them per method).

The percentile bootstrap over incidents (Efron & Tibshirani 1993): resample the ``n`` incidents with
replacement ``resamples`` times, recompute each metric, report the 2.5 and 97.5 percentiles. With 26
incidents an interval is wide (about +-0.15 at an AC@1 of 0.8); it says how far a figure could move on another
draw of issues from the same system, nothing about other systems.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

METRICS: tuple[str, ...] = ("ac@1", "ac@3", "ac@5", "mrr")


def _metric_arrays(ranks: Sequence[int | None]) -> dict[str, np.ndarray]:
    r = np.array([np.inf if x is None else float(x) for x in ranks])
    return {
        "ac@1": (r <= 1).astype(float),
        "ac@3": (r <= 3).astype(float),
        "ac@5": (r <= 5).astype(float),
        "mrr": np.where(np.isfinite(r), 1.0 / r, 0.0),
    }


def bootstrap_intervals(
    rows: Sequence[Mapping[str, Any]],
    methods: Sequence[str],
    resamples: int = 2000,
    level: float = 0.95,
    seed: int = 0,
) -> dict[str, Any]:
    """Percentile-bootstrap intervals of AC@1/3/5 and MRR for every method.

    Args:
        rows: per-incident rows with ``ranks: {method: 1-based rank or None}`` (``rca petshop``'s
            ``per_incident``).
        methods: method names to cover.
        resamples: bootstrap resamples (the same resampled incident sets for every method, so
            intervals of two methods are comparable).
        level: coverage (0.95 -> 2.5/97.5 percentiles).
        seed: RNG seed.

    Returns:
        ``{method: {metric: [low, high]}, "_meta": {"resamples", "level", "n_incidents"}}``.
    """
    n = len(rows)
    out: dict[str, Any] = {"_meta": {"resamples": resamples, "level": level, "n_incidents": n}}
    if n == 0:
        return out
    idx = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
    lo, hi = 100 * (1 - level) / 2, 100 * (1 + level) / 2
    for m in methods:
        arrs = _metric_arrays([r["ranks"].get(m) for r in rows])
        out[m] = {
            k: [float(np.percentile(v[idx].mean(1), lo)), float(np.percentile(v[idx].mean(1), hi))]
            for k, v in arrs.items()
        }
    return out
