"""Test helpers for ``fleetmind replay``: the service it replays storms into, in process."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fastapi.testclient import TestClient


class FakeClock:
    """Monotonic seconds that advance only when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(seconds, 0.0)


@contextmanager
def replay_service(tmp_path: Path) -> Iterator[TestClient]:
    """The service on its embedded defaults (graph and released GAT), without tokens, its
    database ``replay.db`` under ``tmp_path`` and no background incident worker."""
    from fleetmind.serving.app import create_app
    from fleetmind.serving.settings import Settings

    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/replay.db", incident_worker=False, api_token=None
    )
    with TestClient(create_app(settings)) as c:
        yield c
