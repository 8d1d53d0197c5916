"""FleetMind's own alert rules and the RCA model's alert-name vocabulary agree.

``deploy/fleetmind-rules.yml`` names its GPU alerts ``GpuXidError`` and ``GpuLowUtilisation``
(users route on those names, so they stay), while the feature vocabulary, from the simulator's
rule catalog, spells them ``GPUXidError`` and ``GPUUtilizationLow``. Every shipped XID alert was
counted as ``name:other``: on the kube-prometheus-stack test cluster an XID 74 on two GPUs of a
training pod ranked the pod first (0.399, ``gpu_memory_leak``) where the vocabulary's spelling
ranks GPU 0 first (0.442, ``gpu_xid_error``). ``ALERTNAME_ALIASES`` now counts each shipped name
in its vocabulary name's column, leaving the layout (and released models) as they were.
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from fastapi.testclient import TestClient
from kps_helpers import EXT, KSM, kps_graph
from serving_helpers import app_on_graph

from fleetmind.rca.features.columnar import incident_crop
from fleetmind.rca.features.dense import alert_features
from fleetmind.rca.features.layout import (
    ALERTNAME_ALIASES,
    ALERTNAME_VOCAB,
    FEATURE_NAMES,
    FEATURE_VERSION,
    NUM_FEATURES,
)
from fleetmind.rca.features.mapping import _keywords

RULES = Path(__file__).resolve().parents[1] / "deploy" / "fleetmind-rules.yml"

NO_VOCABULARY_NAME = {
    # FleetMind's own health: about FleetMind, not a fault of the fleet's graph
    "FleetMindDown": "self-monitoring",
    "FleetMindAbsent": "self-monitoring",
    "FleetMindNotReady": "self-monitoring",
    "FleetMindAlertIngestionFailing": "self-monitoring",
    "FleetMindExtenderErrors": "self-monitoring",
    "FleetMindTLSHandshakeFailures": "self-monitoring",
    "FleetMindExtenderSlow": "self-monitoring",
    "FleetMindFilterRefusingAll": "self-monitoring",
    "FleetMindIncidentGroupingLag": "self-monitoring",
    "FleetMindModelFallback": "self-monitoring",
    "FleetMindWebhookRefused": "self-monitoring",
    "FleetMindNotificationsFailing": "self-monitoring",
    # a cluster's batch queue: the vocabulary has no scheduling alert
    "PendingPodsOverQueueCapacity": "no scheduling alert in the vocabulary",
    # PCIe replays: the vocabulary's nearest, GPUFallenOffBus, is the failure replays precede,
    # not the same alert; name:other plus the gpu and link keyword groups
    "GpuPcieReplays": "no PCIe degradation alert in the vocabulary",
}
"""Alert names of the shipped rules deliberately left to ``name:other``, with the reason."""

FEATURE_NAMES_SHA256 = "087f62efba9984ca908e46f8d2d68e1df911c27e8de2d85d4d9e6c8747cb4103"
"""sha256 of ``"\\n".join(FEATURE_NAMES)`` for feature version 2 (released models' layout)."""


def _shipped_alert_names() -> list[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return sorted({r["alert"] for g in groups for r in g["rules"] if "alert" in r})


def test_every_shipped_alert_has_a_vocabulary_column_or_a_stated_reason() -> None:
    names = _shipped_alert_names()
    assert "GpuXidError" in names and "GpuLowUtilisation" in names  # the premise
    vocab = set(ALERTNAME_VOCAB)
    unmapped = [
        n
        for n in names
        if n not in vocab and n not in ALERTNAME_ALIASES and n not in NO_VOCABULARY_NAME
    ]
    assert unmapped == [], (
        f"{unmapped}: add each to ALERTNAME_ALIASES (rca/features/layout.py) or, with a reason, "
        "to NO_VOCABULARY_NAME here"
    )
    stale = sorted(set(NO_VOCABULARY_NAME) - set(names))
    assert stale == [], f"{stale} are no longer in {RULES.name}"


def test_aliases_name_vocabulary_columns_and_change_no_column() -> None:
    for alias, target in ALERTNAME_ALIASES.items():
        assert target in ALERTNAME_VOCAB and alias not in ALERTNAME_VOCAB
        assert f"name:{alias}" not in FEATURE_NAMES
        # an alias is the same alert: its keyword groups match its target's, so its row is identical
        assert np.array_equal(_keywords(alias), _keywords(target)), alias
    assert FEATURE_VERSION == 2 and NUM_FEATURES == len(FEATURE_NAMES) == 131
    digest = hashlib.sha256("\n".join(FEATURE_NAMES).encode()).hexdigest()
    assert digest == FEATURE_NAMES_SHA256


def _alert(name: str, labels: dict[str, str], start: str) -> dict[str, Any]:
    return {
        "status": "firing",
        "labels": {"alertname": name, **labels, **EXT},
        "startsAt": start,
    }


DCGM = {  # dcgm-exporter's labels as the GPU Operator's ServiceMonitor scrapes them
    "job": "nvidia-dcgm-exporter", "instance": "10.244.0.105:9400",
    "container": "nvidia-dcgm-exporter", "endpoint": "gpu-metrics",
    "service": "nvidia-dcgm-exporter", "namespace": "gpu-operator",
    "pod": "nvidia-dcgm-exporter-9fx2k", "modelName": "NVIDIA A100-SXM4-80GB",
    "Hostname": "nvidia-dcgm-exporter-9fx2k",
}  # fmt: skip
"""NVIDIA dcgm-exporter's series labels (internal/pkg/transformation/kubernetes.go adds
``exported_pod`` under kube-prometheus-stack's default ``honorLabels: false``)."""


def _gpu(i: int) -> dict[str, str]:
    return {
        **DCGM,
        "gpu": str(i),
        "UUID": f"GPU-gpu-a100-0-{i}",
        "device": f"nvidia{i}",
        "pci_bus_id": f"00000000:0{i}:00.0",
        "exported_pod": "llama-train-0",
        "exported_namespace": "ml",
        "exported_container": "llama",
    }


def _storm(xid_name: str, util_name: str) -> list[dict[str, Any]]:
    """XID 74 on GPUs 0 and 1 of ``gpu-a100-0`` at the same instant, GPU 2 idle, and the
    training pod crash-looping (kube-state-metrics)."""
    t0 = "2026-03-01T10:00:00Z"
    crash = {**KSM, "namespace": "ml", "pod": "llama-train-0", "container": "llama"}
    return [
        _alert(xid_name, {**_gpu(0), "xid": "74", "severity": "critical"}, t0),
        _alert(xid_name, {**_gpu(1), "xid": "74", "severity": "critical"}, t0),
        _alert(util_name, {**_gpu(2), "severity": "warning"}, "2026-03-01T09:50:00Z"),
        _alert("KubePodCrashLooping", {**crash, "severity": "warning"}, "2026-03-01T10:02:00Z"),
    ]


SHIPPED = _storm("GpuXidError", "GpuLowUtilisation")
VOCAB = _storm("GPUXidError", "GPUUtilizationLow")


def test_shipped_names_count_in_their_vocabulary_columns() -> None:
    g = kps_graph()
    x = alert_features(g, SHIPPED).x
    col = {n: i for i, n in enumerate(FEATURE_NAMES)}
    gpu0 = g.index["prod-eu/gpu/gpu-a100-0/0"]
    assert x[gpu0, col["name:GPUXidError"]] == pytest.approx(np.log1p(1.0))
    assert x[gpu0, col["name:other"]] == 0.0
    gpu2 = g.index["prod-eu/gpu/gpu-a100-0/2"]
    assert x[gpu2, col["name:GPUUtilizationLow"]] == pytest.approx(np.log1p(1.0))


@pytest.mark.parametrize("hops", [None, 2])
def test_shipped_names_give_the_vocabulary_names_features(hops: int | None) -> None:
    """Both feature paths (dense, and the columnar crop the service uses) give bit-identical rows."""
    g = kps_graph()
    assert np.array_equal(alert_features(g, SHIPPED).x, alert_features(g, VOCAB).x)
    a, b = incident_crop(g, SHIPPED, hops), incident_crop(g, VOCAB, hops)
    assert np.array_equal(a.x, b.x)


LOG2 = float(np.log1p(1.0))
ALERT_COLUMNS_SNAPSHOT = {
    "prod-eu/gpu/gpu-a100-0/0": {"alert": 1.0, "sev:critical": LOG2, "name:GPUXidError": LOG2,
                                 "kw:gpu": LOG2, "kw:error": LOG2},
    "prod-eu/gpu/gpu-a100-0/1": {"alert": 1.0, "sev:critical": LOG2, "name:GPUXidError": LOG2,
                                 "kw:gpu": LOG2, "kw:error": LOG2},
    "prod-eu/gpu/gpu-a100-0/2": {"alert": 1.0, "sev:warning": LOG2, "name:GPUUtilizationLow": LOG2,
                                 "kw:gpu": LOG2, "kw:disk": LOG2, "kw:saturation": LOG2},
    "prod-eu/pod/ml/llama-train-0": {"alert": 1.0, "sev:warning": LOG2,
                                     "name:KubePodCrashLooping": LOG2, "kw:restart": LOG2},
}  # fmt: skip
"""The non-zero alert columns (``alert``, ``sev:*``, ``name:*``, ``kw:*``) of :data:`VOCAB`, stored
from the feature code the released models were trained with (before the aliases; ``kw:disk``: the
substring ``io`` of "Utilization")."""


@pytest.mark.parametrize("alerts", [VOCAB, SHIPPED], ids=["vocabulary", "shipped"])
def test_alert_columns_match_the_released_snapshot(alerts: list[dict[str, Any]]) -> None:
    """The vocabulary names still give the released models' columns, and the shipped names the same."""
    g = kps_graph()
    x = alert_features(g, alerts).x
    cols = [
        j for j, n in enumerate(FEATURE_NAMES) if n.split(":")[0] in ("alert", "sev", "name", "kw")
    ]
    got = {
        g.nodes[i].id: {FEATURE_NAMES[j]: float(x[i, j]) for j in cols if x[i, j] != 0}
        for i in range(x.shape[0])
    }
    got = {k: v for k, v in got.items() if v}
    assert got.keys() == ALERT_COLUMNS_SNAPSHOT.keys()
    for node, row in ALERT_COLUMNS_SNAPSHOT.items():
        assert got[node] == pytest.approx(row), node


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with app_on_graph(tmp_path_factory.mktemp("aliases"), kps_graph()) as c:
        yield c


def _ranked(client: TestClient, alerts: list[dict[str, Any]]) -> list[tuple[str, float, Any]]:
    body = json.dumps({"alerts": copy.deepcopy(alerts), "top_k": 5})
    r = client.post("/api/v1/rca", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["mapped_alerts"] == 2
    return [(c["node"], round(c["score"], 6), c.get("fault_type")) for c in out["causes"]]


def test_released_model_ranks_the_shipped_xid_alert_as_its_vocabulary_name(
    client: TestClient,
) -> None:
    """The released GAT loads (no fallback) and ranks the shipped name exactly as its vocabulary
    name (before the aliases: the training pod first, 0.399, where the vocabulary name ranked GPU 0
    first, 0.442, on the graph without NVLink nodes)."""
    rca = client.get("/api/v1/models").json()["rca"]
    assert rca["fallback_reason"] is None and rca["method"] == "gat", rca
    shipped, vocab = _ranked(client, SHIPPED[:2]), _ranked(client, VOCAB[:2])
    assert shipped == vocab  # scores to 6 decimals, nodes and fault types
    # the cause is the GPUs' hardware (a GPU, or the NVLink between them where the graph has it)
    assert shipped[0][0].startswith(("prod-eu/gpu/gpu-a100-0/", "prod-eu/link/gpu-a100-0/"))
