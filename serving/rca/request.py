"""Request parsing and response building of ``POST /api/v1/rca``.

Shared by the route (:mod:`fleetmind.serving.rca.router`, in the server process) and the ranking processes
(:mod:`fleetmind.serving.rca.pool`): a body is validated with the same rules and answered with the same JSON
wherever it is ranked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from fleetmind.data.graph import DependencyGraph
from fleetmind.rca.base import RCAResult
from fleetmind.rca.features.columnar import AlertColumns
from fleetmind.serving.alertmap import node_for_alert
from fleetmind.serving.rca.parse import _EPOCH, PlainRequest, plain_alerts, plain_columns
from fleetmind.serving.registry import LoadedModel
from fleetmind.serving.schemas import (
    AlertIn,
    CauseOut,
    RCARequest,
    RCARequestFast,
    RCAResponse,
    in_time_range,
    utc,
)
from fleetmind.serving.settings import Settings, get_settings


def parse_request(body: bytes) -> RCARequest:
    """Validate the raw JSON body in one pass of pydantic-core (JSON parsing included).

    FastAPI would ``json.loads`` the body and then validate the Python objects, about twice the CPU
    for 200 alerts. Errors are FastAPI's 422 (``RequestValidationError``, locations under ``body``).
    """
    try:
        return RCARequest.model_validate_json(body)
    except ValidationError as err:
        errors = [{**e, "loc": ("body", *e["loc"])} for e in err.errors(include_url=False)]
        raise RequestValidationError(errors) from None


class _UtcOverflow(Exception):
    """Timestamps that ``AlertIn`` rejects (a UTC conversion that overflows, an instant outside
    :data:`fleetmind.serving.schemas.EARLIEST`..``LATEST``, an ``endsAt`` before the ``startsAt``)."""


def _check_utc(dt: datetime) -> None:
    """Raise :class:`_UtcOverflow` where moving ``dt`` to UTC leaves datetime's range or the
    stored range."""
    try:
        if not in_time_range(utc(dt)):
            raise _UtcOverflow
    except OverflowError:
        raise _UtcOverflow from None


def _seconds(dt: datetime | None) -> float | None:
    """Unix seconds of a parsed ``startsAt`` (naive = UTC); ``None`` for none or Alertmanager's
    zero time, as ``rca.features.times.parse_time`` reads the ISO string of the same instant."""
    if dt is None:
        return None
    t = (dt if dt.tzinfo is not None else dt.replace(tzinfo=UTC)).timestamp()
    return None if t < _EPOCH else t


def _iso_end(dt: datetime | None) -> str | None:
    """``endsAt`` as an ISO 8601 string in UTC; ``None`` for none or Alertmanager's zero time
    (``0001-01-01``, "no end yet"), which the analyzers read as no end either way."""
    t = _seconds(dt)
    return None if t is None else datetime.fromtimestamp(t, UTC).isoformat()


def _fast_alerts(items: Sequence[Mapping[str, Any]], epoch_seconds: bool) -> list[dict[str, Any]]:
    """The analyzer's alert dicts from :class:`RCARequestFast` alerts (see :func:`parse_alerts`).

    Raises:
        _UtcOverflow: a timestamp ``AlertIn`` would reject (only years 1 and 9999 can overflow).
    """
    out: list[dict[str, Any]] = []
    for a in items:
        s = a.get("startsAt")
        e = a.get("endsAt")
        # only the ends of datetime's range can leave the stored range (Alertmanager's "no end",
        # 0001-01-01T00:00:00Z, is within it)
        if s is not None and (s.year == 1 or s.year == 9999):
            _check_utc(s)
        if e is not None and (e.year == 1 or e.year == 9999):
            _check_utc(e)
        if s is not None and e is not None and e.year > 1 and utc(e) < utc(s):
            raise _UtcOverflow  # AlertIn: "endsAt lies before startsAt"
        if epoch_seconds:
            t = None
            if s is not None:  # _seconds, inlined
                t = (s if s.tzinfo is not None else s.replace(tzinfo=UTC)).timestamp()
                if t < _EPOCH:
                    t = None
            out.append(
                {
                    "status": a.get("status", "firing"),
                    "labels": a["labels"],
                    "startsAt": t,
                    "endsAt": _seconds(e),
                }
            )
        else:
            out.append(
                {
                    "status": a.get("status", "firing"),
                    "labels": a["labels"],
                    "annotations": a.get("annotations", {}),
                    "startsAt": utc(s).isoformat() if s is not None else None,
                    "endsAt": _iso_end(e),
                    "fingerprint": a.get("fingerprint"),
                }
            )
    return out


def _model_alerts(items: Sequence[AlertIn], epoch_seconds: bool) -> list[dict[str, Any]]:
    """The analyzer's alert dicts from validated :class:`AlertIn` models."""
    if epoch_seconds:
        return [
            {
                "status": m.status,
                "labels": m.labels,
                "startsAt": _seconds(m.startsAt),
                "endsAt": _seconds(m.endsAt),
            }
            for m in items
        ]
    return [
        {
            "status": m.status,
            "labels": m.labels,
            "annotations": m.annotations,
            "startsAt": m.startsAt.isoformat() if m.startsAt else None,
            "endsAt": _iso_end(m.endsAt),
            "fingerprint": m.fingerprint,
        }
        for m in items
    ]


