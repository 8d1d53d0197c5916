"""What NVML discovery and the ``nvml`` telemetry source call things: the GPU model (a spec-table
key, not the first word of NVML's product name) and the node (``NODE_NAME``, then the host name).

Upstream behaviour the fixtures follow:

* ``nvmlDeviceGetName`` answers product names such as "NVIDIA A100-PCIE-40GB", "NVIDIA A100-SXM4-80GB",
  "Tesla V100-SXM2-32GB", "NVIDIA H100 80GB HBM3", "NVIDIA A10G", "Tesla T4" (the names
  ``nvidia-smi --query-gpu=name`` prints and dcgm-exporter's ``modelName`` carries; NVML API
  reference, ``nvmlDeviceGetName``).
* ``NODE_NAME`` from the downward API (``fieldRef: spec.nodeName``) is how a pod learns its
  Kubernetes Node; dcgm-exporter reads the same variable for its ``Hostname``
  (``getLocalHostname`` in NVIDIA/dcgm-exporter ``internal/pkg/hostname/hostname.go``), and
  ``fleetmind graph build --nvml`` already does (``cli/graph.py``).
"""

from __future__ import annotations

import socket
import sys
import types
import warnings

import pynvml
import pytest

from fleetmind.cli import main
from fleetmind.data.fleet_io import discover_local_fleet, gpu_model_from_nvml, local_node_name
from fleetmind.data.topology import gpu_spec
from fleetmind.serving.telemetry.nvml import NvmlSource


@pytest.mark.parametrize(
    ("name", "memory_mib", "model"),
    [
        ("NVIDIA A100-PCIE-40GB", None, "A100"),  # was "A100-PCIE-40GB": PCIe gen 3 by default
        ("NVIDIA A100-SXM4-80GB", None, "A100"),
        ("NVIDIA A100 80GB PCIe", None, "A100"),
        ("Tesla V100-SXM2-32GB", None, "V100M32"),  # was "V100-SXM2-32GB", not in the table
        ("Tesla V100-PCIE-16GB", None, "V100M16"),
        ("Tesla V100S-PCIE-32GB", None, "V100M32"),
        ("Tesla V100-SXM2", 32510.0, "V100M32"),  # no size in the name: NVML's total memory
        ("NVIDIA H100 80GB HBM3", None, "H100"),
        ("NVIDIA A10G", None, "A10"),
        ("NVIDIA A10", None, "A10"),
        ("Tesla T4", None, "T4"),
        ("NVIDIA L40S", None, "L40S"),
        ("Tesla P100-PCIE-16GB", None, "P100"),
    ],
)
def test_nvml_names_map_to_spec_keys(name: str, memory_mib: float | None, model: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a known model warns nothing
        assert gpu_model_from_nvml(name, memory_mib) == model


def test_an_unknown_model_warns_and_keeps_its_whole_name() -> None:
    with pytest.warns(UserWarning, match="'NVIDIA RTX A1000' is not in the spec table"):
        model = gpu_model_from_nvml("NVIDIA RTX A1000")
    assert model == "RTX-A1000"  # not "RTX" (every RTX card alike), and "A1000" is not an A100
    assert gpu_spec(model).pcie_gen == 3


def _fake_pynvml(name: bytes) -> types.ModuleType:
    """Two PCIe GPUs named ``name`` under one switch, no NVLink."""
    mod = types.ModuleType("pynvml")
    mod.NVMLError = type("NVMLError", (Exception,), {})
    mod.nvmlInit = mod.nvmlShutdown = lambda: None
    mod.nvmlDeviceGetCount = lambda: 2
    mod.nvmlDeviceGetHandleByIndex = lambda i: i
    mod.nvmlDeviceGetName = lambda h: name
    mod.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(
        busId=f"0000:{h + 1:02X}:00.0".encode()
    )
    mod.nvmlDeviceGetTopologyCommonAncestor = lambda a, b: 10  # NVML_TOPOLOGY_SINGLE: PIX
    mod.NVML_NVLINK_MAX_LINKS = 0
    return mod


def test_discovery_gives_an_a100_pcie_its_gen4_link(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(b"NVIDIA A100-PCIE-40GB"))
    monkeypatch.setenv("NODE_NAME", "gpu-node-7")
    fleet = discover_local_fleet()
    t = fleet.templates[0]
    assert (t.gpu_model, t.pcie_gen) == ("A100", 4)
    assert fleet.node_names == ["gpu-node-7"] and t.name == "nvml-gpu-node-7"


def test_node_name_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODE_NAME", "gpu-node-7")
    assert local_node_name("given") == "given"
    assert local_node_name() == "gpu-node-7"
    monkeypatch.setenv("NODE_NAME", " ")
    assert local_node_name() == socket.gethostname()


def test_the_nvml_source_names_its_node_from_node_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pynvml, "nvmlInit", lambda: None)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetCount", lambda: 0)
    monkeypatch.setenv("NODE_NAME", "gpu-node-7")
    assert NvmlSource().collect().nodes[0].name == "gpu-node-7"  # was the pod's host name
    assert NvmlSource(node_name="other").collect().nodes[0].name == "other"


def test_fleet_discover_takes_node_and_warns_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # a model the spec table does not know (B200, named here before, is in it now)
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(b"NVIDIA RTX PRO 6000"))
    monkeypatch.setenv("NODE_NAME", "from-env")
    assert main(["fleet", "discover", "--node", "gpu-node-9"]) == 0
    out, err = capsys.readouterr()
    assert "node gpu-node-9" in out and "2x RTX-PRO-6000" in out
    # one line, among others: without the openb data a "fleetmind: note: openb data not found"
    # line comes first (cli/__init__.py, the synthetic fallback of the fleet group)
    warning = "fleetmind: warning: GPU model 'NVIDIA RTX PRO 6000' is not in the spec table"
    assert [line for line in err.splitlines() if line.startswith(warning)], err
