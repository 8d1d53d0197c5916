"""Cheap parses of a ``POST /api/v1/rca`` body for the GAT (no pydantic, no per-alert models).

Both parsers here accept a body only when they are sure :class:`fleetmind.serving.schemas.RCARequest`
accepts it and reads it alike; anything else (valid or not) gives ``None``, and the caller parses
the body with pydantic, which answers every 422 (see ``fleetmind.serving.rca.request.parse_alerts``).

* :func:`plain_alerts`: the GAT's alert dicts, unix-second timestamps.
* :func:`plain_columns`: straight to the GAT's per-alert columns
  (:class:`fleetmind.rca.features.columnar.AlertColumns`) on a given graph, without the dicts: label sets and
  annotations are kept as their JSON text (``msgspec.Raw``) and validated once per distinct text
  (a memo; an incident storm repeats them), and timestamps are read column-wise with numpy.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, NamedTuple

import msgspec
import numpy as np

from fleetmind.data.graph import DependencyGraph
from fleetmind.rca.features.columnar import (
    AlertColumns,
    columns_from_parsed,
    label_dict_memo,
    label_info_str,
    label_json_memo,
    put_label_dict,
    put_label_json,
)
from fleetmind.rca.features.mapping import ENTRY_BYTES, ByteMemo

_EPOCH = datetime(1970, 1, 1).timestamp()
"""Timestamps below this are "no time" for the analyzers (``rca.features.times.parse_time``)."""


class PlainRequest(NamedTuple):
    """The fields of an RCA request body parsed by :func:`plain_alerts` (it has no graph)."""

    top_k: int
    graph: None = None


_ISO = re.compile(
    r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.(\d{1,9}))?(?:Z|[+-]\d{2}:\d{2})?", re.ASCII
)
"""RFC 3339 timestamps :func:`plain_alerts` reads itself (``datetime.fromisoformat`` reads them as
pydantic does: up to nanoseconds as Go writes them, of which pydantic keeps the microseconds,
truncated; an optional ``Z`` or ``+hh:mm``); anything else goes to pydantic."""

_NO_END = "0001-01-01T00:00:00Z"
"""Alertmanager's "no end yet"."""


class _Unsure(Exception):
    """:func:`plain_alerts` leaves this body to pydantic."""


_MsgText = Annotated[str, msgspec.Meta(max_length=8192)]
_MsgShort = Annotated[str, msgspec.Meta(max_length=256)]
# No bound on how many labels: as ``schemas.Labels`` (neither Prometheus nor Alertmanager bounds
# it; the body size limit does).
_MsgLabels = dict[Annotated[str, msgspec.Meta(min_length=1, max_length=256)], _MsgText]


class _PlainAlert(msgspec.Struct):
    """An alert as :class:`fleetmind.serving.schemas.AlertIn` accepts it, minus what it reads leniently.

    The same types, lengths and counts (``msgspec`` checks them in C while it decodes); unknown
    keys are skipped. Timestamps stay strings: :func:`_plain_time` reads them as pydantic does
    (``msgspec`` rounds nanoseconds where pydantic truncates them).
    """

    labels: _MsgLabels
    status: Literal["firing", "resolved"] = "firing"
    annotations: _MsgLabels = {}
    startsAt: str | None = None
    endsAt: str | None = None
    generatorURL: _MsgText | None = None
    fingerprint: _MsgShort | None = None


class _PlainBody(msgspec.Struct):
    """An RCA request body without a ``graph`` (one with a graph goes to pydantic)."""

    alerts: Annotated[list[_PlainAlert], msgspec.Meta(min_length=1, max_length=10000)]
    top_k: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 5
    graph: None = None


_PLAIN_DECODER = msgspec.json.Decoder(_PlainBody)


