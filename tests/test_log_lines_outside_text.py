"""Log lines that quote outside text, or report a failure, say what happened and forge nothing.

* Prometheus label values (a DCGM series' ``cluster`` and ``Hostname``) and the names they give
  telemetry nodes are outside text: the exposition format allows ``\\n`` in a label value
  (prometheus/docs ``content/docs/instrumenting/exposition_formats.md``: "label_value can be any
  sequence of UTF-8 characters, but the backslash, double-quote and line feed characters have to
  be escaped as ``\\\\``, ``\\"`` and ``\\n``"), and Prometheus's ``/api/v1/query`` returns the
  line feed itself. Logged raw, one warning became three lines, one a forged ``ERROR:``; an ESC
  recoloured the terminal. They are shown as :func:`fleetmind.redact.terminal_safe` shows them.
* A post the notifier could not make names its reason (httpx keeps it in the exception's text,
  ``httpx/_transports/default.py``, ``map_httpcore_exceptions``: ``mapped_exc(message)`` from the
  httpcore error, whose text is the ``ssl`` or ``socket`` error's), not only ``ConnectError``.
* A receiver's refusal shows bidirectional and zero-width controls escaped (CVE-2021-42574).
* A lost leader lock says why it was lost; a process that takes the lock over says so with its
  pid; a recovery is an INFO line.
"""

from __future__ import annotations

import logging
import os
import socket
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from k8s_helpers import DCGM_CHART_SCRAPE, ExporterServer, Prometheus, dcgm_text, exporter_target
from k8s_helpers import prometheus_binary as _prometheus_binary
from sqlalchemy import text

from fleetmind.serving.app import create_app
from fleetmind.serving.db import Database, LeaderLock
from fleetmind.serving.failure_log import FailureLog
from fleetmind.serving.incidents.worker import GroupingLag, IncidentWorker, RankSchedule
from fleetmind.serving.notify import (
    REASON_CHARS,
    Notifier,
    answer_reason,
    delivery_outcome,
    error_outcome,
    is_final,
    post_attempt,
    post_client,
    status_of,
)
from fleetmind.serving.settings import Settings
from fleetmind.serving.telemetry import prometheus as prom_mod
from fleetmind.serving.telemetry.base import GpuState, NodeState
from fleetmind.serving.telemetry.prometheus import PrometheusApiSource, build_nodes
from fleetmind.serving.telemetry.sim import SimSource

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

FORGED_HOST = "gpu-node-1\nWARNING:  fleetmind: FORGED by a label \x1b[31mRED\u202e"
FORGED_CLUSTER = "c9\nERROR:    fleetmind: FORGED cluster line"


def _one_line(msg: str) -> None:
    """``msg`` holds no line break, escape or bidi control that a terminal would act on."""
    assert "\n" not in msg and "\r" not in msg and "\x1b" not in msg and "\u202e" not in msg, msg


