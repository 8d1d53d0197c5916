"""The models the trainers log to MLflow load and answer through MLflow's own loader and scoring
server, as a user of ``mlflow.pyfunc.load_model`` or ``mlflow models serve`` meets them.

The wrappers are logged as models from code (``fleetmind.training.pyfunc_entries``), with a
signature whose parameter schema declares ``top_k``: MLflow's ``PyFuncModel.predict`` drops every
parameter a signature does not declare (``mlflow.models.utils._validate_and_get_model_params``),
and the ``/invocations`` route of ``mlflow.pyfunc.scoring_server`` passes the body's ``params``
through the same check.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import mlflow
import numpy as np
import pytest
from fastapi.testclient import TestClient

from fleetmind.data.rca_gen.alerts import AlertSimConfig, IncidentSimulator
from fleetmind.data.rca_gen.graphs import GraphGenConfig, generate_graph
from fleetmind.rl.export import OnnxActor
from fleetmind.training import rca_train
from fleetmind.training.recipes import tracking as placement_tracking
from fleetmind.training.tracking import ready_store

REPO = Path(__file__).resolve().parents[1]
RELEASED_GAT = REPO / "models" / "rca"
RELEASED_PLACEMENT = REPO / "models" / "placement"


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(tmp_path)  # artifacts land under tmp_path/mlruns
    ready_store(uri)
    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment("pyfunc-test")
    yield uri
    mlflow.set_tracking_uri(None)  # later tests see the environment's store again


@pytest.fixture
def incident() -> dict:
    rng = np.random.default_rng(3)
    graph = generate_graph("pyfunc", rng, GraphGenConfig(), n_nodes=120)
    storm = IncidentSimulator(graph, AlertSimConfig()).simulate(rng, "inc-1")
    return {"graph": graph.to_json(), "alerts": storm["alerts"], "root": storm["root_cause"]}


def _pickle_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "CloudPickle" in r.getMessage()]


def test_gat_pyfunc_loads_from_the_registry_and_honours_top_k(
    store: str, incident: dict, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    with mlflow.start_run():
        entry = rca_train.log_and_register(RELEASED_GAT, val_ac1=0.9)
    assert entry["registered_model"] == "fleetmind-rca" and entry["champion"] is True
    assert _pickle_warnings(caplog) == []

    local = Path(mlflow.artifacts.download_artifacts(entry["model_uri"]))
    assert not (local / "python_model.pkl").exists()  # code, not a pickle
    assert (local / "rca.py").is_file()  # the entry travels with the model

    model = mlflow.pyfunc.load_model("models:/fleetmind-rca@champion")
    row = {"graph": incident["graph"], "alerts": incident["alerts"]}
    caplog.clear()
    (two,) = model.predict([row], params={"top_k": 2})
    assert len(two) == 2
    assert not [r for r in caplog.records if "Ignoring provided params" in r.getMessage()]
    (default,) = model.predict([row])
    assert len(default) == 5
    assert [c["node"] for c in default[:2]] == [c["node"] for c in two]
    assert two[0]["node"] == incident["root"]  # a plain simulated storm: the released GAT gets it
    assert set(two[0]) >= {"node", "kind", "score", "fault_type", "path"}


def test_gat_pyfunc_answers_through_mlflows_scoring_server(store: str, incident: dict) -> None:
    from mlflow.pyfunc import scoring_server

    with mlflow.start_run():
        entry = rca_train.log_and_register(RELEASED_GAT, val_ac1=0.9, register=False)
    app = scoring_server.init(mlflow.pyfunc.load_model(entry["model_uri"]))
    body = {
        "inputs": [{"graph": incident["graph"], "alerts": incident["alerts"]}],
        "params": {"top_k": 1},
    }
    with TestClient(app) as client:
        resp = client.post(
            "/invocations", content=json.dumps(body), headers={"Content-Type": "application/json"}
        )
    assert resp.status_code == 200, resp.text
    (causes,) = resp.json()["predictions"]
    assert [c["node"] for c in causes] == [incident["root"]]


def test_placement_pyfunc_loads_and_picks_an_allowed_candidate(
    store: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    with mlflow.start_run():
        entry = placement_tracking.log_placement_pyfunc(RELEASED_PLACEMENT, score=10.0)
    assert entry["registered_model"] == "fleetmind-placement" and entry["champion"] is True
    assert _pickle_warnings(caplog) == []

    actor = OnnxActor(RELEASED_PLACEMENT / "policy.onnx")
    k, dim = actor.n_candidates, actor.obs_dim
    assert dim is not None
    rng = np.random.default_rng(0)
    rows = []
    for allowed in (3, 11):
        mask = [i == allowed for i in range(k)]
        rows.append({"obs": rng.random(dim).astype(float).tolist(), "mask": mask})
    model = mlflow.pyfunc.load_model("models:/fleetmind-placement@champion")
    # with one candidate allowed, the greedy choice can only be that one
    assert model.predict(rows) == [3, 11]
    # and the wrapper agrees with the exported actor itself on free choices
    free = [{"obs": rng.random(dim).astype(float).tolist(), "mask": [True] * k} for _ in range(4)]
    expected = actor.predict(
        np.asarray([r["obs"] for r in free], dtype=np.float32), np.ones((4, k), dtype=bool)
    )
    assert model.predict(free) == expected.tolist()

    from mlflow.pyfunc import scoring_server

    with TestClient(scoring_server.init(model)) as client:
        resp = client.post(
            "/invocations",
            content=json.dumps({"inputs": rows + free}),
            headers={"Content-Type": "application/json"},
        )
    assert resp.status_code == 200, resp.text
    assert resp.json()["predictions"] == [3, 11, *expected.tolist()]
