"""``fleetmind data fetch`` against a real socket server that trickles its answer: httpx's read
timeout starts again at each byte, so a server sending its status line and headers a byte at a
time held the fetch as long as it liked (225 header bytes at 0.2 s each: 45 s with
``timeout_s=1``). Now the headers must arrive within ``timeout_s`` in all, and the error names
the URL (credentials masked) and ``--timeout``."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from fetch_helpers import toy_manifest

from fleetmind.cli import main
from fleetmind.data.errors import ConfigError, NotAvailableError
from fleetmind.data.fetch import MAX_TIMEOUT_S, fetch_dataset

BODY = b"sn,cpu_milli\n1,2\n"
MANIFEST = toy_manifest("openb", {"a.csv": BODY})
HEAD = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nX-Pad: %s\r\n\r\n" % (len(BODY), b"a" * 64)
"""The status line and headers of every answer (112 bytes)."""


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    for var in ("ALL_PROXY", "HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY"):
        monkeypatch.delenv(var, raising=False)
        monkeypatch.delenv(var.lower(), raising=False)


@contextmanager
def _server(pause_s: float, delay_s: float = 0.0) -> Iterator[str]:
    """An HTTP/1.1 server on a free local port that answers every request with ``HEAD`` and
    ``BODY``, one byte every ``pause_s`` seconds (0: all at once, ``delay_s`` seconds after the
    request); yields its base URL."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    srv.settimeout(0.1)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            with conn:
                conn.recv(4096)
                data = HEAD + BODY
                try:
                    if pause_s == 0 and not stop.wait(delay_s):
                        conn.sendall(data)
                    for i in range(len(data) if pause_s else 0):
                        if stop.wait(pause_s):
                            break
                        conn.sendall(data[i : i + 1])
                except OSError:
                    pass  # the client gave up

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{srv.getsockname()[1]}/"
    finally:
        stop.set()
        thread.join(5)
        srv.close()


def test_trickled_headers_stop_at_the_timeout(tmp_path: Path) -> None:
    """The 112 header bytes (``HEAD``) at 0.1 s each (11.2 s) with ``timeout_s=0.5``: a one-line
    error within about 0.5 s naming the URL without its password and ``--timeout``; no file, no
    folder left."""
    assert len(HEAD) == 112
    with _server(0.1) as url:
        start = time.monotonic()
        with pytest.raises(NotAvailableError) as info:
            fetch_dataset(
                "openb", tmp_path / "d", base_url=url.replace("//", "//u:s3cr3t@"),
                manifest=MANIFEST, timeout_s=0.5,
            )  # fmt: skip
        took = time.monotonic() - start
    msg = str(info.value)
    assert took < 3.0, took
    assert "\n" not in msg and "s3cr3t" not in msg
    assert "127.0.0.1" in msg and "--timeout" in msg and "headers" in msg
    assert not (tmp_path / "d").exists()


def test_a_prompt_server_still_works_through_the_watched_connection(tmp_path: Path) -> None:
    """The deadline is on the real network backend: a server's file arrives and is kept, and a
    second file on the same client is not cut by the first one's deadline. Each answer comes 2 s
    after its request, within its 3 s allowance (``timeout_s``), but the second one ends 4 s after
    the first request: a deadline carried over from the first file would cut it."""
    two = toy_manifest("openb", {"a.csv": BODY, "sub/a.csv": BODY})
    with _server(0, delay_s=2.0) as url:
        start = time.monotonic()
        report = fetch_dataset("openb", tmp_path / "d", base_url=url, manifest=two, timeout_s=3)
        took = time.monotonic() - start
    assert took > 3.0, took  # the second file ended past the first one's deadline
    assert sorted(report.downloaded) == ["a.csv", "sub/a.csv"]
    assert (tmp_path / "d" / "openb" / "a.csv").read_bytes() == BODY


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "1e10", "1e300", "10000000.5"])
def test_a_bad_timeout_is_one_line(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``--timeout`` must be above 0 and at most 10,000,000 s (NaN or inf would mean no deadline
    at all; 1e10 is past what ``socket.settimeout`` accepts: ``OverflowError``)."""
    code = main(["data", "fetch", "openb", "--dest", "/nonexistent/x", "--timeout", value])
    err = capsys.readouterr().err
    assert code == 2 or code == 1
    assert "--timeout" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("value", [1e10, 1e300, float("nan")])
def test_fetch_dataset_refuses_an_out_of_range_timeout(value: float, tmp_path: Path) -> None:
    """The library call checks the same range as the CLI: a :class:`ConfigError` naming
    ``--timeout`` before any connection (``socket.settimeout(1e10)`` raised ``OverflowError``)."""
    with _server(0) as url, pytest.raises(ConfigError, match="--timeout") as info:
        fetch_dataset("openb", tmp_path / "d", base_url=url, manifest=MANIFEST, timeout_s=value)
    assert "at most 10,000,000" in str(info.value)
    assert not (tmp_path / "d").exists()


def test_the_largest_timeout_still_fetches(tmp_path: Path) -> None:
    """``MAX_TIMEOUT_S`` itself is accepted by the socket layer: the file arrives."""
    with _server(0) as url:
        report = fetch_dataset(
            "openb", tmp_path / "d", base_url=url, manifest=MANIFEST, timeout_s=MAX_TIMEOUT_S
        )
    assert report.downloaded == ["a.csv"]
