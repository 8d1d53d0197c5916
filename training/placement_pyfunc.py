"""MLflow pyfunc wrapper of the exported placement actor (logged by :mod:`fleetmind.training.recipes.tracking`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mlflow.pyfunc
import numpy as np


class PlacementPyfunc(mlflow.pyfunc.PythonModel):
    """MLflow pyfunc wrapper of the exported actor.

    ``predict`` takes rows ``{"obs": [K*F+G floats], "mask": [K bools]}`` (list or DataFrame) and
    returns the greedy candidate index per row.
    """

    # The rows are free-form JSON dicts (docstring above), which MLflow's type-hint validation cannot
    # describe; without this MLflow warns at import, on every CLI run, that predict() has no hints.
    _skip_type_hint_validation = True

    def load_context(self, context: Any) -> None:
        from fleetmind.rl.export import OnnxActor

        self.actor = OnnxActor(Path(context.artifacts["placement"]) / "policy.onnx")

    def predict(self, context, model_input, params=None):  # noqa: ANN001, ANN201 - MLflow infers schemas from hints
        rows = model_input.to_dict("records") if hasattr(model_input, "to_dict") else model_input
        obs = np.asarray([r["obs"] for r in rows], dtype=np.float32)
        mask = np.asarray([r["mask"] for r in rows], dtype=bool)
        return self.actor.predict(obs, mask).tolist()