def _plain_time(v: Any) -> float | None:
    """Unix seconds of a timestamp, as :func:`fleetmind.serving.rca.request._seconds` gives them from pydantic's datetime."""
    if v is None or v == _NO_END:
        return None
    m = _ISO.fullmatch(v) if type(v) is str else None
    if m is None:
        raise _Unsure
    if m.end(1) - m.start(1) > 6:  # nanoseconds: microseconds, truncated, as pydantic reads them
        v = v[: m.start(1) + 6] + v[m.end(1) :]
    try:
        dt = datetime.fromisoformat(v)
    except ValueError:
        raise _Unsure from None
    if dt.year == 9999:
        raise _Unsure  # may lie past the stored range (serving.schemas.LATEST): AlertIn decides
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    elif dt.year == 1 and dt.utcoffset():
        raise _Unsure  # may leave datetime's range once moved to UTC: AlertIn rejects some
    t = dt.timestamp()
    return None if t < _EPOCH else t


def _check_order(
    starts: Sequence[str | None], ends: Sequence[str | None], s_at: Any, e_at: Any
) -> None:
    """Raise :class:`_Unsure` where an alert may end before it starts (``AlertIn`` rejects that):
    both times given, and the end before the start or either before the epoch (read as no time,
    so not comparable here). ``s_at``, ``e_at``: the values read, ``None`` or NaN for no time."""
    for s, e, ts, te in zip(starts, ends, s_at, e_at, strict=True):
        if s is None or e is None or e == _NO_END:
            continue
        if ts is None or te is None or not te >= ts:  # NaN too
            raise _Unsure


def plain_alerts(body: bytes) -> tuple[PlainRequest, list[dict[str, Any]]] | None:
    """The GAT's alert dicts (unix seconds) from a body, without pydantic; ``None`` when unsure.

    A cheaper path for the common body: ``msgspec`` decodes it into :class:`_PlainBody`, checking
    in C what :class:`~fleetmind.serving.schemas.RCARequest` checks (the same types, lengths and counts; no ``graph``; an
    ``int`` ``top_k`` in range), and the timestamps must have the strict form of :data:`_ISO`; no
    ``\\u0000`` anywhere in the body. Anything else, valid or not, gives ``None`` and goes through
    pydantic, so every answer and every 422 is the one :class:`~fleetmind.serving.schemas.RCARequest` gives (checked in
    ``tests/test_serving_rca_fastpath.py``). For a 200-alert benchmark body it costs about 1.9 ms
    of CPU against 2.5 ms for the ``orjson`` parse and plain-Python checks it replaced; a third of
    what is left is the timestamps.
    """
    if b"\\u0000" in body:
        return None
    try:
        req = _PLAIN_DECODER.decode(body)
        out = [
            {
                "status": a.status,
                "labels": a.labels,
                "startsAt": _plain_time(a.startsAt),
                "endsAt": _plain_time(a.endsAt),
            }
            for a in req.alerts
        ]
        _check_order(
            [a.startsAt for a in req.alerts],
            [a.endsAt for a in req.alerts],
            [o["startsAt"] for o in out],
            [o["endsAt"] for o in out],
        )
    except (msgspec.DecodeError, _Unsure):  # ValidationError is a DecodeError
        return None
    return PlainRequest(req.top_k), out


# ------------------------------------------------------------------------ straight to columns
_NO_ANNOTATIONS = msgspec.Raw(b"{}")


class _RawAlert(msgspec.Struct):
    """:class:`_PlainAlert` with ``labels`` and ``annotations`` kept as their JSON text.

    :func:`plain_columns` validates each distinct text with :data:`_LABELS` (the type of
    :class:`_PlainAlert`'s fields) before it uses it, so nothing is accepted that
    :class:`_PlainAlert` rejects.
    """

    labels: msgspec.Raw
    status: Literal["firing", "resolved"] = "firing"
    annotations: msgspec.Raw = _NO_ANNOTATIONS
    startsAt: str | None = None
    endsAt: str | None = None
    generatorURL: _MsgText | None = None
    fingerprint: _MsgShort | None = None


