"""A webhook of more than 10,000 alerts is stored whole, up to ``WEBHOOK_ALERT_CAP`` (100,000),
far above real groups and low enough that one request cannot take gigabytes of memory.

Alertmanager's ``webhook_config`` ``max_alerts`` defaults to 0, no limit
(https://prometheus.io/docs/alerting/latest/configuration/#webhook_config), and it does not retry
a 4xx (prometheus/alertmanager ``notify/util.go``, ``Retrier.Check``), so a 422 for a big group
lost every alert of it. Also: ``top_k`` of ``POST /api/v1/rca`` refuses JSON booleans, as the
placement counts do.
"""

from __future__ import annotations

import time
from pathlib import Path

from fastapi.testclient import TestClient
from serving_helpers import alert, webhook
from test_webhook_body_limit import make_settings

from fleetmind.serving.app import create_app

N = 20_000


def test_a_webhook_of_20000_alerts_is_stored_whole(tmp_path: Path) -> None:
    alerts = [
        alert(
            {"alertname": "GpuXidError", "cluster": "c9", "node": f"h{i // 8}", "gpu": str(i % 8)}
        )
        for i in range(N)
    ]
    with TestClient(create_app(make_settings(tmp_path))) as c:
        t0 = time.perf_counter()
        r = c.post("/api/v1/alerts", json=webhook(alerts))
        took = time.perf_counter() - t0
        assert r.status_code == 200, r.text[:300]
        assert r.json()["accepted"] == N and r.json()["rejected_count"] == 0
        stored = c.app.state.services.db.count_alerts()
        assert stored == N
    print(f"{N} alerts stored in {took:.2f} s")


def test_rca_top_k_refuses_a_boolean(tmp_path: Path) -> None:
    body = {"alerts": [alert({"alertname": "HostDown", "cluster": "c0", "node": "c0-h1"})]}
    with TestClient(create_app(make_settings(tmp_path))) as c:
        for top_k, code in ((True, 422), (False, 422), (2, 200), ("2", 200)):
            r = c.post("/api/v1/rca", json={**body, "top_k": top_k})
            assert r.status_code == code, (top_k, r.text[:300])
        assert "boolean" in c.post("/api/v1/rca", json={**body, "top_k": True}).text


def test_a_webhook_over_the_alert_cap_is_refused_before_it_is_built(tmp_path: Path) -> None:
    """Minimal alerts (~67 bytes each) fit 610,000 into the default byte limit: 26 s and 1.4 GB
    in one request before the cap."""
    from fleetmind.serving.settings import WEBHOOK_ALERT_CAP

    assert WEBHOOK_ALERT_CAP == 100_000
    one = alert({"alertname": "A", "cluster": "c", "node": "h"})
    with TestClient(create_app(make_settings(tmp_path))) as c:
        r = c.post("/api/v1/alerts", json=webhook([one] * (WEBHOOK_ALERT_CAP + 1)))
        assert r.status_code == 422 and "100000" in r.text, r.text[:300]
        assert c.app.state.services.db.count_alerts() == 0
