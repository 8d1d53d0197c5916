"""The alerts of the ingestion benchmarks, in one place and without project imports.

``benchmarks.serving.service`` sends them as webhooks; ``benchmarks.serving.incident_worker``
stores them as a backlog.
"""

from __future__ import annotations

from typing import Any


def ingest_alert(
    b: int,
    i: int,
    fingerprint: str,
    status: str = "firing",
    starts: str = "2026-01-01T00:00:00Z",
) -> dict[str, Any]:
    """Alert ``i`` of ingestion webhook ``b``: a GPU XID alert on one of the benchmark graph's 80
    hosts (4 clusters x 20 hosts x 8 GPUs), as Alertmanager sends it."""
    return {
        "status": status,
        "labels": {
            "alertname": "GpuXid",
            "cluster": f"c{i % 4}",
            "node": f"c{i % 4}-h{b % 20}",
            "gpu": str(i % 8),
        },
        "annotations": {"summary": "bench"},
        "startsAt": starts,
        "endsAt": "0001-01-01T00:00:00Z",
        "fingerprint": fingerprint,
    }