def parse_alerts(
    body: bytes, epoch_seconds: bool
) -> tuple[PlainRequest | RCARequestFast | RCARequest, list[dict[str, Any]]]:
    """Validate the body and build the alerts as the analyzers take them.

    The alerts are Alertmanager v4 objects (``status``, ``labels``, ``startsAt``, ``endsAt``; the
    GAT's time features use ``endsAt`` of resolved alerts, as in training).
    ``epoch_seconds``: ``startsAt`` as unix seconds, for analyzers built on ``rca.features`` (the
    GAT): the value they would parse from the ISO string, without parsing it. Otherwise an ISO 8601
    string in UTC, with ``annotations`` and ``fingerprint``.

    The body is parsed into plain dicts (:class:`RCARequestFast`, about half the CPU of
    :class:`RCARequest` for 200 alerts). Whatever that model rejects, and any timestamp ``AlertIn``
    would reject, goes through :func:`parse_request`: every error is ``RCARequest``'s 422.
    With ``epoch_seconds``, :func:`plain_alerts` is tried first (cheaper still).
    """
    if epoch_seconds:
        plain = plain_alerts(body)
        if plain is not None:
            return plain
    try:
        fast = RCARequestFast.model_validate_json(body)
    except ValidationError:
        pass
    else:
        try:
            return fast, _fast_alerts(fast.alerts, epoch_seconds)
        except _UtcOverflow:
            pass
    req = parse_request(body)
    return req, _model_alerts(req.alerts, epoch_seconds)


def parse_for(
    analyzer: Any, graph: DependencyGraph, body: bytes
) -> tuple[PlainRequest | RCARequestFast | RCARequest, Any]:
    """Validate the body and build the alerts as ``analyzer`` takes them on ``graph`` (the served
    graph; a body with its own ``graph`` is parsed by :func:`parse_alerts`).

    An analyzer with ``accepts_alert_columns`` (the GAT) gets :class:`fleetmind.rca.features.columnar.AlertColumns`
    (with each mapped alert's labels when it ``reads_alert_labels``, as a ``neighbours`` GAT does)
    from :func:`fleetmind.serving.rca.parse.plain_columns` when that parser is sure of the body; otherwise,
    and for other analyzers, :func:`parse_alerts` (the same 422s as :class:`RCARequest`).
    """
    if getattr(analyzer, "accepts_alert_columns", False):
        # the label values tell a heartbeat by its severity (response_json): kept when the body
        # may hold one (a "none" value, or an escape that could spell it)
        labels = bool(getattr(analyzer, "reads_alert_labels", False))
        # and when it may name a GPU: its pod labels may add a pod-to-GPU edge
        # (fleetmind.rca.incident_graph)
        keep = labels or b'"none"' in body or b"\\u" in body or b'"gpu"' in body
        fast = plain_columns(body, graph, keep)
        if fast is not None:
            return fast
    return parse_alerts(body, bool(getattr(analyzer, "accepts_epoch_seconds", False)))


