"""Pydantic request and response models of the HTTP API.

Inbound alert models are lenient about unknown keys (``extra="allow"``: Alertmanager adds fields such
as ``truncatedAlerts``, ``notification_reason`` or ``routeLabels`` over time) and strict about the types
of the keys they use. Text fields reject NUL characters and unpaired surrogates, which no database
stores, so such input is a 422 instead of a 500.
"""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, NotRequired

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from typing_extensions import TypedDict

from fleetmind.data.graph import EDGE_KINDS, NODE_KINDS
from fleetmind.data.graph_schema import GraphEdgeModel, GraphModel, GraphNodeModel
from fleetmind.serving.settings import WEBHOOK_ALERT_CAP
from fleetmind.serving.validation import safe_value

log = logging.getLogger("fleetmind.serving")

MAX_DB_INT = 2**31 - 1
"""Largest id and offset a route takes: ids are INTEGER columns, and SQLAlchemy binds LIMIT/OFFSET
as INTEGER, so a larger value is a PostgreSQL error (a 5xx), not an empty answer."""

NO_NUL = r"^[^\x00]*$"
"""Text may not contain NUL characters (no database stores them). Checked by pydantic-core's regex
engine, in Rust: a Python validator per string cost ~1 ms per 200-alert request. Unpaired surrogates
need no check of ours: the JSON parser and pydantic-core's ``str`` validation reject them (422)."""

TEXT_LIMIT = 8192
"""Longest label value, annotation or URL stored, characters (the webhook clips longer ones from
Alertmanager, :func:`fleetmind.serving.routers.alerts.clip_text`; other routes reject them)."""

Text = Annotated[str, StringConstraints(max_length=TEXT_LIMIT, pattern=NO_NUL)]
ShortText = Annotated[str, StringConstraints(max_length=256, pattern=NO_NUL)]
LabelName = Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=NO_NUL)]
Labels = dict[LabelName, Text]
"""An alert's labels or annotations. How many is not bounded here: neither Prometheus (a scrape
config's ``label_limit`` defaults to 0, no limit) nor Alertmanager (``model.LabelSet.Validate`` of
prometheus/common checks names and values only) bounds it, and Alertmanager drops a notification
its receiver refuses with a 4xx, so any bound would lose real alerts (kube-state-metrics'
``kube_pod_labels`` carries one label per Kubernetes label of the pod). The body size limits
(``FLEETMIND_MAX_WEBHOOK_BYTES``, ``FLEETMIND_MAX_BODY_BYTES``) bound them instead."""

NodeKind = Literal[NODE_KINDS]  # type: ignore[valid-type]
EdgeKind = Literal[EDGE_KINDS]  # type: ignore[valid-type]


def utc(dt: datetime) -> datetime:
    """Return ``dt`` as an aware UTC datetime (naive values are taken as UTC)."""
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)


EARLIEST = datetime(1, 1, 1, tzinfo=UTC)
LATEST = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)
"""The timestamps the service stores: each is kept as float seconds since the Unix epoch and read
back with ``datetime.fromtimestamp``, which only reaches years 1-9999. A float has about 30 us of
resolution in the year 9999, so a later instant (``9999-12-31T23:59:59.999999Z``) rounds up to the
year 10000 and could be stored but never read back; whole seconds up to :data:`LATEST`
round-trip."""
_EARLIEST_TS = EARLIEST.timestamp()
_LATEST_TS = LATEST.timestamp()
TIME_RANGE_MSG = (
    "timestamp outside 0001-01-01T00:00:00Z..9999-12-31T23:59:59Z, "
    "the range stored timestamps can be read back in"
)


def in_time_range(dt: datetime) -> bool:
    """Whether the aware ``dt`` lies within :data:`EARLIEST`..:data:`LATEST`."""
    return EARLIEST <= dt <= LATEST


def from_unix(ts: float) -> datetime:
    """Stored Unix seconds as an aware UTC datetime, clamped into :data:`EARLIEST`..:data:`LATEST`
    (NaN reads as :data:`EARLIEST`): rows written before timestamps were bounded still read."""
    if not ts >= _EARLIEST_TS:  # NaN too
        return EARLIEST
    if ts > _LATEST_TS:
        return LATEST
    return datetime.fromtimestamp(ts, UTC)


