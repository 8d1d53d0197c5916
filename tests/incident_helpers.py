"""Test helpers for ``fleetmind.serving.incidents``: a settable clock, the heuristic model
registry, Alertmanager timestamps and one webhook delivery followed by grouping."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fleetmind.serving.incidents import IncidentManager
from fleetmind.serving.registry import ModelRegistry
from fleetmind.serving.routers.alerts import alert_row
from fleetmind.serving.schemas import AlertIn


def iso(ts: float) -> str:
    """``ts`` (unix seconds) as Alertmanager writes a time (RFC 3339, UTC, ``Z``)."""
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


def load_registry() -> ModelRegistry:
    """The upstream-coverage baseline and the built-in best-fit heuristic, loaded."""
    reg = ModelRegistry("baseline:upstream-coverage", "heuristic:builtin-bestfit")
    reg.load()
    return reg


class Clock:
    """A manager clock the test sets: ``t`` is the current time, unix seconds."""

    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def deliver(m: IncidentManager, clock: Clock, at: float, *alerts: dict[str, Any]) -> None:
    """One webhook received at ``at`` (unix s), then grouping, both on the clock ``at``."""
    clock.t = at
    m.db.store_alerts([alert_row(AlertIn.model_validate(a), at) for a in alerts])
    m.process_pending()
