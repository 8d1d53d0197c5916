"""MLflow pyfunc wrapper of the GAT artifact (logged by :mod:`fleetmind.training.rca_train`)."""

from __future__ import annotations

from typing import Any

import mlflow.pyfunc
import numpy as np
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE

from fleetmind.data.graph import DependencyGraph
from fleetmind.rca.gat_analyzer import GATAnalyzer


def _plain(value: Any) -> Any:
    """``value`` as plain Python: MLflow's scoring server hands each field of an ``inputs`` row
    over as a NumPy object array (a 0-d one for a JSON object), which the loaders do not take."""
    return value.tolist() if isinstance(value, np.ndarray) else value


class GATPyfunc(mlflow.pyfunc.PythonModel):
    """MLflow pyfunc wrapper of the GAT artifact.

    ``predict`` takes a list (or DataFrame) of ``{"graph": <graph JSON>, "alerts": [...]}`` rows (as
    ``mlflow models serve`` takes them: ``{"inputs": [rows], "params": {"top_k": 3}}``) and
    returns, per incident, the top causes as JSON dicts (node, kind, cluster, score, fault_type, path);
    ``params={"top_k": k}`` sets how many (default 5).

    As the service's ``POST /api/v1/rca`` (:func:`fleetmind.serving.rca.request.response_json`):
    an incident none of whose alerts names a graph node gets no causes (a ranking would rest on
    the graph alone), and a row with no alerts is refused (``MlflowException``
    ``INVALID_PARAMETER_VALUE``: 400 from ``mlflow models serve``, where the service answers 422).
    """

    # The rows are free-form JSON dicts (docstring above), which MLflow's type-hint validation cannot
    # describe; without this MLflow warns at import, on every CLI run, that predict() has no hints.
    _skip_type_hint_validation = True

    def load_context(self, context: Any) -> None:

        self.analyzer = GATAnalyzer.load(context.artifacts["gat"])

    def predict(self, context, model_input, params=None):  # noqa: ANN001, ANN201 - MLflow reads hints

        top_k = int((params or {}).get("top_k", 5))
        rows = model_input.to_dict("records") if hasattr(model_input, "to_dict") else model_input
        out = []
        for i, row in enumerate(rows):
            alerts = _plain(row["alerts"])
            if not isinstance(alerts, list) or not alerts:
                raise MlflowException(
                    f"row {i}: 'alerts' must be a non-empty list of alerts", INVALID_PARAMETER_VALUE
                )
            g = DependencyGraph.from_json(_plain(row["graph"]))
            res = self.analyzer.find_root_causes(g, alerts, top_k=top_k)
            unmapped = (res.extra or {}).get("unmapped_alerts", 0)
            mapped = len(alerts) - unmapped if isinstance(unmapped, int) else len(alerts)
            out.append([c.to_json() for c in res.causes] if mapped else [])
        return out
