"""Cluster health while nodes are drained for maintenance: cordoned and not-Ready nodes count in no
signal, so a rolling driver upgrade does not push a cluster below ``FLEETMIND_HEALTH_MIN``.

The fixtures follow the GPU Operator's driver upgrade (``k8s-driver-manager``, NVIDIA/gpu-operator
``docs`` "GPU Driver Upgrades"): the node is cordoned and drained, the operands on it (the device
plugin, dcgm-exporter) are evicted, so its DCGM series go stale while kube-state-metrics still
reports ``nvidia.com/gpu`` capacity 8 (allocatable 0) and ``kube_node_spec_unschedulable`` 1.
"""

from __future__ import annotations

import os

import pytest
from test_fleet_health_k8s import dcgm, ksm_node, ksm_status

from fleetmind.serving.health import HealthModel, fleet_health, snapshot_signals
from fleetmind.serving.telemetry.base import FleetSnapshot, NodeState
from fleetmind.serving.telemetry.prometheus import Sample, build_nodes

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

FB_TOTAL = 81559.0  # MiB, the fixtures' H100 (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE)
FLOOR = 0.2  # FLEETMIND_HEALTH_MIN's default


def _busy(samples: list[Sample], util: float, used_mib: float) -> list[Sample]:
    """``samples`` with every GPU at ``util`` % and ``used_mib`` framebuffer used."""
    value = {"DCGM_FI_DEV_GPU_UTIL": util, "DCGM_FI_DEV_FB_USED": used_mib,
             "DCGM_FI_DEV_FB_FREE": FB_TOTAL - used_mib}  # fmt: skip
    return [(m, lab, value.get(m, v)) for m, lab, v in samples]


def _cluster(name: str, nodes: dict[str, tuple[str, float | None]]) -> list[NodeState]:
    """``nodes``: name -> (state, utilisation % or None for no DCGM series). ``state``: ``ok``,
    ``cordoned``, ``not-ready``."""
    samples: list[Sample] = []
    ksm: list[Sample] = []
    for node, (state, util) in nodes.items():
        if util is not None:
            samples += _busy(dcgm(node, 8), util, 0.7 * FB_TOTAL)
        alloc = 8.0 if util is not None else 0.0  # the device plugin left with the exporter
        ready = "unknown" if state == "not-ready" else "true"
        ksm += [*ksm_node(node, 8.0, alloc), *ksm_status(node, state == "cordoned", ready)]
    out = build_nodes(samples, ksm)
    for n in out:
        n.cluster = name
    return out


def _health(*clusters: list[NodeState]) -> dict[str, float | None]:
    snap = FleetSnapshot("prometheus", [n for c in clusters for n in c])
    return {c.cluster: c.health for c in fleet_health(HealthModel(), snap).clusters}


def test_a_node_mid_driver_upgrade_leaves_its_cluster_as_healthy() -> None:
    """eu-1 cordoned, its dcgm-exporter gone: 8 missing placeholders. They used to count as 100 %
    used, so eu fell from 0.247 to 0.194, below the floor, and lost every job without a cluster."""
    us = _cluster("us", {"us-0": ("ok", 80.0), "us-1": ("ok", 80.0)})
    before = _health(_cluster("eu", {"eu-0": ("ok", 80.0), "eu-1": ("ok", 80.0)}), us)
    eu = _cluster("eu", {"eu-0": ("ok", 80.0), "eu-1": ("cordoned", None)})
    assert [g.missing for g in eu[1].gpus] == [True] * 8
    during = _health(eu, us)
    assert round(before["eu"] or 0.0, 3) == 0.247
    assert during["eu"] == pytest.approx(before["eu"]) and (during["eu"] or 0.0) >= FLOOR


def test_a_drained_reporting_node_does_not_make_its_cluster_look_idle() -> None:
    """eu-1 drained and cordoned but still exporting (idle, 0 %): eu's utilisation stays eu-0's 80 %
    (it would be a mean of 40 % with eu-1 counted)."""
    eu = _cluster("eu", {"eu-0": ("ok", 80.0), "eu-1": ("cordoned", 0.0)})
    sig = snapshot_signals(FleetSnapshot("prometheus", eu))["eu"]
    assert sig.gpu_util == 0.8


def test_a_not_ready_node_counts_in_no_signal() -> None:
    eu = _cluster("eu", {"eu-0": ("ok", 50.0), "eu-1": ("not-ready", 100.0)})
    eu[0].cpu_milli, eu[0].cpu_milli_free = 64000, 32000
    eu[1].cpu_milli, eu[1].cpu_milli_free = 64000, 0
    sig = snapshot_signals(FleetSnapshot("prometheus", eu))["eu"]
    assert (sig.gpu_util, sig.cpu_use) == (0.5, 0.5)


def test_a_cluster_with_every_node_drained_is_listed_without_signals() -> None:
    eu = _cluster("eu", {"eu-0": ("cordoned", None), "eu-1": ("cordoned", 10.0)})
    sig = snapshot_signals(FleetSnapshot("prometheus", eu))
    assert (sig["eu"].gpu_util, sig["eu"].vram_pressure, sig["eu"].cpu_use) == (None, None, None)


def test_xid_gpus_on_a_schedulable_node_still_count_as_saturated() -> None:
    """GPU 3 of eu-0 with XID 79 (fallen off the bus): 100 % used, as before."""
    samples = _busy(dcgm("eu-0", 8, {3: 79.0}), 50.0, 0.5 * FB_TOTAL)
    (n,) = build_nodes(samples, [*ksm_node("eu-0", 8.0, 8.0), *ksm_status("eu-0", False, "true")])
    sig = snapshot_signals(FleetSnapshot("prometheus", [n]))["local"]
    assert sig.gpu_util == pytest.approx((7 * 50.0 + 100.0) / 8 / 100.0)
    assert sig.vram_pressure == pytest.approx((7 * 0.5 + 1.0) / 8)