class _RawBody(msgspec.Struct):
    """:class:`_PlainBody` of :class:`_RawAlert`."""

    alerts: Annotated[list[_RawAlert], msgspec.Meta(min_length=1, max_length=10000)]
    top_k: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 5
    graph: None = None


_RAW_DECODER = msgspec.json.Decoder(_RawBody)
_LABELS = msgspec.json.Decoder(_MsgLabels)
_ANNOTATIONS_OK = ByteMemo(budget=4 * 1024 * 1024, max_entry=2048)
"""JSON texts of ``annotations`` that :data:`_LABELS` accepted (keys; values ``True``), bounded by
bytes: 4 MB holds some 20,000 realistic texts (100-200 bytes); a text over ~1.9 KB is validated each
time instead (decoding it costs about what hashing it for a lookup does: ~1 us per KB)."""


def plain_columns(
    body: bytes, graph: DependencyGraph, labels: bool = False
) -> tuple[PlainRequest, AlertColumns] | None:
    """The GAT's alert columns on ``graph`` from a body; ``None`` when unsure (see
    :func:`plain_alerts`, whose checks this makes). ``labels``: also keep each mapped alert's label
    set (:attr:`~fleetmind.rca.features.columnar.AlertColumns.labels`, for a model that reads label
    values; each distinct set decoded once per graph).

    Gives the :class:`fleetmind.rca.features.columnar.AlertColumns` that ``rca.features.columnar.alert_columns`` computes from
    :func:`plain_alerts`'s dicts (checked in ``tests/test_serving_rca_fastpath.py``), for about a
    third of the CPU: no dict per alert, each distinct label set decoded, validated and mapped
    onto a node once per graph (memo keyed by its JSON text), each distinct ``annotations`` text
    validated once, the timestamps read by :func:`read_times`. The memos are bounded by bytes
    (:class:`fleetmind.rca.features.mapping.ByteMemo`): a label set or text of more than a few KB is
    decoded each time rather than kept.
    """
    if b"\\u0000" in body:
        return None
    try:
        req = _RAW_DECODER.decode(body)
        alerts = req.alerts
        memo = label_json_memo(graph)
        dicts = label_dict_memo(graph) if labels else None
        infos = []
        kept: list[dict[str, str]] = []
        ok = _ANNOTATIONS_OK
        for a in alerts:
            key = bytes(a.labels)
            d = None
            if dicts is not None:
                d = dicts.get(key)
                if d is None:
                    d = _LABELS.decode(key)
                    put_label_dict(dicts, key, d)
                kept.append(d)
            info = memo.get(key)
            if info is None:  # (label_info_str reads d, it does not change it)
                info = label_info_str(graph, _LABELS.decode(key) if d is None else d)
                put_label_json(memo, key, info)
            infos.append(info)
            ann = a.annotations
            if ann is not _NO_ANNOTATIONS:
                key = bytes(ann)
                if key not in ok:
                    _LABELS.decode(key)
                    ok.put(key, True, ENTRY_BYTES + 64 + len(key))
        starts = [a.startsAt for a in alerts]
        ends = [a.endsAt for a in alerts]
        times = read_times(starts + ends)
        _check_order(starts, ends, times[: len(alerts)], times[len(alerts) :])
    except (msgspec.DecodeError, _Unsure):  # ValidationError is a DecodeError
        return None
    firing = np.array([a.status == "firing" for a in alerts], dtype=bool)
    n = len(alerts)
    cols = columns_from_parsed(
        graph, infos, times[:n], times[n:], firing, labels=kept if labels else None
    )
    return PlainRequest(req.top_k), cols


