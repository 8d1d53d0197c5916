"""``fleetmind serve`` on a port another program holds: one line, exit status 2, before the
database is touched (it migrated the database, then uvicorn logged ``[Errno 98]`` and exited 3)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from fleetmind.cli import main
from fleetmind.serving.settings import get_settings


def test_a_taken_port_is_one_line_before_migrations(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import uvicorn

    def no_server(*args: object, **kw: object) -> None:
        raise AssertionError("uvicorn started on a taken port")

    monkeypatch.setattr(uvicorn, "run", no_server)
    for var in ("API", "READ", "INGEST", "SCHEDULE", "ADMIN"):
        monkeypatch.delenv(f"FLEETMIND_{var}_TOKEN", raising=False)
    db = tmp_path / "serve.db"
    monkeypatch.setenv("FLEETMIND_DATABASE_URL", f"sqlite:///{db}")
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        try:
            assert main(["serve", "--port", str(port)]) == 2
        finally:
            get_settings.cache_clear()
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert err == [
        f"fleetmind: error: port {port} on 127.0.0.1 is in use (pick another with --port)"
    ]
    assert not db.exists()  # refused before the migrations
    from fleetmind.cli.serve import bind_error

    assert bind_error("127.0.0.1", port) is None  # free again once the holder closed
