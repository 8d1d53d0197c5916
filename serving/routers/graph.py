"""``/api/v1/graph``: the dependency graph the RCA reasons over; replaceable at runtime.

Both answers say which graph is served: its ``version`` in this process (1 at start, +1 per swap),
its ``source`` (the ``FLEETMIND_GRAPH`` file's path, or ``"api"``) and ``loaded_at``. An upload
reaches only the process that answered (one worker of ``--workers N``, one replica), and while
``FLEETMIND_GRAPH`` is re-read (``FLEETMIND_GRAPH_REFRESH_S``) it is served until the file's
content changes; new alerts are grouped into incidents by one process only (the leader of the
incident worker), on that process's graph. The ``PUT`` answer's ``warnings`` say all three.
"""

from __future__ import annotations

import os
from typing import Any

from fastapi import APIRouter, Depends, Request
from pydantic import Field

from fleetmind.data.graph import DependencyGraph
from fleetmind.serving.deps import GraphsDep, require_scope
from fleetmind.serving.origin_guard import Utf8JsonRoute
from fleetmind.serving.schemas import GraphIn, GraphSummary

router = APIRouter(prefix="/api/v1/graph", tags=["graph"], route_class=Utf8JsonRoute)


class GraphReplaced(GraphSummary):
    """The answer to ``PUT /api/v1/graph``: the graph now served, and how long it stays."""

    version: int = Field(description="this process's graph version: 1 at start, +1 per swap")
    source: str = Field(description="'api': the uploaded graph")
    loaded_at: str = Field(description="when it was swapped in, ISO 8601 UTC")
    warnings: list[str] = Field(
        default_factory=list,
        description="where this upload is served (this process only), which process groups "
        "incidents on its graph (the leader), and what can replace it (a re-read "
        "FLEETMIND_GRAPH file)",
    )


def upload_warnings(request: Request) -> list[str]:
    """Why an upload may not be what every request sees: it reaches only this process (other
    workers and replicas keep their graph, with no propagation), incidents are grouped on the
    leader's graph (the process holding the incident worker's lease, maybe another one), and a
    re-read ``FLEETMIND_GRAPH`` file (the refresher) replaces it once the file's content
    changes."""
    out = []
    refresher = getattr(request.app.state, "graph_refresher", None)
    if refresher is not None:
        out.append(
            f"graph: FLEETMIND_GRAPH is re-read every {refresher.interval_s:g} s "
            "(FLEETMIND_GRAPH_REFRESH_S): this upload is served until the file's content "
            "changes, then the file's graph replaces it"
        )
    out.append(
        f"graph: this upload reaches only the process that answered (pid {os.getpid()}); with "
        "several workers (--workers) or replicas the others keep their own graph, and they "
        "disagree for as long as the upload lasts"
        + (" (until the file's content changes)" if refresher is not None else " (until a restart)")
        + "; new alerts are grouped into incidents by one process only (the leader, holding the "
        "incident worker's lease), on its own graph, so they group on this upload only if this "
        "process is the leader; for several workers or replicas write the graph to the "
        "FLEETMIND_GRAPH file instead (re-read with FLEETMIND_GRAPH_REFRESH_S)"
    )
    return out


@router.get(
    "",
    summary="The served graph (graph JSON of the data contract, with version, source, loaded_at)",
    dependencies=[Depends(require_scope("read"))],
)
def get_graph(graphs: GraphsDep) -> dict[str, Any]:
    view = graphs.view
    return {**view.graph.to_json(), **view.describe()}


@router.put(
    "",
    response_model=GraphReplaced,
    dependencies=[Depends(require_scope("admin"))],
    summary="Replace the graph served by the process that answered (one worker or replica; "
    "incidents group on the leader's graph)",
)
def put_graph(body: GraphIn, graphs: GraphsDep, request: Request) -> GraphReplaced:
    graph = DependencyGraph.from_model(body)  # DataError -> 422 naming the bad entry
    view = graphs.replace(graph, source="api")
    return GraphReplaced(
        name=graph.name,
        num_nodes=graph.num_nodes,
        num_edges=graph.num_edges,
        **view.describe(),
        warnings=upload_warnings(request),
    )
