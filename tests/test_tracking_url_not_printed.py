"""A tracking URI's password is not printed by MLflow at the end of a training run.

When a run on a tracking server ends (``MlflowClient.set_terminated``), MLflow writes
``View run <name> at: <tracking URI>/#/experiments/<id>/runs/<id>`` to stdout
(``TrackingServiceClient._log_url`` in ``mlflow/tracking/_tracking_service/client.py``), the
URI's ``user:password@`` included, unless ``MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT`` is true
(``mlflow/environment_variables.py``). ``fleetmind rca train`` and ``fleetmind sched train``
printed ``http://alice:s3cretPW@...``; :func:`fleetmind.training.tracking.ready_store`, which
both call first, now sets that variable for a URI with credentials.

The server is a tiny local HTTP server answering the two requests ``set_terminated`` makes.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from fleetmind.errors import ConfigError
from fleetmind.training.tracking import hide_url_credentials, ready_store

PORT = 18262
SUPPRESS = "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"
RUN = {
    "run": {
        "info": {
            "run_id": "r1",
            "run_uuid": "r1",
            "run_name": "rca__gat__0",
            "experiment_id": "1",
            "status": "FINISHED",
            "lifecycle_stage": "active",
        },
        "data": {},
    }
}


class _Handler(BaseHTTPRequestHandler):
    def _answer(self, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self._answer(RUN if "/runs/get" in self.path else {})

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._answer({})

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", PORT), _Handler)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://alice:s3cretPW@127.0.0.1:{PORT}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def _end_run(uri: str) -> None:
    import mlflow

    mlflow.MlflowClient(tracking_uri=uri).set_terminated("r1")


def test_mlflow_prints_the_password_unless_suppressed(
    server: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.setenv(SUPPRESS, "false")  # so that monkeypatch restores it afterwards
    monkeypatch.delenv(SUPPRESS)
    _end_run(server)  # MLflow's own behaviour, which the fix turns off
    assert "s3cretPW" in capsys.readouterr().out
    hide_url_credentials(server)
    _end_run(server)
    assert "s3cretPW" not in capsys.readouterr().out


def test_only_a_uri_with_credentials_suppresses(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    monkeypatch.setenv(SUPPRESS, "false")  # so that monkeypatch restores it afterwards
    monkeypatch.delenv(SUPPRESS)
    for uri in ("http://127.0.0.1:5000", "sqlite:///mlflow.db", "databricks"):
        hide_url_credentials(uri)
        assert SUPPRESS not in os.environ, uri
    hide_url_credentials("https://bob:pw@mlflow.example:443/")
    assert os.environ[SUPPRESS] == "true"


def test_ready_store_suppresses_before_it_talks_to_the_store(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Both training commands call ``ready_store`` first; a closed port fails it at once (no
    retries), after the variable is set."""
    import os

    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.setenv(SUPPRESS, "false")  # so that monkeypatch restores it afterwards
    monkeypatch.delenv(SUPPRESS)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    with pytest.raises(ConfigError) as info:
        ready_store("http://carol:topsecretPW@127.0.0.1:18263")
    assert os.environ.get(SUPPRESS) == "true"
    assert "topsecretPW" not in str(info.value)