# ---------------------------------------------------------------- Prometheus label values
def test_dcgm_memory_warning_shows_label_values_escaped(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: ``node c9`` / ``ERROR:    fleetmind: FORGED cluster line/gpu-node-1`` / ...:
    three lines, one of them a forged ERROR."""
    monkeypatch.setattr(prom_mod, "_WARNED_MEMORY", set(), raising=False)
    lab = {"gpu": "0", "UUID": "GPU-1", "modelName": "NVIDIA A100-SXM4-40GB",
           "Hostname": FORGED_HOST, "cluster": FORGED_CLUSTER}  # fmt: skip
    samples = [("DCGM_FI_DEV_FB_USED", lab, 100.0), ("DCGM_FI_DEV_GPU_UTIL", lab, 0.0)]
    with caplog.at_level(logging.WARNING, logger=prom_mod.__name__):
        build_nodes(samples, [], "prod")
    (msg,) = [m for m in caplog.messages if "DCGM_FI_DEV_FB_USED" in m]
    _one_line(msg)
    assert msg.startswith("node c9\\nERROR:    fleetmind: FORGED cluster line/gpu-node-1\\n")
    assert "\\x1b[31mRED\\u202e: its DCGM exporter" in msg


@pytest.fixture
def forged_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Prometheus scraping a dcgm-exporter text without ``DCGM_FI_DEV_FB_FREE`` whose
    ``Hostname`` and ``cluster`` label values hold an escaped line feed, an ESC and U+202E."""
    if _prometheus_binary() is None:
        pytest.skip("Prometheus not installed (Debian package prometheus)")
    host = FORGED_HOST.replace("\n", "\\n")  # the exposition format's escape
    cluster = FORGED_CLUSTER.replace("\n", "\\n")
    dcgm = dcgm_text("Hostname", host, [{}])
    dcgm = dcgm.replace('Hostname="', f'cluster="{cluster}",Hostname="')
    dcgm = "\n".join(ln for ln in dcgm.splitlines() if "DCGM_FI_DEV_FB_FREE" not in ln) + "\n"
    exp = ExporterServer({"/dcgm": dcgm})
    p = Prometheus(tmp_path_factory.mktemp("forged"), exp, {"dcgm": "/dcgm"},
                   scrape={"dcgm": {**DCGM_CHART_SCRAPE,
                                    "labels": exporter_target("dcgm-exporter-a1b2c")}})  # fmt: skip
    try:
        p.wait_for("DCGM_FI_DEV_FB_USED", 1)
        yield p.url
    finally:
        p.stop()
        exp.close()


@pytest.mark.external
def test_real_prometheus_label_values_forge_no_log_line(
    forged_prometheus: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The values as the real Prometheus returns them (the line feed itself) reach the warning
    escaped: one line."""
    monkeypatch.setattr(prom_mod, "_WARNED_MEMORY", set(), raising=False)
    src = PrometheusApiSource(forged_prometheus, default_cluster="prod")
    try:
        with caplog.at_level(logging.WARNING, logger=prom_mod.__name__):
            nodes = src.collect().nodes
    finally:
        src.close()
    assert any("\n" in n.name or "\n" in n.cluster for n in nodes)  # Prometheus unescaped it
    (msg,) = [m for m in caplog.messages if "DCGM_FI_DEV_FB_USED" in m]
    _one_line(msg)
    assert "FORGED cluster line" in msg and "\\n" in msg


def test_scheduler_hold_line_shows_node_cluster_and_job_escaped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``scheduler hold:`` quotes a telemetry node and cluster name and a placement's
    ``job_id`` (free text of the API's caller)."""
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/fm.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
    )
    gpus = [GpuState(i, "NVIDIA H100", free_milli=1000) for i in range(2)]
    node = NodeState(FORGED_HOST, FORGED_CLUSTER, gpus, 95500, 95500, 500000, 400000)
    with TestClient(create_app(settings)) as c:
        c.app.state.services.telemetry = SimSource([node])
        job = {"job_id": "j\nERROR:    fleetmind: FORGED job", "num_gpu": 1, "reserve": True}
        with caplog.at_level(logging.INFO, logger="fleetmind"):
            assert c.post("/api/v1/placements", json=job).status_code == 200
    (line,) = [m for m in caplog.messages if m.startswith("scheduler hold: ")]
    _one_line(line)
    assert "placement:j\\nERROR:" in line and "cluster c9\\nERROR:" in line


def test_extender_lines_show_telemetry_node_names_escaped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The warning about a node name two clusters share quotes telemetry node names."""
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/fm.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
    )
    gpus = [GpuState(0, "NVIDIA H100", free_milli=1000)]
    nodes = [NodeState(FORGED_HOST, c, gpus, 95500, 95500, 500000, 400000) for c in ("a", "b")]
    req = {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}
    pod = {"metadata": {"name": "p", "namespace": "ml", "uid": "u-p"},
           "spec": {"containers": [{"name": "m", "resources": {"requests": req}}]}}  # fmt: skip
    with TestClient(create_app(settings)) as c:
        c.app.state.services.telemetry = SimSource(nodes)
        with caplog.at_level(logging.DEBUG, logger="fleetmind"):
            c.post("/api/v1/scheduler/filter", json={"Pod": pod, "NodeNames": ["x"]})
    said = [m for m in caplog.messages if m.startswith("kube-scheduler extender: ")]
    assert any("node names are in several clusters" in m for m in said), said
    for m in said:
        _one_line(m)


# ---------------------------------------------------------------- the notifier's reasons
def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_refused_connection_names_its_reason(caplog: pytest.LogCaptureFixture) -> None:
    """Before: ``the webhook failed (ConnectError, 1 in a row)``."""
    url = f"http://127.0.0.1:{_closed_port()}/services/T000/B000/SECRET"
    n = Notifier(db=None, settings=Settings(notify_webhook_url=url))  # type: ignore[arg-type]
    try:
        with caplog.at_level(logging.WARNING, logger="fleetmind"):
            ok, outcome = n._post("webhook", url, {"text": "x"}, None)
    finally:
        n._client.close()
    assert (ok, outcome) == (False, "ConnectError: [Errno 111] Connection refused")
    (msg,) = [m for m in caplog.messages if "webhook failed" in m]
    assert "(ConnectError: [Errno 111] Connection refused, 1 in a row)" in msg
    assert "SECRET" not in msg
    # not a status: retried (never final), and the metrics label stays "failed" (not the text)
    assert status_of(outcome) is None and not is_final(outcome)


@pytest.fixture
def untrusted_https(tmp_path: Path) -> Iterator[str]:
    """An https server whose certificate a private CA signed (not in the trust store)."""
    from test_serving_tls import make_pki

    (tmp_path / "pki").mkdir()
    pki = make_pki(tmp_path / "pki")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.handle_error = lambda *a: None  # type: ignore[method-assign]  # the client hangs up
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(pki["fleetmind.crt"], pki["fleetmind.key"])
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}/api/v2/alerts"
    finally:
        server.shutdown()
        server.server_close()


def test_an_untrusted_certificate_names_its_reason(
    untrusted_https: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A certificate the trust store does not know reads apart from a refused port: install
    the CA (``SSL_CERT_FILE``), not "it is down"."""
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    client = post_client()
    try:
        ok, outcome, _, _ = post_attempt(client, untrusted_https, [])
    finally:
        client.close()
    assert not ok
    assert outcome.startswith("ConnectError: [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify")


def test_error_reason_masks_urls_escapes_and_bounds() -> None:
    url = "http://hooks.test/services/T000/B000/SECRET"
    err = httpx.ConnectError(
        f"no route to http://fleet:pw123@proxy.test:3128/ for {url} or /services/T000/B000/SECRET"
        "\u202e \x1b[31m" + "x" * 500 + "\nsecond line"
    )
    out = error_outcome(err, url)
    assert out.startswith(
        "ConnectError: no route to http://***@proxy.test:3128/ for <url> or <url>"
    )
    assert "pw123" not in out and "SECRET" not in out and "second line" not in out
    _one_line(out)
    assert "\\u202e" in out
    assert len(out) <= len("ConnectError: ") + REASON_CHARS + 5  # one escape's extra characters
    # a timeout's text adds nothing to its class name; a header's text is not quoted
    assert error_outcome(httpx.ReadTimeout("timed out"), url) == "ReadTimeout"
    bad = httpx.LocalProtocolError("Illegal header value b'Bearer s3cret'")
    assert error_outcome(bad, url) == "LocalProtocolError: an invalid header value"
    assert error_outcome(httpx.ConnectError(""), url) == "ConnectError"


def test_a_refusal_shows_bidi_and_zero_width_controls_escaped() -> None:
    """Before: U+202E and U+200B reached the log and the delivery note raw."""
    url = "http://hooks.test/x"
    why = answer_reason("inj\nFORGED \x1b[31mRED\u2028\u202eRLO \u200bhidden", url)
    assert why == "inj FORGED ?[31mRED \\u202eRLO \\u200bhidden"

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(500, text="down \u2066\u202eevil\u2069", request=request)

    client = post_client(httpx.MockTransport(handler))
    try:
        _, outcome, _, _ = post_attempt(client, url, {}, with_reason=True)
    finally:
        client.close()
    assert outcome == "500 down \\u2066\\u202eevil\\u2069"


# ---------------------------------------------------------------- the leader lock
class _Host:
    def __init__(self) -> None:
        self.took = 0

    def take_over(self) -> None:
        self.took += 1


def _worker(lock: Any) -> IncidentWorker:
    return IncidentWorker(_Host(), lock, RankSchedule(1.0), GroupingLag(None, None))  # type: ignore[arg-type]


def _takeovers(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [m for m in caplog.messages if "took the leader lock" in m]


def test_a_take_over_is_logged_with_the_pid_but_not_a_first_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Two workers on one SQLite file (``flock``): the first takes the lock at its start
    (nothing logged: every single replica's start would say it); the second, waiting, takes it
    over when the first lets it go, and says so."""
    db = Database(f"sqlite:///{tmp_path}/fm.db")
    first, second = _worker(LeaderLock(db)), _worker(LeaderLock(Database(db.url)))
    with caplog.at_level(logging.INFO, logger="fleetmind"):
        assert first._lead() and not second._lead()
        assert _takeovers(caplog) == []
        first.leader.release()
        assert second._lead()
    (line,) = _takeovers(caplog)
    assert f"pid {os.getpid()}" in line and "took the leader lock over" in line
    assert line.startswith("incident worker: ")
    # the second loses it, the first holds it meanwhile, then lets it go: the second takes it
    # over from another process, not "back" (its count of lost locks is not reset)
    caplog.clear()
    second.leader.lost += 1  # as check() does when the lock's session is gone
    second.leader.release()
    with caplog.at_level(logging.INFO, logger="fleetmind"):
        assert first._lead() and not second._lead()
        first.leader.release()
        assert second._lead()
    lines = _takeovers(caplog)
    assert len(lines) == 2 and all("took the leader lock over" in m for m in lines), lines
    second.leader.release()


def test_a_reason_stays_bounded_as_shown() -> None:
    """Escaping after the cut let 200 characters of zero-width spaces or tag characters become a
    1,200 or 2,000 character log line and delivery note."""
    url = "http://hooks.test/x"
    for ch in ("\u200b", "\U000e0041", "\u202e"):
        why = answer_reason("no_service " + ch * 400, url)
        assert why.startswith("no_service \\") and len(why) <= REASON_CHARS, (ch, len(why))
        assert why.endswith(ascii(ch)[1:-1]), why[-12:]  # cut between escapes, not inside one


def test_only_channel_outcomes_are_read_from_the_delivery() -> None:
    """A text-valued key that is not a channel (one a newer release adds) is no failing channel
    on the incident page; the kept causes' list is skipped (it made the page a 500)."""
    row = {
        "state": "firing",
        "delivery": {"alertmanager": "sent", "suppressed_by": "silence-1", "kept": [{"x": 1}]},
    }
    assert delivery_outcome(row) == (True, None, None)
    row["delivery"] = {"alertmanager": "500", "webhook": "dropped: 404 no_service"}
    assert delivery_outcome(row) == (
        False,
        "Alertmanager: 500",
        "the webhook refused it: 404 no_service",
    )


def test_a_lost_lead_forgets_the_notifiers_failures(caplog: pytest.LogCaptureFixture) -> None:
    """A process whose notifier failed, then lost the lock, logged "reachable again after 21604
    s" when it led again hours later: its run of failures ends when it stops running the loop."""
    from sqlalchemy.exc import OperationalError

    now = [0.0]
    flog = FailureLog(logging.getLogger("fleetmind.test"), "notifier", clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="fleetmind"):
        flog.failed(OperationalError("SELECT 1", {}, Exception("connection refused")))
        flog.forget()
        now[0] = 21604.0
        flog.succeeded()
    assert not [m for m in caplog.messages if "reachable again" in m]


def test_a_lock_lost_to_a_dead_connection_says_so(
    pg: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """On PostgreSQL: the lock's session ended (what a database restart does) reads as a failed
    connection, not as "another replica may group"; taking it again reads "back". The lock's
    session unlocking (the database says it is gone) reads as such."""
    db = Database(pg.url)
    worker = _worker(LeaderLock(db, lease_s=10.0))
    with caplog.at_level(logging.INFO, logger="fleetmind"):
        assert worker._lead()
        with db.engine.connect() as other:
            other.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' "
                    "AND objid = :k"
                ),
                {"k": LeaderLock.PG_KEY},
            )
            other.commit()
        assert not worker._confirm()
    (lost,) = [m for m in caplog.messages if "lost the leader lock" in m]
    assert f"pid {os.getpid()}" in lost and "its database connection failed" in lost
    assert "another replica may group" not in lost
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="fleetmind"):
        assert worker._lead()
        assert worker.leader._conn is not None
        worker.leader._conn.execute(text("SELECT pg_advisory_unlock_all()"))
        assert not worker._confirm()
    (back,) = _takeovers(caplog)
    assert "took the leader lock back" in back
    (lost,) = [m for m in caplog.messages if "lost the leader lock" in m]
    assert "no longer holds it" in lost and "connection failed" not in lost
    db.engine.dispose()


def test_a_recovery_is_an_info_line(caplog: pytest.LogCaptureFixture) -> None:
    """As ``refreshing works again`` and ``answers again`` are: a WARNING-based alert does not
    fire on the recovery."""
    from sqlalchemy.exc import OperationalError

    flog = FailureLog(logging.getLogger("fleetmind.test"), "incident worker")
    with caplog.at_level(logging.INFO, logger="fleetmind"):
        flog.failed(OperationalError("SELECT 1", {}, Exception("connection refused")))
        flog.succeeded()
    (rec,) = [r for r in caplog.records if "reachable again" in r.getMessage()]
    assert rec.levelno == logging.INFO
