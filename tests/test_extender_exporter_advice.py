"""The extender's 503 for a fleet without GPU telemetry gives advice that works in both modes of
the ``prometheus`` source: ``fleetmind doctor --prometheus URL`` refuses an exporter's ``/metrics``
URL (it queries ``/api/v1/query``), so a single exporter is checked by reading its text, where
dcgm-exporter's default counters CSV (``etc/default-counters.csv`` in NVIDIA/dcgm-exporter) puts
``DCGM_FI_DEV_FB_USED``."""

from __future__ import annotations

import pytest

from fleetmind.data.errors import NotAvailableError
from fleetmind.serving.scheduler.extender import NodeIndex, _require_gpu_telemetry
from fleetmind.serving.telemetry.base import FleetSnapshot, NodeState


def test_no_gpu_advice_names_both_prometheus_modes() -> None:
    snap = FleetSnapshot("prometheus", [NodeState(name="cpu-1", cluster="local")], 0.0)
    index = NodeIndex()
    known = index.lookup(snap, ["cpu-1"])
    with pytest.raises(NotAvailableError) as err:
        _require_gpu_telemetry(snap, ["cpu-1"], known, index)
    msg = str(err.value)
    assert "fleetmind doctor --prometheus URL" in msg and "Prometheus server" in msg
    assert "/metrics URL, `curl URL` and look for DCGM_FI_DEV_FB_USED" in msg