def read_times(values: Sequence[str | None]) -> np.ndarray:
    """:func:`_plain_time` of each value (a ``str`` or ``None``), float64 with NaN for ``None``.

    Strings of one length and layout are read together with numpy from their ASCII bytes when they
    have the strict form ``YYYY-MM-DDTHH:MM:SS[.f{1,9}][Z|+hh:mm|-hh:mm]`` with in-range fields
    and a year in 1900-2200; every other string goes through :func:`_plain_time` itself. The value
    is the one ``datetime.timestamp()`` gives: whole microseconds since the epoch (fractions
    truncated to microseconds, as pydantic reads them), divided by 10**6 in one correctly rounded
    step (exact integers below 2**53 as float64).

    Raises:
        _Unsure: a string :func:`_plain_time` refuses.
    """
    out = np.full(len(values), np.nan)
    todo = [i for i, v in enumerate(values) if v is not None and v != _NO_END]
    if not todo:
        return out
    strs = [values[i] for i in todo]
    lens = [len(v) for v in strs]
    groups: dict[int, list[int]] = {}
    if min(lens) == max(lens):
        groups[lens[0]] = list(range(len(strs)))
    else:
        for j, n in enumerate(lens):
            groups.setdefault(n, []).append(j)
    pos = np.asarray(todo)
    for n, js in groups.items():
        sub = [strs[j] for j in js]
        vals, good = _read_fixed(sub, n)
        idx = pos[js]
        out[idx[good]] = vals[good]
        for j in np.flatnonzero(~good):
            t = _plain_time(sub[j])
            out[idx[j]] = np.nan if t is None else t
    return out


class _Layout(NamedTuple):
    """How to read one timestamp layout (see :func:`_layout`)."""

    lo: np.ndarray  # uint8 (n,): smallest byte allowed in each column
    hi: np.ndarray  # uint8 (n,): largest byte allowed
    weights: np.ndarray  # float64 (n, 10): bytes -> the fields of _FIELD_NAMES
    bias: np.ndarray  # float64 (10,): subtracted (the weights applied to "0" digits)
    sign: int  # column of the offset's sign, -1 without an offset


_FIELD_NAMES = ("y", "mo", "d", "h", "mi", "s", "oh", "om", "us", "secs")
"""Fields read by one matrix product: year, month, day, hour, minute, second, offset hours and
minutes, microseconds, and ``d * 86400 + h * 3600 + mi * 60 + s``."""
_FIELD_LO = np.array([1900, 1, 1, 0, 0, 0, 0, 0, 0, 0], dtype=np.float64)
_FIELD_HI = np.array([2200, 12, 31, 23, 59, 59, 23, 59, 999_999, 1e12], dtype=np.float64)
_LAYOUTS: dict[tuple[int, str], _Layout | None] = {}
_LAYOUT_MAX = 35
"""The longest strict timestamp (``YYYY-MM-DDTHH:MM:SS.fffffffff+hh:mm``); :func:`_layout` does not
memoise longer lengths (clients choose them)."""


