"""The Alertmanager webhook's own body limit (``FLEETMIND_MAX_WEBHOOK_BYTES``) and what a refused
body leaves behind (a counter, a log line).

Alertmanager drops a webhook answered with a 4xx without retrying it (prometheus/alertmanager
``notify/util.go``, ``Retrier.Check``: only 5xx is recoverable), so a limit a full webhook does not
fit loses alerts for good: with ``max_alerts: 10000`` and the former 16 MiB limit a storm of 10,000
GpuXidError alerts (about 1,810 bytes each) got 413 on every flush after the first.
"""

from __future__ import annotations

import json
import logging
import urllib.parse
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient
from serving_helpers import alert, serving_settings, webhook

from fleetmind.data.paths import REPO_ROOT
from fleetmind.serving.app import create_app
from fleetmind.serving.settings import WEBHOOK_ALERT_BYTES, WEBHOOK_MAX_ALERTS, Settings

make_settings = serving_settings
"""Settings of a test service on a SQLite file in ``tmp_path``, no incident worker (other test
files import it from here)."""


def go_json(doc: object) -> bytes:
    """``doc`` as Alertmanager's Go ``encoding/json`` encoder writes it: ``&``, ``<`` and ``>``
    escaped as ``\\u0026``, ``\\u003c``, ``\\u003e`` (``Encoder.SetEscapeHTML`` defaults to true,
    and notify/webhook/webhook.go encodes the message with ``json.NewEncoder``)."""
    text = json.dumps(doc, separators=(",", ":"))
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e").encode()


def gpu_xid_storm(n: int) -> list[dict]:
    """``n`` GpuXidError alerts as Alertmanager sends them for the project's own rule
    (deploy/fleetmind-rules.yml), with the labels dcgm-exporter and deploy/prometheus.yml give."""
    rules = yaml.safe_load((REPO_ROOT / "deploy" / "fleetmind-rules.yml").read_text())
    (expr,) = [
        r["expr"] for g in rules["groups"] for r in g["rules"] if r.get("alert") == "GpuXidError"
    ]
    # Prometheus util/strutil.TableLinkForExpression: "/graph?g0.expr=" + url.QueryEscape(expr)
    # + "&g0.tab=1" (QueryEscape keeps the same characters as quote_plus)
    url = "http://prometheus-k8s-0:9090/graph?g0.expr=" + urllib.parse.quote_plus(expr)
    url += "&g0.tab=1"
    out = []
    for i in range(n):
        h, g = divmod(i, 8)
        node = f"c9-h{h}"
        labels = {
            "alertname": "GpuXidError", "severity": "critical", "cluster": "c9", "node": node,
            "gpu": str(g), "UUID": f"GPU-{i:08x}-1234-5678-9abc-def012345678",
            "device": f"nvidia{g}", "modelName": "NVIDIA H100 80GB HBM3", "Hostname": node,
            "pci_bus_id": f"00000000:{g:02X}:00.0", "DCGM_FI_DRIVER_VERSION": "550.54.15",
            "xid": "79", "instance": f"10.0.{h // 250}.{h % 250}:9400", "job": "dcgm-exporter",
            "namespace": "gpu-operator", "pod": f"nvidia-dcgm-exporter-{h:05d}",
            "container": "nvidia-dcgm-exporter", "endpoint": "gpu-metrics",
            "service": "nvidia-dcgm-exporter", "prometheus": "monitoring/k8s",
        }  # fmt: skip
        ann = {"summary": f"GPU {g} on {node} reported hardware XID 79"}
        out.append(alert(labels, fingerprint=f"{i:016x}", annotations=ann, generatorURL=url))
    return out


def test_a_full_webhook_of_the_project_s_own_gpu_alerts_is_stored(tmp_path: Path) -> None:
    """10,000 GpuXidError alerts (``max_alerts`` in deploy/alertmanager.yml) fit the default
    webhook limit; each is well within the per-alert budget the default is made of."""
    body = go_json(webhook(gpu_xid_storm(WEBHOOK_MAX_ALERTS)))
    per_alert = len(body) / WEBHOOK_MAX_ALERTS
    assert 1700 < per_alert < WEBHOOK_ALERT_BYTES / 1.6  # ~2,290 bytes: the budget has 1.8x margin
    assert len(body) > Settings.model_fields["max_body_bytes"].default  # over the 16 MiB
    with TestClient(create_app(make_settings(tmp_path))) as c:
        headers = {"content-type": "application/json"}
        r = c.post("/api/v1/alerts", content=body, headers=headers)
        assert r.status_code == 200, r.text[:300]
        assert r.json()["accepted"] == WEBHOOK_MAX_ALERTS


