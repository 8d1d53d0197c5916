"""The ``schedule`` scope holds capacity, ``read`` cannot; ``fleetmind serve`` refuses placeholder
and short tokens and half-set TLS."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from fleetmind.serving.app import create_app
from fleetmind.serving.settings import Settings, get_settings

READ = "read-token-0123456789"
SCHEDULE = "schedule-token-0123456789"
BOTH = "read-and-schedule-token-0123"


def test_read_cannot_hold_capacity_and_schedule_can(tmp_path: Path) -> None:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/s.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
        read_token=READ,
        schedule_token=SCHEDULE,
        api_token=BOTH,
    )
    read, sched, both = ({"Authorization": f"Bearer {t}"} for t in (READ, SCHEDULE, BOTH))
    with TestClient(create_app(settings)) as c:
        job = {"job_id": "j1", "num_gpu": 8, "reserve": True}
        r = c.post("/api/v1/placements", json=job, headers=read)
        assert r.status_code == 403 and "schedule" in r.json()["detail"]
        assert (
            c.post("/api/v1/placements", json={**job, "reserve": False}, headers=read).status_code
            == 200
        )
        assert c.app.state.services.reservations.gpu_items() == []  # nothing held by 'read'
        assert c.post("/api/v1/placements", json=job, headers=sched).status_code == 403  # no read
        assert c.post("/api/v1/placements", json=job, headers=both).status_code == 200
        assert c.app.state.services.reservations.gpu_items()  # held with 'read' and 'schedule'
        body = {"Pod": {"metadata": {"name": "p"}, "spec": {"containers": []}}, "NodeNames": ["n"]}
        assert c.post("/api/v1/scheduler/filter", json=body, headers=read).status_code == 403
        assert c.post("/api/v1/scheduler/filter", json=body, headers=sched).status_code == 200
        assert c.get("/api/v1/fleet", headers=sched).status_code == 403  # schedule reads nothing


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("FLEETMIND_API_TOKEN", "change-me-admin-but-long-enough"),
        ("FLEETMIND_READ_TOKEN", "Change-Me-Read"),
        ("FLEETMIND_SCHEDULE_TOKEN", "short-token"),
    ],
)
def test_serve_refuses_placeholder_and_short_tokens(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
    var: str, value: str,
) -> None:  # fmt: skip
    from fleetmind.cli import main

    monkeypatch.setenv("FLEETMIND_DATABASE_URL", f"sqlite:///{tmp_path}/x.db")
    monkeypatch.setenv(var, value)
    try:
        assert main(["serve", "--host", "0.0.0.0"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(
            "fleetmind: error: refusing to start with a placeholder or short token"
        )
        assert var in err and value not in err and err.count("\n") == 1
    finally:
        get_settings.cache_clear()


def test_serve_refuses_half_set_tls(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from fleetmind.cli import main

    monkeypatch.setenv("FLEETMIND_DATABASE_URL", f"sqlite:///{tmp_path}/x.db")
    monkeypatch.setenv("FLEETMIND_TLS_CERT", str(tmp_path / "cert.pem"))
    try:
        assert main(["serve"]) == 2
        assert "FLEETMIND_TLS_KEY" in capsys.readouterr().err
        monkeypatch.setenv("FLEETMIND_TLS_KEY", str(tmp_path / "key.pem"))
        assert main(["serve"]) == 2
        assert "no readable file" in capsys.readouterr().err
    finally:
        get_settings.cache_clear()
