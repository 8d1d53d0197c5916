"""Alert timestamps: :func:`parse_time` (RFC 3339 strings or unix seconds; every ranker reads
``startsAt``/``endsAt`` with it, and it lives with the incident contract in
:mod:`fleetmind.data.rca_dataset`, which refuses a bad one naming file and line) and the per-node
timing of the ``time:*`` features."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fleetmind.data.rca_dataset import MS_LIKE, parse_time

__all__ = ["HORIZON_S", "MS_LIKE", "parse_time"]


_NAN = float("nan")


def _int_seconds(v: int) -> float | None:
    """An integer ``startsAt``/``endsAt`` as unix seconds, as a float: ``None`` (no time) before
    1970, as for a string; one too large for any date (1e15 s on) goes to :func:`parse_time`, which
    refuses it."""
    if v < 0:
        return None
    return float(v) if v < 10**15 else parse_time(v)


def _alert_times(a: Mapping[str, Any]) -> tuple[float, float, float]:
    """``(start, end, is_firing)`` of one alert for the time features: unix seconds (``startsAt`` /
    ``endsAt`` as RFC 3339 strings or numbers of seconds), NaN when absent; the end is NaN too for a firing
    alert whose ``endsAt`` is not after its start (Alertmanager's "no end yet")."""
    s = a.get("startsAt")
    if s.__class__ is int:  # unix seconds (bool is no int here: its class is bool)
        s = _int_seconds(s)
    elif s is not None and s.__class__ is not float:
        s = parse_time(s)
    e = a.get("endsAt")
    if e.__class__ is int:
        e = _int_seconds(e)
    elif e is not None and e.__class__ is not float:
        e = parse_time(e)
    status = a.get("status", "firing")
    is_firing = status == "firing" or (status != "resolved" and str(status).lower() != "resolved")
    end = _NAN if (e is None or is_firing and s is not None and e <= s) else e
    return (_NAN if s is None else s), end, (1.0 if is_firing else 0.0)


def _node_timing(
    starts: list[float], ends: list[float], r: np.ndarray, n: int
) -> tuple[float, float, float, np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """Per-node alert timing for the time features (``None`` when no alert has a start time).

    Args:
        starts, ends: per alert, unix seconds or NaN (:func:`_alert_times`).
        r: ``(A,)`` node index of each alert.
        n: number of nodes.

    Returns:
        ``(t_last, t0, span, duration (A,), first (n,), last (n,), first_recent (n,))``: the latest
        start, the earliest start within ``HORIZON_S`` of it, ``max(t_last - t0, 60)`` (s); each
        alert's duration (missing ends: the latest known time); per node the first and last start
        and the first start within the horizon, relative to ``t0`` (``inf``/``-inf`` where none).
    """
    s_arr = np.asarray(starts, dtype=np.float64)
    known = ~np.isnan(s_arr)
    if not known.any():
        return None
    e_arr = np.asarray(ends, dtype=np.float64)
    t_last = float(np.nanmax(s_arr))
    s_arr = np.where(known, s_arr, t_last)
    recent = s_arr >= t_last - HORIZON_S
    t0 = float(s_arr[recent].min())
    span = max(t_last - t0, 60.0)
    e_arr = np.where(np.isnan(e_arr), max(t_last, float(np.nanmax(e_arr, initial=t_last))), e_arr)
    e_arr = np.maximum(e_arr, s_arr)
    rel = s_arr - t0
    first = np.full(n, np.inf)
    last = np.full(n, -np.inf)
    first_recent = np.full(n, np.inf)
    np.minimum.at(first, r, rel)
    np.maximum.at(last, r, rel)
    np.minimum.at(first_recent, r[recent], rel[recent])
    return t_last, t0, span, e_arr - s_arr, first, last, first_recent


HORIZON_S = 3600.0
"""Alerts that started more than this many seconds before the latest alert are ``stale``."""
