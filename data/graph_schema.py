"""The graph JSON format as ONE pydantic model: validation for the loader, the service and the CLI.

:class:`GraphModel` checks the structure (types, node and edge kinds, lengths, no NUL characters);
:class:`fleetmind.data.graph.DependencyGraph` then checks what needs the whole graph (unique node ids, edge
ends that exist). ``DependencyGraph.from_json``, the service's ``PUT /api/v1/graph`` and
``POST /api/v1/rca`` bodies, and ``fleetmind graph build`` all use it. The JSON Schema in
``docs/graph.schema.json`` is generated from it (:func:`graph_json_schema`;
``fleetmind graph schema`` prints it; a test keeps the file current).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

NODE_KINDS: tuple[str, ...] = (
    "service",
    "pod",
    "host",
    "gpu",
    "link",
    "cluster",
    "registry",
    "dns",
    "config",
    "storage",
    "network",
    "infra",
)
"""Node kinds. ``registry``, ``dns``, ``config``, ``storage``, ``network`` and ``infra`` are shared infra."""

EDGE_KINDS: tuple[str, ...] = (
    "calls",
    "runs_on",
    "hosted_on",
    "attached_to",
    "member_of",
    "depends_on",
)
"""Edge kinds; every edge points from the dependent (``src``) to its dependency (``dst``)."""

NO_NUL = r"^[^\x00]*$"
MAX_ID_LENGTH = 512
"""Longest node id (and edge end): the longest id ``fleetmind graph build`` makes from valid
Kubernetes names, ``<cluster>/pod/<namespace>/<pod>`` with a 63-character cluster label value, a
63-character namespace and a 253-character pod name, has 63 + 5 + 63 + 1 + 253 = 385 characters.
The service stores node ids as TEXT and feedback accepts a 512-character ``root_cause``."""
MAX_GRAPH_NODES = 200_000
"""Most nodes in one graph."""
MAX_GRAPH_EDGES = 2_000_000
"""Most edges in one graph."""
ShortText = Annotated[str, StringConstraints(max_length=256, pattern=NO_NUL)]
NodeId = Annotated[str, StringConstraints(max_length=MAX_ID_LENGTH, pattern=NO_NUL)]
LabelName = Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=NO_NUL)]
Text = Annotated[str, StringConstraints(max_length=8192, pattern=NO_NUL)]
NodeKind = Literal[NODE_KINDS]  # type: ignore[valid-type]
EdgeKind = Literal[EDGE_KINDS]  # type: ignore[valid-type]

SCHEMA_ID = "https://fleetmind.dev/schemas/graph.schema.json"


MAX_ATTR_DEPTH = 16


def _check_json_value(v: Any, depth: int = 0) -> None:
    """Raise ``ValueError`` unless ``v`` round-trips through JSON and every database: no NaN or
    infinity, no NUL character or unpaired surrogate in any string or key, nesting within
    :data:`MAX_ATTR_DEPTH`. (Python's JSON parser reads ``NaN`` and ``"\\ud800"``; a graph holding
    them could be stored but not answered.)"""
    if depth > MAX_ATTR_DEPTH:
        raise ValueError(f"attrs nest deeper than {MAX_ATTR_DEPTH} levels")
    if isinstance(v, float):
        if v != v or v in (float("inf"), float("-inf")):
            raise ValueError("attrs hold NaN or an infinity, which JSON cannot carry")
    elif isinstance(v, str):
        if "\x00" in v:
            raise ValueError("attrs hold a NUL character")
        try:
            v.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("attrs hold an unpaired surrogate, which UTF-8 cannot carry") from None
    elif isinstance(v, dict):
        for k, x in v.items():
            _check_json_value(k, depth + 1)
            _check_json_value(x, depth + 1)
    elif isinstance(v, list | tuple):
        for x in v:
            _check_json_value(x, depth + 1)


def _as_text(v: Any) -> Any:
    """Numbers become text (ids and label values written by hand are often numbers)."""
    return str(v) if isinstance(v, int | float) and not isinstance(v, bool) else v


class GraphNodeModel(BaseModel):
    """A typed node; ``match`` holds the alert labels that identify it."""

    model_config = ConfigDict(extra="forbid")

    id: NodeId = Field(description="unique node id, e.g. 'c0/host/h12'")
    kind: NodeKind = Field(description="node kind")
    cluster: ShortText | None = Field(None, description="cluster, or null for global nodes")
    match: Annotated[dict[LabelName, Text], Field(max_length=256)] = Field(
        default_factory=dict, description="alert labels that identify this node"
    )
    attrs: dict[ShortText, Any] = Field(
        default_factory=dict, description="free attributes (e.g. GPU 'model', 'region')"
    )

    @field_validator("id", mode="before")
    @classmethod
    def _id_text(cls, v: Any) -> Any:
        return _as_text(v)

    @field_validator("attrs")
    @classmethod
    def _attrs_json(cls, v: dict[str, Any]) -> dict[str, Any]:
        _check_json_value(v)
        return v

    @field_validator("match", mode="before")
    @classmethod
    def _match_text(cls, v: Any) -> Any:
        if isinstance(v, dict):
            return {k: _as_text(x) for k, x in v.items()}
        return {} if v is None else v


class GraphEdgeModel(BaseModel):
    """A typed edge ``src -> dst``: ``src`` depends on ``dst``."""

    model_config = ConfigDict(extra="forbid")

    src: NodeId = Field(description="the dependent node's id")
    dst: NodeId = Field(description="the dependency's id")
    kind: EdgeKind = Field(description="edge kind")

    @field_validator("src", "dst", mode="before")
    @classmethod
    def _end_text(cls, v: Any) -> Any:
        return _as_text(v)


class GraphModel(BaseModel):
    """A dependency graph (the graph JSON of the data contract); edges point dependent -> dependency."""

    model_config = ConfigDict(title="FleetMind dependency graph")

    name: ShortText = "graph"
    nodes: list[GraphNodeModel] = Field(..., max_length=MAX_GRAPH_NODES)
    edges: list[GraphEdgeModel] = Field(..., max_length=MAX_GRAPH_EDGES)


def graph_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of the graph JSON, generated from :class:`GraphModel`."""
    schema = GraphModel.model_json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID, **schema}


def validation_message(err: Any) -> str:
    """The first error of a pydantic ``ValidationError`` as one line (where, what)."""
    first = err.errors(include_url=False)[0]
    where = ".".join(str(p) for p in first.get("loc", ())) or "(root)"
    return f"{where}: {first.get('msg', 'invalid')}"
