"""The webhook refuses a notification only for what FleetMind reads.

Alertmanager drops a notification its receiver answers with a 4xx, without retrying
(prometheus/alertmanager ``notify/webhook/webhook.go``: ``Notify`` returns
``notify.NewErrorWithReason(..)`` whose retry is ``false`` for a 4xx, ``notify.Retrier.Check``), so
a 422 for the whole webhook loses every alert of the group notification.

* Neither Prometheus nor Alertmanager bounds how many labels an alert has: Prometheus's
  ``label_limit`` of a scrape config defaults to 0, no limit (prometheus/prometheus
  ``config/config.go``, ``ScrapeConfig.LabelLimit``), and Alertmanager's
  ``model.LabelSet.Validate`` (prometheus/common ``model/labelset.go``) checks names and values
  only. An alert of 303 labels (kube-state-metrics' ``kube_pod_labels`` of a pod with many labels)
  was refused, and with it the other alerts of its notification (``groupLabels``/
  ``commonLabels`` then held 303 labels too).
* The envelope's ``version``, ``groupKey``, ``status``, ``receiver``, ``groupLabels``,
  ``commonLabels``, ``commonAnnotations`` and ``externalURL`` are not read: a value of another
  type or length (``"version": 4`` from a hand-written sender, ``"groupLabels": null``, a
  ``receiver`` name over 256 characters, which Alertmanager allows) cost the whole notification.
* A webhook that is still refused (not JSON, no ``alerts`` list, no valid alert) says so in a
  WARNING log line, and is counted in ``fleetmind_http_request_duration_seconds_count`` with
  ``route="/api/v1/alerts"``, ``status="422"``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from serving_helpers import alert, webhook

from fleetmind.serving.app import create_app
from fleetmind.serving.settings import Settings


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    tmp: Path = tmp_path_factory.mktemp("envelope")
    settings = Settings(
        database_url=f"sqlite:///{tmp}/e.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
    )
    with TestClient(create_app(settings)) as c:
        yield c


def _many_labels(n: int) -> dict[str, str]:
    labels = {"alertname": "KubePodLabels", "cluster": "c0", "namespace": "ml", "pod": "p-0"}
    labels.update({f"label_app_kubernetes_io_k{i}": f"v{i}" for i in range(n - len(labels))})
    return labels


def test_an_alert_of_303_labels_and_an_envelope_that_repeats_them_are_stored(
    client: TestClient,
) -> None:
    labels = _many_labels(303)
    other = alert({"alertname": "GpuXidError", "cluster": "c0", "node": "c0-h1"}, fingerprint="x1")
    body = webhook(
        [alert(labels, fingerprint="many303"), other],
        groupLabels=labels,
        commonLabels=labels,
        commonAnnotations={f"a{i}": "x" for i in range(300)},
    )
    r = client.post("/api/v1/alerts", json=body)
    assert r.status_code == 200, r.text
    assert r.json()["accepted"] == 2 and r.json()["rejected_count"] == 0
    stored = [a for a in client.get("/api/v1/alerts").json() if a["fingerprint"] == "many303"]
    assert len(stored) == 1 and stored[0]["labels"] == labels


ENVELOPES: list[dict[str, Any]] = [
    {"version": 4},
    {"version": None},
    {"groupLabels": None},
    {"commonLabels": None, "commonAnnotations": None},
    {"groupLabels": {"alertname": 1}, "commonLabels": "x", "commonAnnotations": []},
    {"receiver": "r" * 300},
    {"receiver": 7, "status": "FIRING", "groupKey": {"k": 1}, "externalURL": 3},
    {"groupKey": "g" * 20000, "externalURL": "http://am/" + "x" * 20000},
]


@pytest.mark.parametrize("i", range(len(ENVELOPES)))
def test_envelope_fields_fleetmind_does_not_read_never_refuse_the_webhook(
    client: TestClient, i: int
) -> None:
    envelope, fp = ENVELOPES[i], f"envelope-{i}"
    body = webhook(
        [alert({"alertname": "HostDown", "cluster": "c0", "node": "c0-h2"}, fingerprint=fp)]
    )
    body.update(envelope)
    r = client.post("/api/v1/alerts", json=body)
    assert r.status_code == 200, r.text
    assert r.json()["accepted"] == 1


def _refused_count(c: TestClient) -> float:
    text = c.get("/metrics").text
    pattern = (
        r'^fleetmind_http_request_duration_seconds_count\{[^}]*route="/api/v1/alerts"[^}]*'
        r'status="422"[^}]*\} (\S+)$'
    )
    return sum(float(v) for v in re.findall(pattern, text, re.M))


def test_a_refused_webhook_is_logged_at_warning_and_counted(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    before = _refused_count(client)
    bad = webhook([{"labels": {"alertname": 1}}, {"status": "weird", "labels": {}}])
    with caplog.at_level(logging.WARNING, logger="fleetmind.serving"):
        r = client.post("/api/v1/alerts", json=bad)
        assert client.post("/api/v1/alerts", content=b"{not json").status_code == 422
    assert r.status_code == 422
    lines = [
        rec.getMessage()
        for rec in caplog.records
        if rec.levelno == logging.WARNING and "webhook refused" in rec.getMessage()
    ]
    assert len(lines) == 2 and all("\n" not in line for line in lines)
    assert "2 alerts lost" in lines[0] and "alerts.0.labels.alertname" in lines[0]
    assert _refused_count(client) - before == 2
