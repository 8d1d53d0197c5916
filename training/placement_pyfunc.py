"""MLflow pyfunc wrapper of the exported placement actor (logged by :mod:`fleetmind.training.recipes.tracking`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mlflow.pyfunc
import numpy as np
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE


class PlacementPyfunc(mlflow.pyfunc.PythonModel):
    """MLflow pyfunc wrapper of the exported actor.

    ``predict`` takes rows ``{"obs": [K*F+G floats], "mask": [K bools]}`` (list or DataFrame) and
    returns the greedy candidate index per row. Rows that cannot be decided (an observation of
    the wrong size or with a NaN or infinite value, a mask of the wrong size or with no allowed
    candidate) raise ``MlflowException`` ``INVALID_PARAMETER_VALUE``: 400 from
    ``mlflow models serve``, where the actor would pick a candidate the mask rules out.
    """

    # The rows are free-form JSON dicts (docstring above), which MLflow's type-hint validation cannot
    # describe; without this MLflow warns at import, on every CLI run, that predict() has no hints.
    _skip_type_hint_validation = True

    def load_context(self, context: Any) -> None:
        from fleetmind.rl.export import OnnxActor

        self.actor = OnnxActor(Path(context.artifacts["placement"]) / "policy.onnx")

    def predict(self, context, model_input, params=None):  # noqa: ANN001, ANN201 - MLflow infers schemas from hints
        rows = model_input.to_dict("records") if hasattr(model_input, "to_dict") else model_input
        if len(rows) == 0:
            return []
        obs, mask = _arrays(rows, self.actor.obs_dim, self.actor.n_candidates)
        return self.actor.predict(obs, mask).tolist()


def _plain(value: Any) -> Any:
    """``value`` as plain Python (a NumPy array as a list)."""
    return value.tolist() if isinstance(value, np.ndarray) else value


def _invalid(message: str) -> MlflowException:
    return MlflowException(message, error_code=INVALID_PARAMETER_VALUE)


def _arrays(rows: Any, obs_dim: int | None, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``obs (B, D)`` float32 and ``mask (B, K)`` bool of the input rows.

    Raises:
        MlflowException: ``INVALID_PARAMETER_VALUE``, naming the first row that is not valid.
    """
    try:  # the scoring server hands each field over as a NumPy object array: made plain first
        obs = np.asarray([_plain(r["obs"]) for r in rows], dtype=np.float64)
        raw = [np.asarray(_plain(r["mask"])) for r in rows]
    except (KeyError, TypeError, ValueError) as exc:  # a missing field, ragged or text values
        raise _invalid(
            f"each row needs 'obs' ({obs_dim or 'D'} numbers) and 'mask' ({k} booleans): {exc}"
        ) from None
    if obs.ndim != 2 or (obs_dim is not None and obs.shape[1] != obs_dim):
        raise _invalid(f"'obs' must hold {obs_dim or 'D'} numbers per row, got shape {obs.shape}")
    for i, m in enumerate(raw):  # booleans, or 0 and 1 (a string such as "false" is refused)
        ok = m.dtype == bool or (m.dtype.kind in "iu" and bool(np.isin(m, (0, 1)).all()))
        if m.shape != (k,) or not ok:
            raise _invalid(f"row {i}: 'mask' must be {k} booleans, got {m.tolist()!r:.80}")
    mask = np.stack(raw).astype(bool)
    with np.errstate(over="ignore"):  # a value beyond float32's range: infinite, refused below
        obs32 = obs.astype(np.float32)
    bad = np.flatnonzero(~np.isfinite(obs32).all(axis=1))
    if bad.size:
        raise _invalid(f"row {int(bad[0])}: 'obs' holds a NaN or infinite value (as float32)")
    none = np.flatnonzero(~mask.any(axis=1))
    if none.size:
        raise _invalid(f"row {int(none[0])}: 'mask' allows no candidate")
    return obs32, mask