def _too_large(metrics: str) -> dict[str, float]:
    """``fleetmind_http_bodies_too_large_total`` by ``route`` from a ``/metrics`` text."""
    out = {}
    for line in metrics.splitlines():
        if line.startswith("fleetmind_http_bodies_too_large_total{"):
            route = line.split('route="', 1)[1].split('"', 1)[0]
            out[route] = float(line.rsplit(" ", 1)[1])
    return out


def test_a_refused_webhook_is_counted_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The webhook has its own limit (other routes keep FLEETMIND_MAX_BODY_BYTES); a webhook over
    it gets 413, counted by route from 0 and logged once with its size."""
    settings = make_settings(tmp_path, max_body_bytes=2048, max_webhook_bytes=8192)
    pad = {"summary": "s" * 2500}
    with TestClient(create_app(settings)) as c:
        assert _too_large(c.get("/metrics").text) == {"/api/v1/alerts": 0.0, "other": 0.0}
        fits = webhook([alert({"alertname": "a"}, annotations=pad)])
        assert 2048 < len(json.dumps(fits)) < 8192
        assert c.post("/api/v1/alerts", json=fits).status_code == 200
        r = c.post("/api/v1/rca", json={"alerts": [alert({"alertname": "a"}, annotations=pad)]})
        assert r.status_code == 413 and "2048" in r.json()["detail"]
        big = webhook([alert({"alertname": "b"}, annotations={"summary": "s" * 9000})])
        raw = json.dumps(big).encode()
        with caplog.at_level(logging.WARNING, logger="fleetmind.serving"):
            r = c.post("/api/v1/alerts", content=raw, headers={"content-type": "application/json"})
        assert r.status_code == 413 and "8192" in r.json()["detail"]
        (record,) = [x for x in caplog.records if "413 for POST '/api/v1/alerts'" in x.getMessage()]
        assert f"{len(raw)} bytes" in record.getMessage() and "max_alerts" in record.getMessage()

        def chunks():  # no content-length: the webhook's limit applies while streaming
            yield b'{"alerts": [], "pad": "'
            yield b"z" * 9000
            yield b'"}'

        r = c.post("/api/v1/alerts", content=chunks(), headers={"content-type": "application/json"})
        assert r.status_code == 413
        assert _too_large(c.get("/metrics").text) == {"/api/v1/alerts": 2.0, "other": 1.0}


def test_the_webhook_with_a_trailing_slash_keeps_its_limit_and_label(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Alertmanager configured with ``url: .../api/v1/alerts/`` follows FastAPI's 307 to the
    route (Go's net/http client follows 307 and 308 with the body, ``Client.Do``), so the
    delivery looks healthy: the slash form gets the webhook's limit and its counter label. A
    path decoded with a newline (``%0a``) is logged quoted, never as a second log line."""
    settings = make_settings(tmp_path, max_body_bytes=2048, max_webhook_bytes=8192)
    pad = {"summary": "s" * 2500}
    with TestClient(create_app(settings), follow_redirects=True) as c:
        fits = webhook([alert({"alertname": "a"}, annotations=pad)])
        assert c.post("/api/v1/alerts/", json=fits).status_code == 200
        big = webhook([alert({"alertname": "b"}, annotations={"summary": "s" * 9000})])
        r = c.post("/api/v1/alerts/", json=big)
        assert r.status_code == 413 and "8192" in r.json()["detail"]
        assert _too_large(c.get("/metrics").text) == {"/api/v1/alerts": 1.0, "other": 0.0}
        with caplog.at_level(logging.WARNING, logger="fleetmind.serving"):
            r = c.post("/api/v1/x%0aWARNING:%20forged", content=b"z" * 4096)
        assert r.status_code == 413
    (record,) = [x for x in caplog.records if "forged" in x.getMessage()]
    assert "\n" not in record.getMessage() and "\\n" in record.getMessage()


def test_the_webhook_never_gets_less_than_the_global_limit(tmp_path: Path) -> None:
    """A deployment that raised FLEETMIND_MAX_BODY_BYTES for big webhooks keeps that limit."""
    settings = make_settings(tmp_path, max_body_bytes=16384, max_webhook_bytes=2048)
    body = webhook([alert({"alertname": "a"}, annotations={"summary": "s" * 8000})])
    with TestClient(create_app(settings)) as c:
        assert c.post("/api/v1/alerts", json=body).status_code == 200
