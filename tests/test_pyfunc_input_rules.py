"""The MLflow pyfunc wrappers answer as the service does, and refuse what they cannot decide.

* RCA (:class:`fleetmind.training.rca_pyfunc.GATPyfunc`): an incident none of whose alerts names
  a graph node gets no causes, as ``POST /api/v1/rca`` (``serving/rca/request.py``,
  ``response_json``: ``causes = ... if mapped else []``); it used to rank causes from the graph
  alone. A row with no alerts is refused (the service's schema has ``min_length=1``: 422).
* Placement (:class:`fleetmind.training.placement_pyfunc.PlacementPyfunc`): a row whose mask allows
  no candidate, or whose observation holds a NaN or infinity, used to get candidate 0.

Both refuse with ``MlflowException(error_code=INVALID_PARAMETER_VALUE)``, which MLflow's scoring
server answers with HTTP 400 and the message (``mlflow/pyfunc/scoring_server/__init__.py``,
``invocations``: an ``MlflowException`` from ``predict`` is re-raised with its code;
``mlflow/exceptions.py``, ``get_http_status_code``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from mlflow.exceptions import MlflowException

from fleetmind.data.rca_gen.alerts import AlertSimConfig, IncidentSimulator
from fleetmind.data.rca_gen.graphs import GraphGenConfig, generate_graph
from fleetmind.rca.gat_analyzer import GATAnalyzer
from fleetmind.rl.export import OnnxActor
from fleetmind.training.placement_pyfunc import PlacementPyfunc
from fleetmind.training.rca_pyfunc import GATPyfunc

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def gat() -> GATPyfunc:
    model = GATPyfunc()
    model.analyzer = GATAnalyzer.load(None)  # what load_context does with the logged artifact
    return model


@pytest.fixture(scope="module")
def incident() -> dict:
    rng = np.random.default_rng(3)
    graph = generate_graph("pyfunc", rng, GraphGenConfig(), n_nodes=120)
    storm = IncidentSimulator(graph, AlertSimConfig()).simulate(rng, "inc-1")
    return {"graph": graph.to_json(), "alerts": storm["alerts"]}


def _refused(exc: pytest.ExceptionInfo[MlflowException]) -> str:
    assert exc.value.get_http_status_code() == 400
    return exc.value.message


def test_alerts_that_name_no_node_get_no_causes(gat: GATPyfunc, incident: dict) -> None:
    (mapped,) = gat.predict(None, [incident])
    assert len(mapped) == 5
    nowhere = [
        {**a, "labels": {**a["labels"], "cluster": "nowhere", "node": "nowhere"}}
        for a in incident["alerts"][:4]
    ]
    assert gat.predict(None, [{"graph": incident["graph"], "alerts": nowhere}]) == [[]]


def test_an_incident_without_alerts_is_refused(gat: GATPyfunc, incident: dict) -> None:
    with pytest.raises(MlflowException) as exc:
        gat.predict(None, [incident, {"graph": incident["graph"], "alerts": []}])
    assert _refused(exc) == "row 1: 'alerts' must be a non-empty list of alerts"


@pytest.fixture(scope="module")
def placement() -> PlacementPyfunc:
    model = PlacementPyfunc()
    model.actor = OnnxActor(REPO / "models" / "placement" / "policy.onnx")
    return model


def _row(model: PlacementPyfunc, allowed: list[int], value: float = 0.5) -> dict:
    k, d = model.actor.n_candidates, model.actor.obs_dim
    return {"obs": [value] * d, "mask": [i in allowed for i in range(k)]}


def test_a_row_with_every_candidate_masked_is_refused(placement: PlacementPyfunc) -> None:
    assert placement.predict(None, [_row(placement, [3])]) == [3]
    with pytest.raises(MlflowException) as exc:
        placement.predict(None, [_row(placement, [3]), _row(placement, [])])
    assert _refused(exc) == "row 1: 'mask' allows no candidate"


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 1e300])
def test_a_non_finite_observation_is_refused(placement: PlacementPyfunc, value: float) -> None:
    with pytest.raises(MlflowException) as exc:
        placement.predict(None, [_row(placement, [1, 2], value)])
    assert _refused(exc).startswith("row 0: 'obs' holds a NaN or infinite value")


def test_rows_of_the_wrong_shape_or_type_are_refused(placement: PlacementPyfunc) -> None:
    good = _row(placement, [1])
    for bad in (
        {**good, "obs": good["obs"][:10]},
        {**good, "mask": good["mask"][:3]},
        {**good, "mask": ["false"] * (len(good["mask"]) - 1) + ["true"]},
        {"obs": good["obs"]},
    ):
        with pytest.raises(MlflowException) as exc:
            placement.predict(None, [bad])
        _refused(exc)
    ints = {**good, "mask": [int(m) for m in good["mask"]]}  # 0 and 1 read as booleans
    assert placement.predict(None, [ints]) == [1]
    assert placement.predict(None, []) == []
    assert json.dumps(placement.predict(None, [good]))  # plain Python out
