"""A registry stand-in for the champion rule's tests (:func:`fleetmind.training.tracking.promote_if_better`)."""

from __future__ import annotations

from types import SimpleNamespace

from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE

from fleetmind.training.tracking import CHAMPION


class FakeRegistry:
    """The three MlflowClient calls the rule makes, on one registered model, in memory."""

    def __init__(self) -> None:
        self.tags: dict[str, dict[str, str]] = {}
        self.alias: str | None = None

    def set_model_version_tag(self, name: str, version: str, key: str, value: str) -> None:
        self.tags.setdefault(version, {})[key] = value

    def get_model_version_by_alias(self, name: str, alias: str) -> SimpleNamespace:
        if self.alias is None:  # as MLflow's SQL store answers an alias no version holds
            raise MlflowException("no alias", error_code=INVALID_PARAMETER_VALUE)
        return SimpleNamespace(version=self.alias, tags=self.tags.get(self.alias, {}))

    def set_registered_model_alias(self, name: str, alias: str, version: str) -> None:
        assert alias == CHAMPION
        self.alias = version