def iso_utc(ts: float | None) -> str | None:
    """Stored Unix seconds as ISO 8601 in UTC (``+00:00``), see :func:`from_unix`; ``None``
    stays ``None``."""
    return None if ts is None else from_unix(ts).isoformat()


def _not_a_boolean(v: Any) -> Any:
    """A count is a number: JSON ``true`` is refused (pydantic's lax mode reads it as 1), as
    :class:`JobSpec` does; numeric strings (``"2"``) stay accepted."""
    if isinstance(v, bool):
        raise ValueError("must be an integer, not a boolean")
    return v


Count = Annotated[int, BeforeValidator(_not_a_boolean)]
"""An integer count that refuses JSON booleans."""


# ---------------------------------------------------------------------------------------- alerts
class AlertIn(BaseModel):
    """One Alertmanager webhook v4 alert (unknown keys are kept and ignored)."""

    model_config = ConfigDict(extra="allow")

    status: Literal["firing", "resolved"] = "firing"
    labels: Labels
    annotations: Labels = Field(default_factory=dict)
    startsAt: datetime | None = Field(None, description="when the alert started (RFC 3339)")
    endsAt: datetime | None = Field(None, description="when it ended; 0001-01-01 means unknown")
    generatorURL: Text | None = None
    fingerprint: ShortText | None = Field(
        None, description="Alertmanager's label-set hash; computed from the labels when absent"
    )

    @field_validator("startsAt", "endsAt")
    @classmethod
    def _to_utc(cls, value: datetime | None) -> datetime | None:
        if value is None:
            return None
        try:
            value = utc(value)
        except OverflowError:
            raise ValueError("timestamp out of range once converted to UTC") from None
        if not in_time_range(value):
            raise ValueError(TIME_RANGE_MSG)
        return value

    @model_validator(mode="after")
    def _starts_before_ends(self) -> AlertIn:
        # as Alertmanager itself validates alerts (prometheus/common model/alert.go, Validate)
        ends = self.endsAt
        if ends is not None and ends.year > 1 and self.startsAt is not None:
            if ends < self.startsAt:
                raise ValueError("endsAt lies before startsAt")
        return self


UNREAD_ENVELOPE = (
    "version",
    "groupKey",
    "status",
    "receiver",
    "groupLabels",
    "commonLabels",
    "commonAnnotations",
    "externalURL",
)
"""The fields of :class:`AlertmanagerWebhook` that FleetMind does not read."""


CLIPPED_TEXT = WithJsonSchema(
    {
        "type": "string",
        "pattern": NO_NUL,
        "description": f"longer than {TEXT_LIMIT:,} characters: clipped to {TEXT_LIMIT:,} "
        "(ending in a note of the length and a hash), not refused",
    }
)
"""The published schema of a webhook's label value, annotation or ``generatorURL``: no length
limit, as the webhook clips (:func:`fleetmind.serving.routers.alerts.clip_text`)."""
_CLIPPED_LABELS = {
    "type": "object",
    "additionalProperties": CLIPPED_TEXT.json_schema,
    "propertyNames": {"minLength": 1, "maxLength": 256, "pattern": NO_NUL},
}


class WebhookAlertIn(AlertIn):
    """One alert of an Alertmanager webhook: validated as :class:`AlertIn`, but published as the
    webhook takes it (its over-long text is clipped before validation, not refused)."""

    labels: Annotated[Labels, WithJsonSchema(_CLIPPED_LABELS)]
    annotations: Annotated[Labels, WithJsonSchema(_CLIPPED_LABELS)] = Field(default_factory=dict)
    generatorURL: Annotated[
        Text | None, WithJsonSchema({"anyOf": [CLIPPED_TEXT.json_schema, {"type": "null"}]})
    ] = None


def _any_value(description: str) -> WithJsonSchema:
    """The published schema of an envelope field FleetMind does not read: any JSON value."""
    return WithJsonSchema(
        {"description": f"{description}; not read: a value of another type or length is ignored"}
    )


TRUNCATED_SCHEMA = {
    "anyOf": [{"type": "integer", "minimum": 0, "maximum": 2**64 - 1}, {"type": "null"}],
    "description": "alerts Alertmanager left out (its uint64 truncatedAlerts); a value that is "
    "not a count of alerts (a boolean, 1.5, -1, over 2,147,483,647) reads as 0, never refused",
}


