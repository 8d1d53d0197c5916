"""``PUT /api/v1/graph`` swaps the graph of the process that answered, and its answer says so.

With ``fleetmind serve --workers N`` (or several replicas) a PUT through the load balancer reaches
one process; the others keep their graph, and since a rewritten ``FLEETMIND_GRAPH`` file with the
same bytes keeps an upload, the processes may serve different graphs until the file's content
changes. Nothing carries an upload to the other processes, so the answer's ``warnings`` say it
plainly and point at the file, which every worker reads. uvicorn runs each worker as its own
process with its own application state (``uvicorn/supervisors/multiprocess.py``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from fleetmind.serving.app import create_app
from fleetmind.serving.defaults.example import build_example_graph
from fleetmind.serving.settings import Settings

ADMIN = "graph-upload-admin-token"
A = {"Authorization": f"Bearer {ADMIN}"}


def _settings(tmp_path: Path, refresh: bool) -> Settings:
    path = tmp_path / "graph.json"
    path.write_text(json.dumps(build_example_graph(clusters=1, name="from-file").to_json()))
    return Settings(
        database_url=f"sqlite:///{tmp_path}/g.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
        api_token=ADMIN,
        graph=str(path),
        graph_refresh_s=3600 if refresh else 0,
    )


@pytest.mark.parametrize("refresh", [True, False], ids=["refreshed_file", "no_refresh"])
def test_the_put_answer_says_the_upload_reaches_this_process_only(
    tmp_path: Path, refresh: bool
) -> None:
    upload = build_example_graph(clusters=1, hosts=2, name="uploaded").to_json()
    with TestClient(create_app(_settings(tmp_path, refresh))) as c:
        r = c.put("/api/v1/graph", json=upload, headers=A)
    assert r.status_code == 200, r.text
    *file_note, one_process = r.json()["warnings"]
    assert len(file_note) == (1 if refresh else 0)
    lasts = "until the file's content changes" if refresh else "until a restart"
    assert one_process == (
        f"graph: this upload reaches only the process that answered (pid {os.getpid()}); with "
        "several workers (--workers) or replicas the others keep their own graph, and they "
        f"disagree for as long as the upload lasts ({lasts}); new alerts are grouped into "
        "incidents by one process only (the leader, holding the incident worker's lease), on its "
        "own graph, so they group on this upload only if this process is the leader; for several "
        "workers or replicas write the graph to the FLEETMIND_GRAPH file instead (re-read with "
        "FLEETMIND_GRAPH_REFRESH_S)"
    )