HEARTBEAT_SEVERITY = "none"
"""The ``severity`` of alerts that say nothing about the fleet: kube-prometheus' ``InfoInhibitor``
and ``Watchdog`` (kube-prometheus-stack ``templates/prometheus/rules-1.14/general.rules.yaml``)."""

_DEFAULT_UNGROUPED = Settings.model_fields["ungrouped_alerts"].default


def ungrouped_names() -> frozenset[str]:
    """The alertnames of ``FLEETMIND_UNGROUPED_ALERTS`` in this process's environment (the
    default list where the environment's settings do not validate: the server refuses to start
    with such settings, a library caller gets the default)."""
    try:
        return get_settings().ungrouped_alert_names()
    except ValidationError:
        return frozenset(n.strip() for n in _DEFAULT_UNGROUPED.split(",") if n.strip())


def is_heartbeat(labels: Mapping[str, Any], ungrouped: frozenset[str]) -> bool:
    """Whether an alert is a heartbeat or helper rather than evidence of a fault: ``severity``
    :data:`HEARTBEAT_SEVERITY`, or an alertname of ``ungrouped`` (``FLEETMIND_UNGROUPED_ALERTS``);
    the incident worker never groups these either."""
    return labels.get("severity") == HEARTBEAT_SEVERITY or labels.get("alertname") in ungrouped


def _has_evidence(
    graph: DependencyGraph, alerts: Sequence[Mapping[str, Any]], ungrouped: frozenset[str]
) -> bool:
    """Whether an alert other than a heartbeat (:func:`is_heartbeat`) maps onto a node of
    ``graph``. ``alerts``: the analyzer's alert dicts, or the columns :func:`parse_for` built
    (their ``labels`` kept whenever the body may hold a ``severity="none"``, else their alertnames
    tell)."""
    if isinstance(alerts, AlertColumns):
        if alerts.labels is not None:
            return any(not is_heartbeat(lab, ungrouped) for lab in alerts.labels)
        return any(name not in ungrouped for name in alerts.names)
    return any(
        not is_heartbeat(a["labels"], ungrouped) and node_for_alert(graph, a["labels"]) is not None
        for a in alerts
    )


def response_json(
    model: LoadedModel,
    graph: DependencyGraph,
    alerts: Sequence[Mapping[str, Any]],
    top_k: int,
    result: RCAResult,
    ungrouped: frozenset[str] | None = None,
) -> bytes:
    """The ``RCAResponse`` JSON of ``result`` (``alerts`` ranked on ``graph`` by ``model``).

    ``ungrouped``: the heartbeat alertnames of :func:`is_heartbeat` (default
    :func:`ungrouped_names`). Mapped alerts that are all heartbeats are no evidence: the answer has
    ``mapped_alerts`` 0 and no causes, as when no alert maps.
    """
    unmapped = result.extra.get("unmapped_alerts") if result.extra else None
    if not isinstance(unmapped, int):  # alert columns know how many alerts matched no node
        unmapped = getattr(alerts, "unmapped", None)
    if isinstance(unmapped, int):  # the alerts were mapped already (the GAT's path does)
        mapped = len(alerts) - unmapped
    else:
        mapped = sum(1 for a in alerts if node_for_alert(graph, a["labels"]) is not None)
    if mapped and not _has_evidence(
        graph, alerts, ungrouped_names() if ungrouped is None else ungrouped
    ):
        mapped = 0  # only Watchdog / InfoInhibitor: nothing says where a fault is
    # No alert names a node: a ranking would rest on the graph alone, so there is no answer.
    causes = result.causes[:top_k] if mapped else []
    body = RCAResponse(
        causes=[CauseOut(**c.to_json()) for c in causes],
        method=result.method or model.method,
        model_version=result.model_version or model.version,
        graph=graph.name,
        mapped_alerts=mapped,
        fallback_reason=model.fallback_reason,
    )
    return body.model_dump_json().encode()
