"""An alert storm with a known root for the UI, notification and feedback tests.

Host ``c0-h1`` of the committed example graph goes down (``KubeNodeNotReady``, kube-prometheus's
name, fires on it): two of its GPUs raise XID errors, the pods on it crash-loop, and the services
behind those pods see errors. A lone alert in cluster ``c1`` opens a second, unrelated incident.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from serving_helpers import alert

TRUE_ROOT = "c0/host/c0-h1"

STORM_LABELS: list[dict[str, str]] = [
    {"alertname": "KubeNodeNotReady", "cluster": "c0", "node": "c0-h1", "severity": "critical"},
    {
        "alertname": "GpuXidError",
        "cluster": "c0",
        "node": "c0-h1",
        "gpu": "1",
        "severity": "critical",
    },
    {
        "alertname": "GpuXidError",
        "cluster": "c0",
        "node": "c0-h1",
        "gpu": "3",
        "severity": "critical",
    },
    {"alertname": "PodCrashLooping", "cluster": "c0", "pod": "s0-1", "severity": "warning"},
    {"alertname": "PodCrashLooping", "cluster": "c0", "pod": "s2-1", "severity": "warning"},
    {"alertname": "ServiceErrorRate", "cluster": "c0", "service": "s0", "severity": "warning"},
    {"alertname": "ServiceErrorRate", "cluster": "c0", "service": "s2", "severity": "warning"},
]
LONE_LABELS = {"alertname": "HostDown", "cluster": "c1", "node": "c1-h2", "severity": "critical"}


def storm_alerts(start: datetime | None = None, step_s: float = 20.0) -> list[dict[str, Any]]:
    """The storm as Alertmanager v4 alerts, ``step_s`` apart from ``start`` (default: 5 min ago)."""
    t0 = start or datetime.now(UTC) - timedelta(minutes=5)
    out = [
        alert(
            lab,
            starts=(t0 + timedelta(seconds=i * step_s)).isoformat(),
            fingerprint=f"storm-{i}",
            annotations={"summary": f"{lab['alertname']} in {lab['cluster']}"},
        )
        for i, lab in enumerate(STORM_LABELS)
    ]
    out.append(
        alert(
            LONE_LABELS,
            starts=(t0 + timedelta(seconds=30)).isoformat(),
            fingerprint="lone-0",
            annotations={"summary": "HostDown in c1"},
        )
    )
    return out


@contextlib.contextmanager
def ranked_storm(settings: Any, start: datetime) -> Iterator[Any]:
    """A TestClient of the app with ``settings``, the storm from ``start`` received, grouped and
    ranked."""
    from fastapi.testclient import TestClient
    from serving_helpers import webhook

    from fleetmind.serving.app import create_app

    with TestClient(create_app(settings)) as c:
        c.post("/api/v1/alerts", json=webhook(storm_alerts(start))).raise_for_status()
        c.app.state.services.incidents.process_pending()
        c.app.state.services.incidents.rank_due()
        yield c