def _layout(n: int, form: str) -> _Layout | None:
    """The layout of length-``n`` timestamps ending in ``form`` (``"Z"``, ``"off"`` for
    ``+hh:mm``, ``""`` for none), or ``None`` when no strict timestamp has it."""
    if n > _LAYOUT_MAX:
        return None  # no strict form; not memoised (clients choose the lengths)
    key = (n, form)
    if key in _LAYOUTS:
        return _LAYOUTS[key]
    suffix = {"Z": 1, "off": 6, "": 0}[form]
    k = n - 19 - suffix  # "." and the fraction digits
    lay = None
    if k == 0 or 2 <= k <= 10:
        lo = np.full(n, 48, dtype=np.uint8)  # digits everywhere but the separators
        hi = np.full(n, 57, dtype=np.uint8)
        seps = {4: "-", 7: "-", 10: "T", 13: ":", 16: ":"}
        # (first column, width, field, scale)
        fields = [(0, 4, 0, 1), (5, 2, 1, 1), (8, 2, 2, 1), (11, 2, 3, 1), (14, 2, 4, 1)]
        fields += [(17, 2, 5, 1), (8, 2, 9, 86400), (11, 2, 9, 3600), (14, 2, 9, 60)]
        fields += [(17, 2, 9, 1)]
        if k:
            seps[19] = "."
            frac = min(k - 1, 6)  # digits past microseconds are checked, not read
            fields.append((20, frac, 8, 10 ** (6 - frac)))
        sign = -1
        if form == "Z":
            seps[n - 1] = "Z"
        elif form == "off":
            sign = n - 6
            seps[n - 3] = ":"
            fields += [(n - 5, 2, 6, 1), (n - 2, 2, 7, 1)]
        for c, ch in seps.items():
            lo[c] = hi[c] = ord(ch)
        if sign >= 0:
            lo[sign], hi[sign] = ord("+"), ord("-")  # and not ",", checked apart
        weights = np.zeros((n, len(_FIELD_NAMES)), dtype=np.float64)
        for start, width, field, scale in fields:
            for j in range(width):
                weights[start + j, field] += 10 ** (width - 1 - j) * scale
        digit = lo == 48
        bias = 48.0 * weights[digit].sum(axis=0)
        lay = _Layout(lo, hi, weights, bias, sign)
    _LAYOUTS[key] = lay
    return lay


def _month_tables() -> tuple[np.ndarray, np.ndarray]:
    """Days from 1970-01-01 to the first of each month of 1900-2200, and the month's length."""
    import calendar
    from datetime import date

    epoch = date(1970, 1, 1).toordinal()
    first = [date(y, m, 1).toordinal() - epoch for y in range(1900, 2201) for m in range(1, 13)]
    length = [calendar.monthrange(y, m)[1] for y in range(1900, 2201) for m in range(1, 13)]
    return np.array(first, dtype=np.float64), np.array(length, dtype=np.float64)


_MONTH_START, _MONTH_DAYS = _month_tables()


def _read_fixed(strs: list[str], n: int) -> tuple[np.ndarray, np.ndarray]:
    """Unix seconds of strings of length ``n`` and where they were read (``False``: another
    layout than the first string's, not the strict form, or out of range; the caller reads those
    one by one). Every value is an exact integer in float64 until the final division."""
    rows = len(strs)
    none = (np.zeros(rows), np.zeros(rows, dtype=bool))
    if n < 19:  # shorter than "YYYY-MM-DDTHH:MM:SS" (an empty "endsAt", say): no strict form
        return none
    first = strs[0]
    form = "Z" if first[-1] == "Z" else "off" if n >= 25 and first[n - 6] in "+-" else ""
    lay = _layout(n, form)
    if lay is None:
        return none
    try:
        buf = "".join(strs).encode("ascii")
    except UnicodeEncodeError:
        return none
    a = np.frombuffer(buf, dtype=np.uint8).reshape(rows, n)
    chars = (a >= lay.lo) & (a <= lay.hi)
    v = a.astype(np.float64) @ lay.weights
    v -= lay.bias
    fields = (v >= _FIELD_LO) & (v <= _FIELD_HI)
    if lay.sign >= 0:
        sign_c = a[:, lay.sign]
        chars[:, lay.sign] &= sign_c != 44  # ","
    if chars.all() and fields.all():
        ok = np.ones(rows, dtype=bool)
    else:
        ok = chars.all(axis=1) & fields.all(axis=1)
    month = np.where(ok, (v[:, 0] - 1900) * 12 + v[:, 1] - 1, 0).astype(np.intp)
    ok &= v[:, 2] <= _MONTH_DAYS[month]
    secs = _MONTH_START[month] * 86400 + v[:, 9] - 86400
    if lay.sign >= 0:
        off = (v[:, 6] * 60 + v[:, 7]) * 60
        secs -= np.where(sign_c == 45, -off, off)
    t = (secs * 1e6 + v[:, 8]) / 1e6
    t[t < _EPOCH] = np.nan
    return t, ok
