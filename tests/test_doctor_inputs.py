"""``fleetmind doctor`` on a URL httpx cannot use and on a Prometheus answering non-finite counts:
one line, exit status 2, no traceback."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from fleetmind.cli import main
from fleetmind.data.errors import NotAvailableError
from fleetmind.serving.telemetry.doctor import diagnose


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].startswith("fleetmind: error: "), err
    return err[0]


@pytest.mark.parametrize("url", ["http://[::1", "http://127.0.0.1:99999", "http://"])
def test_a_url_httpx_cannot_use_is_one_line(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``http://[::1`` made urlsplit raise ValueError outside any handler: a traceback."""
    assert main(["doctor", "--prometheus", url]) == 2
    assert "--prometheus" in _one_line(capsys)


@pytest.fixture(params=["NaN", "+Inf", "-1"])
def fake_prometheus(request: pytest.FixtureRequest) -> Iterator[str]:
    """Answers every query with a one-sample vector of value ``request.param``."""
    body = json.dumps({
        "status": "success",
        "data": {"resultType": "vector",
                 "result": [{"metric": {"__name__": "DCGM_FI_DEV_FB_USED"},
                             "value": [1.0, request.param]}]},
    }).encode()  # fmt: skip

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_non_finite_counts_are_unusable_not_a_traceback(
    fake_prometheus: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A NaN count raised ValueError 'cannot convert float NaN to integer'."""
    with pytest.raises(NotAvailableError, match="not a count"):
        diagnose(fake_prometheus, timeout_s=5)
    assert main(["doctor", "--prometheus", fake_prometheus, "--timeout", "5"]) == 2
    assert "not a count" in _one_line(capsys)
