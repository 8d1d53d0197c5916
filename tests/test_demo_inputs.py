"""``fleetmind demo`` refuses, before its first step, what would only fail (or mislead) later: a
port another service holds, too few incidents for a test split, an MLflow store it cannot use;
and it never takes another service's ``/readyz`` for its own."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from fleetmind.cli import demo as demo_mod
from fleetmind.cli import main
from fleetmind.data.errors import NotAvailableError


@pytest.fixture
def no_steps(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Step 1 fails the test if it runs; MLflow writes into the test's folder."""

    def step_one(cfg: object) -> None:
        raise AssertionError("the demo started its steps")

    monkeypatch.setattr(demo_mod, "generate_data", step_one)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")


def _refused(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    err = [ln for ln in captured.err.splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].startswith("fleetmind: error: "), err
    assert captured.out == "", captured.out  # no step started
    return err[0]


def test_a_taken_port_is_refused_first(
    no_steps: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The demo's own service failed (address in use) while the demo posted its storm into the
    service that held the port and reported that service's incident, exit status 0."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        assert main(["demo", "--port", str(port), "--out", str(tmp_path / "d")]) == 2
    assert f"port {port} is in use" in _refused(capsys)


def test_too_few_incidents_for_a_test_split_are_refused(
    no_steps: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--incidents 3`` passed and failed at step 2 with 'has no split test'."""
    for n in ("3", "0", "-5"):
        assert main(["demo", "--incidents", n, "--out", str(tmp_path / "d")]) == 2
        err = _refused(capsys)
        assert f"--incidents must lie in [{demo_mod.MIN_INCIDENTS}," in err and n in err, err


def test_min_incidents_is_the_fewest_with_a_test_split(tmp_path: Path) -> None:
    from fleetmind.data.rca_gen.alerts import AlertSimConfig
    from fleetmind.data.rca_gen.generate import DatasetSpec, generate_dataset
    from fleetmind.data.rca_gen.graphs import GraphGenConfig

    def counts(n: int) -> dict[str, int]:
        spec = DatasetSpec(
            n_incidents=n,
            seed=7,
            sim=AlertSimConfig(),
            graphs=GraphGenConfig(max_clusters=2),
            large_fraction=0.0,
            workers=1,
        )
        return generate_dataset(tmp_path / str(n), spec)["counts"]

    assert counts(demo_mod.MIN_INCIDENTS).get("test", 0) >= 1
    assert counts(demo_mod.MIN_INCIDENTS - 1).get("test", 0) == 0


def test_an_unusable_store_names_no_flag_the_demo_lacks(
    no_steps: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """The message told the user to pass --tracking-uri, which ``fleetmind demo`` does not have."""
    bad = tmp_path / "not-a-db.db"
    bad.write_text("this is not an SQLite database\n" * 10)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{bad}")
    assert main(["demo", "--out", str(tmp_path / "d")]) == 2
    err = _refused(capsys)
    assert "cannot be used" in err and "set MLFLOW_TRACKING_URI;" in err, err
    assert "--tracking-uri" not in err


@pytest.fixture
def readyz_server() -> Iterator[tuple[str, list[dict]]]:
    """An HTTP server answering ``/readyz`` with the last body of the returned list."""
    bodies: list[dict] = [{}]

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            data = json.dumps(bodies[-1]).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", bodies
    finally:
        server.shutdown()
        server.server_close()


class _Proc:
    def __init__(self, code: int | None) -> None:
        self.returncode = code

    def poll(self) -> int | None:
        return self.returncode


def _service(url: str, code: int | None, tmp_path: Path) -> demo_mod._Service:
    """A :class:`_Service` whose child process is ``_Proc(code)`` (no process is started)."""
    svc = object.__new__(demo_mod._Service)
    svc.url, svc.port, svc.graph = url, int(url.rsplit(":", 1)[1]), "test-g000"
    svc.proc, svc.log_path = _Proc(code), tmp_path / "service.log"  # type: ignore[assignment]
    return svc


def test_wait_ready_takes_only_its_own_service(
    readyz_server: tuple[str, list[dict]], tmp_path: Path
) -> None:
    """A 200 from /readyz of whatever answered on the port was taken as the demo's service."""
    url, bodies = readyz_server
    bodies.append({"status": "ready", "graph": "someone-elses-graph"})
    with pytest.raises(NotAvailableError, match="another service answers on port"):
        _service(url, None, tmp_path).wait_ready(timeout_s=10)
    with pytest.raises(NotAvailableError, match="exited with status 2"):
        _service(url, 2, tmp_path).wait_ready(timeout_s=10)  # the demo's own serve failed
    bodies.append({"status": "ready", "graph": "test-g000"})
    _service(url, None, tmp_path).wait_ready(timeout_s=10)  # its own graph, its process alive
