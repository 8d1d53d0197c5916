"""Alert timestamps for the ``time:*`` features: :func:`parse_time` (RFC 3339 strings or unix seconds) and per-node timing."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import numpy as np

from fleetmind.data.errors import DataError

_ZERO_TIME = datetime(1970, 1, 1).timestamp()  # endsAt "0001-01-01..." (firing) falls below this


_NAN = float("nan")


def _alert_times(a: Mapping[str, Any]) -> tuple[float, float, float]:
    """``(start, end, is_firing)`` of one alert for the time features: unix seconds (``startsAt`` /
    ``endsAt`` as RFC 3339 strings or floats), NaN when absent; the end is NaN too for a firing
    alert whose ``endsAt`` is not after its start (Alertmanager's "no end yet")."""
    s = a.get("startsAt")
    if s is not None and s.__class__ is not float:
        s = parse_time(s)
    e = a.get("endsAt")
    if e is not None and e.__class__ is not float:
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


_FRAC_RE = re.compile(r"(\.\d{6})\d+")


_TIME_CACHE: dict[str, float | None] = {}

_TIME_CACHE_MAX = 200_000


def parse_time(value: Any) -> float | None:
    """Parse an RFC 3339 timestamp (Alertmanager style, ``Z`` or offset, up to ns) to unix seconds.

    Returns ``None`` for a missing value or Alertmanager's zero time (``0001-01-01T00:00:00Z``).
    Parsed strings are memoised (alert storms repeat the same evaluation timestamps).

    Raises:
        DataError: for a non-empty value that is not RFC 3339.
    """
    if value is None or value == "":
        return None
    if isinstance(value, int | float):
        return float(value)
    if type(value) is str:
        try:
            return _TIME_CACHE[value]
        except KeyError:
            t = _parse_time_str(value)
            if len(_TIME_CACHE) >= _TIME_CACHE_MAX:
                _TIME_CACHE.clear()
            _TIME_CACHE[value] = t
            return t
    return _parse_time_str(value)


def _parse_time_str(value: Any) -> float | None:
    s = str(value).strip()
    if s.startswith("0001-01-01"):
        return None
    dot = s.find(".")
    # more than 6 fraction digits (Go's nanoseconds): keep microseconds; skipped when the first
    # fraction has no 7th digit and there is no other dot (then the pattern cannot match)
    if dot >= 0 and (s[dot + 7 : dot + 8].isdigit() or s.count(".") > 1):
        s = _FRAC_RE.sub(r"\1", s)
    if s.endswith(("Z", "z")):
        s = s[:-1] + "+00:00"
    try:
        dt = datetime.fromisoformat(s)
    except ValueError:
        raise DataError(f"alert timestamp {value!r} is not RFC 3339") from None
    if dt.tzinfo is None:
        from datetime import UTC

        dt = dt.replace(tzinfo=UTC)
    t = dt.timestamp()
    return None if t < _ZERO_TIME else t


HORIZON_S = 3600.0
"""Alerts that started more than this many seconds before the latest alert are ``stale``."""