class AlertmanagerWebhook(BaseModel):
    """The Alertmanager webhook v4 payload (``webhook_configs`` receiver).

    Only ``alerts`` and ``truncatedAlerts`` are read. The other fields (:data:`UNREAD_ENVELOPE`)
    are typed as Alertmanager sends them but never refuse a webhook: a value of another type or
    length (``"version": 4``, ``"groupLabels": null``, a ``receiver`` name over 256 characters,
    which Alertmanager allows) reads as ``None``, and the OpenAPI spec publishes them as any
    value. Alertmanager drops a notification answered with a 4xx, so a 422 for a field nothing
    reads would lose every alert of it. ``truncatedAlerts`` is only echoed and counted: one that
    is not a count of alerts (``true``, ``1.5``, ``-1``, ``"x"``) reads as 0, with one WARNING line
    (none when the validation context holds ``{"quiet": True}``: a second reading of the same
    webhook).
    """

    model_config = ConfigDict(extra="allow")

    version: Annotated[ShortText | None, _any_value('"4"')] = "4"
    groupKey: Annotated[Text | None, _any_value("the group's key")] = None
    truncatedAlerts: Annotated[Count | None, WithJsonSchema(TRUNCATED_SCHEMA)] = Field(
        None, ge=0, le=MAX_DB_INT
    )
    status: Annotated[
        Literal["firing", "resolved"] | None, _any_value('"firing" or "resolved"')
    ] = None
    receiver: Annotated[ShortText | None, _any_value("the receiver's name")] = None
    groupLabels: Annotated[Labels | None, _any_value("labels")] = Field(default_factory=dict)
    commonLabels: Annotated[Labels | None, _any_value("labels")] = Field(default_factory=dict)
    commonAnnotations: Annotated[Labels | None, _any_value("annotations")] = Field(
        default_factory=dict
    )
    externalURL: Annotated[Text | None, _any_value("Alertmanager's URL")] = None
    # a cap far above real groups (Alertmanager's max_alerts defaults to 0, no limit, and it does
    # not retry a 4xx: 10,000 lost big groups), low enough that one request cannot take gigabytes
    alerts: list[WebhookAlertIn] = Field(max_length=WEBHOOK_ALERT_CAP)

    @field_validator(*UNREAD_ENVELOPE, mode="wrap")
    @classmethod
    def _unread(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        try:
            return handler(value)
        except ValidationError:
            return None

    @field_validator("truncatedAlerts", mode="wrap")
    @classmethod
    def _lenient_count(
        cls, value: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo
    ) -> int | None:
        try:
            return handler(value)
        except ValidationError as err:
            if not (isinstance(info.context, dict) and info.context.get("quiet")):
                log.warning(
                    "webhook: truncatedAlerts %r is not a count of alerts (%s); read as 0",
                    safe_value(value),
                    err.errors(include_url=False)[0]["msg"],
                )
            return 0


class RejectedAlert(BaseModel):
    """An alert of a webhook that failed validation and was not stored."""

    index: int = Field(description="position of the alert in the webhook's ``alerts`` list")
    errors: list[dict[str, Any]] = Field(
        description="pydantic's errors as ``{type, loc, msg}`` (``loc`` under ``body``)"
    )


class IngestResponse(BaseModel):
    accepted: int = Field(description="alerts durably stored (new, status changes, or duplicates)")
    firing: int
    resolved: int
    rejected: list[RejectedAlert] = Field(
        default_factory=list,
        description="invalid alerts left out (the valid ones were stored); at most 20 are listed",
    )
    rejected_count: int = Field(0, description="how many alerts were left out in all")
    truncated: int = Field(
        0,
        description="alerts Alertmanager left out of this notification (its truncatedAlerts, "
        "because of the receiver's max_alerts): never seen here, counted in "
        "fleetmind_alerts_truncated_total",
    )


class AlertOut(BaseModel):
    id: int
    fingerprint: str
    status: str
    labels: dict[str, str]
    annotations: dict[str, str]
    startsAt: str
    endsAt: str | None
    node: str | None = Field(description="graph node the alert maps to (None when unmapped)")
    incident_id: int | None


# ---------------------------------------------------------------------------------------- RCA
class CauseOut(BaseModel):
    """One ranked root-cause candidate."""

    node: str
    kind: str
    cluster: str | None
    score: float
    fault_type: str | None = None
    path: list[str] = Field(description="node ids from the cause to an alerting node")


# The graph JSON: one model for the service, the loader and the CLI (data/graph_schema.py).
GraphNodeIn = GraphNodeModel
GraphEdgeIn = GraphEdgeModel
GraphIn = GraphModel


class RCARequest(BaseModel):
    alerts: list[AlertIn] = Field(..., min_length=1, max_length=10000)
    graph: GraphIn | None = Field(None, description="rank on this graph instead of the served one")
    top_k: Count = Field(5, ge=1, le=1000)


class RCAAlert(TypedDict):
    """``AlertIn`` as a plain dict, for ``POST /api/v1/rca``'s fast parse (not in the OpenAPI spec).

    The same fields, types and text constraints as :class:`AlertIn`, without a model instance per
    alert and without the Python validator that moves timestamps to UTC (the RCA handler turns them
    into unix seconds itself, and checks the one case that validator rejects). Unknown keys are
    dropped (``AlertIn`` keeps them, and nothing reads them).
    """

    labels: Labels
    status: NotRequired[Literal["firing", "resolved"]]
    annotations: NotRequired[Labels]
    startsAt: NotRequired[datetime | None]
    endsAt: NotRequired[datetime | None]
    generatorURL: NotRequired[Text | None]
    fingerprint: NotRequired[ShortText | None]


class RCARequestFast(BaseModel):
    """What :class:`RCARequest` accepts, parsed into plain alert dicts (:class:`RCAAlert`).

    ``serving.rca.router`` parses with this model and falls back to :class:`RCARequest` for
    anything it rejects, so error responses stay :class:`RCARequest`'s.
    """

    alerts: list[RCAAlert] = Field(..., min_length=1, max_length=10000)
    graph: GraphIn | None = None
    top_k: Count = Field(5, ge=1, le=1000)


class RCAResponse(BaseModel):
    causes: list[CauseOut]
    method: str
    model_version: str | None
    graph: str = Field(description="name of the graph ranked on")
    mapped_alerts: int = Field(description="alerts whose labels matched a graph node")
    fallback_reason: str | None = Field(None, description="why the GAT is not the one answering")


# ---------------------------------------------------------------------------------------- incidents
class IncidentOut(BaseModel):
    id: int
    status: Literal["open", "resolved", "merged"]
    opened_at: str
    updated_at: str
    closed_at: str | None
    first_alert_at: str
    last_alert_at: str
    alert_count: int
    firing_count: int
    nodes: list[str]
    clusters: list[str]
    causes: list[CauseOut]
    method: str | None
    model_version: str | None
    merged_into: int | None = None


class IncidentDetail(IncidentOut):
    alerts: list[AlertOut]


# ---------------------------------------------------------------------------------------- placement
class JobSpec(BaseModel):
    """A job to place (openb semantics: ``gpu_milli`` is the share of each GPU, 1000 = a whole one)."""

    model_config = ConfigDict(extra="forbid")

    job_id: ShortText | None = None
    num_gpu: int = Field(1, ge=0, le=64)
    gpu_milli: int = Field(1000, ge=0, le=1000)
    gpu_model: ShortText | None = Field(None, description="required GPU model, any when unset")
    cpu_milli: int = Field(0, ge=0, le=10_000_000)
    memory_mib: int = Field(0, ge=0, le=100_000_000)
    cluster: ShortText | None = Field(None, description="only consider this cluster")
    reserve: bool = Field(False, description="book the GPUs so that later placements see them used")
    alternatives: int = Field(3, ge=0, le=20)

    @field_validator(
        "num_gpu", "gpu_milli", "cpu_milli", "memory_mib", "alternatives", mode="before"
    )
    @classmethod
    def _no_boolean(cls, v: Any) -> Any:
        """A count is a number: JSON ``true`` is refused (pydantic's lax mode reads it as 1).
        Numeric strings (``"2"``) stay accepted, as everywhere else in the API."""
        if isinstance(v, bool):
            raise ValueError("must be an integer, not a boolean")
        return v

    @field_validator("gpu_model")
    @classmethod
    def _names_a_model(cls, v: str | None) -> str | None:
        """A set ``gpu_model`` names at least one model (``|``/``,``-separated, the entries that
        ``serving.scheduler.placement.parse_gpu_models`` keeps); ``""`` is the same as unset."""
        if v and not any(re.search(r"[^\s_-]", w) for w in re.split(r"[|,]", v)):
            raise ValueError(f"gpu_model {v!r} names no GPU model (e.g. 'A100' or 'A100|H100')")
        return v

    @model_validator(mode="after")
    def _gpu_job_takes_a_share(self) -> JobSpec:
        """A GPU job (``num_gpu`` > 0) takes 1..1000 milli of each GPU; ``gpu_milli`` 0 would hold
        nothing (openb and FGD read ``gpu_milli`` 0 as a CPU-only pod: ask ``num_gpu`` 0 for that,
        where ``gpu_milli`` is ignored)."""
        if self.num_gpu > 0 and self.gpu_milli < 1:
            raise ValueError(
                f"gpu_milli must be 1..1000 for a job with num_gpu {self.num_gpu} "
                "(num_gpu 0 for a CPU-only job)"
            )
        return self


class PlacementOption(BaseModel):
    cluster: str
    node: str
    gpus: list[int]
    score: float


class PlacementOut(BaseModel):
    cluster: str
    node: str
    gpus: list[int]
    policy: str
    model_version: str | None
    fallback_reason: str | None = None
    score: float
    alternatives: list[PlacementOption]
    reserved: bool


# ---------------------------------------------------------------------------------------- fleet
class GpuOut(BaseModel):
    index: int
    uuid: str | None
    model: str
    util_pct: float | None
    mem_used_mib: float | None
    mem_total_mib: float | None
    xid_errors: float | None
    free_milli: int
    healthy: bool
    unallocatable: bool = False
    """Out of the node's allocatable ``nvidia.com/gpu`` (the device plugin marked it unhealthy)."""


class NodeOut(BaseModel):
    name: str
    cluster: str
    cpu_milli: int
    cpu_milli_free: int
    memory_mib: int
    memory_mib_free: int
    gpus: list[GpuOut]
    schedulable: bool = True
    """False when cordoned, being removed by an autoscaler, or not Ready: placements leave the
    node out."""
    cordoned: bool = False
    """``spec.unschedulable`` (kube-state-metrics' ``kube_node_spec_unschedulable``)."""
    draining: str = ""
    """The taint key of a node an autoscaler is removing (Cluster Autoscaler's
    ``ToBeDeletedByClusterAutoscaler``, Karpenter's ``karpenter.sh/disrupted``, from
    kube-state-metrics' ``kube_node_spec_taint``); empty when not so tainted or not reported."""
    not_ready: Literal["false", "unknown"] | None = None
    """The ``Ready`` condition's status when it is not True; null when Ready or not reported."""


class ClusterHealthOut(BaseModel):
    """Per-cluster health inputs (fractions, seconds, requests/s; null when unknown) and score."""

    cluster: str
    health: float | None
    gpu_util: float | None
    vram_pressure: float | None
    p99_latency_s: float | None
    p95_latency_s: float | None
    request_rate: float | None
    cpu_use: float | None


class FleetOut(BaseModel):
    source: str
    collected_at: str
    num_nodes: int
    num_gpus: int
    nodes: list[NodeOut]
    clusters: list[ClusterHealthOut] = Field(default_factory=list)
    fleet_skew: float | None = None
    health_weights: dict[str, float] | None = None


# ---------------------------------------------------------------------------------------- models
class ModelInfo(BaseModel):
    kind: Literal["rca", "placement"]
    method: str
    version: str | None
    source: str | None
    fallback_reason: str | None
    loaded_at: str
    calibrated: bool | None = Field(
        None,
        description="RCA: whether a temperature was fitted to the model's top score (a GAT whose "
        "config.json holds one), on the simulated incidents calibration_fitted_on names: no "
        "promise of how often a score is right on a real system; false for a model of "
        "'fleetmind rca fit' (gat_fit) or a GAT without one; null for placement and baselines",
    )
    calibration_fitted_on: dict[str, Any] | None = Field(
        None,
        description="RCA: the incidents the temperature was fitted on (config.json "
        "calibration.fitted_on: data, split, n, generator); null without a fitted temperature",
    )


class ModelsOut(BaseModel):
    generation: int = Field(description="increments on every successful reload")
    rca: ModelInfo
    placement: ModelInfo


class GraphSummary(BaseModel):
    name: str
    num_nodes: int
    num_edges: int


class ErrorOut(BaseModel):
    detail: str
