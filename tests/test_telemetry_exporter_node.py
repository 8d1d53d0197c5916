"""The node the single-exporter mode (``FLEETMIND_PROMETHEUS_URL=http://<host>:9400/metrics``) puts
an exporter's GPUs on when its series name none.

Upstream behaviour relied on (NVIDIA/dcgm-exporter, README and
``internal/pkg/hostname/hostname.go``): the ``Hostname`` label is ``NODE_NAME`` where set, else the
container's host name, which in a DaemonSet pod without ``hostNetwork`` is the pod's name
(``dcgm-exporter-x7k2p``); ``--no-hostname`` (``-n``) leaves the label out. The exposition text
carries no ``instance`` label: Prometheus adds that target label when it scrapes.
"""

from __future__ import annotations

import socket

import pytest

from fleetmind.serving.telemetry.prometheus import build_nodes, parse_dcgm

H100 = 'modelName="NVIDIA H100 80GB HBM3"'


def _text(extra: str = "") -> str:
    labels = f'gpu="0",UUID="GPU-1",{H100}{extra}'
    return f"DCGM_FI_DEV_FB_USED{{{labels}}} 500\nDCGM_FI_DEV_FB_FREE{{{labels}}} 81000\n"


@pytest.mark.parametrize("hostname", ["", ',Hostname="dcgm-exporter-x7k2p"'])
def test_an_exporter_without_a_usable_hostname_is_this_node(
    monkeypatch: pytest.MonkeyPatch, hostname: str
) -> None:
    """No ``Hostname`` (``-n``) or the exporter pod's own name: the node FleetMind runs on, as the
    ``nvml`` source names it (was ``unknown``, which matches no node)."""
    monkeypatch.setenv("NODE_NAME", "gpu-node-7")
    (node,) = parse_dcgm(_text(hostname))
    assert node.name == "gpu-node-7" and len(node.gpus) == 1


def test_without_node_name_the_host_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    monkeypatch.setattr(socket, "gethostname", lambda: "gpu-host-3")
    (node,) = parse_dcgm(_text())
    assert node.name == "gpu-host-3"


def test_a_real_hostname_still_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODE_NAME", "gpu-node-7")
    (node,) = parse_dcgm(_text(',Hostname="gpu-node-b"'))
    assert node.name == "gpu-node-b"


def test_server_mode_keeps_the_target_address(monkeypatch: pytest.MonkeyPatch) -> None:
    """Through a Prometheus server every series has ``instance``; FleetMind's own node name is
    never used there (its nodes are the fleet's, not this host's)."""
    monkeypatch.setenv("NODE_NAME", "fleetmind-node")
    lab = {"gpu": "0", "UUID": "GPU-1", "Hostname": "dcgm-exporter-x7k2p"}
    samples = [
        ("DCGM_FI_DEV_FB_USED", {**lab, "instance": "10.0.0.5:9400"}, 500.0),
        ("DCGM_FI_DEV_FB_FREE", {**lab, "instance": "10.0.0.5:9400"}, 81000.0),
    ]
    (node,) = build_nodes(samples, [])
    assert node.name == "10.0.0.5"
    (bare,) = build_nodes([(n, lab, v) for n, _, v in samples], [])
    assert bare.name != "fleetmind-node"


@pytest.mark.parametrize(
    ("url", "node"),
    [
        ("http://127.0.0.1:9400/metrics", "fleetmind-node"),  # the default: beside FleetMind
        ("http://localhost:9400/metrics", "fleetmind-node"),
        ("http://[::1]:9400/metrics", "fleetmind-node"),
        ("http://gpu-node-0:9400/metrics", "gpu-node-0"),  # docs/serving/index.md's example
        ("http://10.0.0.5:9400/metrics", "fleetmind-node"),  # the node's hostIP, in a pod
        ("http://[::ffff:127.0.0.1]:9400/metrics", "fleetmind-node"),
    ],
)
def test_a_remote_exporter_is_named_after_its_url_not_this_node(
    monkeypatch: pytest.MonkeyPatch, url: str, node: str
) -> None:
    """A single exporter on another machine: its GPUs are that machine's, never those of the
    node FleetMind runs on (which would be scored with another node's GPUs)."""
    from fleetmind.serving.telemetry.prometheus import PrometheusSource

    monkeypatch.setenv("NODE_NAME", "fleetmind-node")
    text = _text(',Hostname="dcgm-exporter-x7k2p"')

    class Answer:
        def raise_for_status(self) -> None:
            return None

    Answer.text = text  # type: ignore[attr-defined]
    source = PrometheusSource(url)
    monkeypatch.setattr(source._client, "get", lambda *a, **kw: Answer())
    try:
        (got,) = source.collect().nodes
    finally:
        source.close()
    assert got.name == node


def test_an_exporter_address_without_node_name_is_the_address(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from fleetmind.serving.telemetry.prometheus import exporter_node

    monkeypatch.delenv("NODE_NAME", raising=False)
    assert exporter_node("http://10.0.3.17:9400/metrics") == "10.0.3.17"
    assert exporter_node("http://GPU-Node-0.:9400/metrics") == "gpu-node-0"
