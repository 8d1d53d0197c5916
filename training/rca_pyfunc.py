"""MLflow pyfunc wrapper of the GAT artifact (logged by :mod:`fleetmind.training.rca_train`)."""

from __future__ import annotations

from typing import Any

import mlflow.pyfunc
import numpy as np

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
        for row in rows:
            g = DependencyGraph.from_json(_plain(row["graph"]))
            res = self.analyzer.find_root_causes(g, _plain(row["alerts"]), top_k=top_k)
            out.append([c.to_json() for c in res.causes])
        return out
