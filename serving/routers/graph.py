"""``/api/v1/graph``: the dependency graph the RCA reasons over; replaceable at runtime."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends

from fleetmind.data.graph import DependencyGraph
from fleetmind.serving.deps import GraphsDep, require_scope
from fleetmind.serving.schemas import GraphIn, GraphSummary

router = APIRouter(prefix="/api/v1/graph", tags=["graph"])


@router.get(
    "",
    summary="The served graph (graph JSON of the data contract)",
    dependencies=[Depends(require_scope("read"))],
)
def get_graph(graphs: GraphsDep) -> dict[str, Any]:
    return graphs.graph.to_json()


@router.put(
    "",
    response_model=GraphSummary,
    dependencies=[Depends(require_scope("admin"))],
    summary="Replace the served graph (in this process; new alerts group on it)",
)
def put_graph(body: GraphIn, graphs: GraphsDep) -> GraphSummary:
    graph = DependencyGraph.from_model(body)  # DataError -> 422 naming the bad entry
    graphs.replace(graph, source="api")
    return GraphSummary(name=graph.name, num_nodes=graph.num_nodes, num_edges=graph.num_edges)
