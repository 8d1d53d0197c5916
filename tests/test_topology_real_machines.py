"""GPU topology as real machines report it: NVML / DCGM model names, NVLinks to CPUs, NUMA ids,
nodes of more than 8 GPUs, and fleet-file fields copied from ``nvidia-smi topo -m``.

The stand-in pynvml below answers what the NVML API reference (docs.nvidia.com/deploy/nvml-api)
documents: ``nvmlDeviceGetNvLinkRemoteDeviceType`` returns an ``nvmlIntNvLinkDeviceType_t``
(``NVML_NVLINK_DEVICE_TYPE_GPU`` 0, ``_IBMNPU`` 1, ``_SWITCH`` 2), ``nvmlDeviceGetNumaNodeId`` the
driver's NUMA node id, ``nvmlDeviceGetTopologyCommonAncestor`` an ``nvmlGpuTopologyLevel_t``.
Model names are those ``nvidia-smi -L`` and dcgm-exporter's ``modelName`` label print
(``fleetmind.data.topology.DCGM_MODEL_NAMES``).
"""

from __future__ import annotations

import sys
import types
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import yaml

from fleetmind.cli import main
from fleetmind.data.errors import ConfigError
from fleetmind.data.fleet_io import (
    discover_local_fleet,
    load_fleet_yaml,
    openb_template_for,
    telemetry_template_for,
)
from fleetmind.data.topology import (
    DCGM_MODEL_NAMES,
    LinkLevel,
    get_template,
    nvidia_smi_topo,
    parse_link_label,
)
from fleetmind.envs.dynamic.fleet import load_dynamic_fleet
from fleetmind.envs.policies import make_policy
from fleetmind.serving.scheduler.placement import PeerPolicyPlacer, Reservations
from fleetmind.serving.schemas import JobSpec
from fleetmind.serving.telemetry.base import FleetSnapshot, GpuState, NodeState

Remote = int | str  # a peer GPU's index, or a bus id that is no GPU (NVSwitch, CPU NPU)


def fake_nvml(
    names: list[str],
    ancestor: Callable[[int, int], int],
    links: list[list[Remote]],
    numa: list[int] | None = None,
    remote_type: Callable[[int, int], int] | None = None,
) -> types.ModuleType:
    """A stand-in pynvml: ``links[i]`` lists the remote of each active NVLink of GPU ``i``."""
    mod = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    mod.NVMLError = NVMLError
    mod.NVML_NVLINK_MAX_LINKS = 18
    mod.NVML_FEATURE_ENABLED = 1
    bus = [f"00000000:{0x10 * (i + 1):02X}:00.0" for i in range(len(names))]
    mod.nvmlInit = lambda: None
    mod.nvmlShutdown = lambda: None
    mod.nvmlDeviceGetCount = lambda: len(names)
    mod.nvmlDeviceGetHandleByIndex = lambda i: i
    mod.nvmlDeviceGetName = lambda h: names[h]
    mod.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(busId=bus[h])
    mod.nvmlDeviceGetTopologyCommonAncestor = ancestor

    def state(h: int, link: int) -> int:
        if link >= len(links[h]):
            raise NVMLError("Invalid Argument")
        return 1

    def remote(h: int, link: int) -> types.SimpleNamespace:
        r = links[h][link]
        return types.SimpleNamespace(busId=bus[r] if isinstance(r, int) else r)

    mod.nvmlDeviceGetNvLinkState = state
    mod.nvmlDeviceGetNvLinkRemotePciInfo = remote
    if remote_type is not None:
        mod.nvmlDeviceGetNvLinkRemoteDeviceType = remote_type
    if numa is not None:
        mod.nvmlDeviceGetNumaNodeId = lambda h: numa[h]
    return mod


# -- telemetry model names -> templates ---------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "n", "template"),
    [
        ("Tesla V100-SXM2-32GB", 8, "dgx1-v100:V100M32"),  # the template openb's V100M32 gets
        ("Tesla V100-SXM2-16GB", 8, "dgx1-v100:V100M16"),
        ("NVIDIA A100-SXM4-80GB", 8, "dgx-a100"),
        ("NVIDIA A100-SXM4-40GB", 8, "dgx-a100"),
        ("NVIDIA H100 80GB HBM3", 8, "dgx-h100"),  # H100 SXM5 as NVML names it
        ("NVIDIA A100-PCIE-40GB", 8, "pcie-8gpu:A100"),  # PCIe cards stay PCIe
        ("NVIDIA H100 PCIe", 8, "pcie-8gpu:H100"),
        ("Tesla T4", 4, "pcie-4gpu:T4"),
        ("Tesla V100-SXM2-32GB", 4, "pcie-4gpu:V100M32"),  # not a full SXM2 board
        ("FixT-H100", 8, "pcie-8gpu:FixT-H100"),  # unknown: as before
    ],
)
def test_telemetry_names_get_their_board_template(model: str, n: int, template: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning per snapshot for unknown names
        assert telemetry_template_for(model, n).name == template


def test_dcgm_names_of_the_host_templates_map_to_those_templates() -> None:
    for host, model in DCGM_MODEL_NAMES.items():
        t = telemetry_template_for(model, get_template(_BUILTIN_OF[host]).n_gpus)
        ref = get_template(_BUILTIN_OF[host], t.gpu_model)
        assert np.array_equal(t.nvlinks, ref.nvlinks), host


_BUILTIN_OF = {
    "dgx1-v100": "dgx1-v100",
    "dgx-a100": "dgx-a100",
    "dgx-h100": "dgx-h100",
    "pcie-l40s-8": "pcie-8gpu",
    "pcie-a10-4": "pcie-4gpu",
}


@pytest.mark.parametrize("model", ["V100M16", "V100M32", "T4", "A10", "P100", "G2", "G3"])
@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_openb_names_keep_their_templates(model: str, n: int) -> None:
    assert telemetry_template_for(model, n) is openb_template_for(model, n)


def _dgx_node(model: str, free: set[int]) -> NodeState:
    gpus = [GpuState(index=i, model=model, free_milli=1000 if i in free else 0) for i in range(8)]
    return NodeState(
        name="dgx",
        cluster="c0",
        gpus=gpus,
        cpu_milli=80_000,
        cpu_milli_free=80_000,
        memory_mib=524_288,
        memory_mib_free=524_288,
    )


@pytest.mark.parametrize("free", [{0, 1, 2, 3}, {0, 1, 2, 4}])
def test_live_topology_placer_sees_nvlink_on_a_dgx1_named_by_dcgm(free: set[int]) -> None:
    """A DGX-1 whose GPUs dcgm-exporter names "Tesla V100-SXM2-32GB" is placed on as the same node
    named V100M32, on an NVLink pair of the hybrid cube-mesh (with a PCIe-only template the placer
    took GPUs 0 and 1, which have no NVLink between them on a DGX-1)."""
    picks = []
    for model in ("V100M32", "Tesla V100-SXM2-32GB"):
        snap = FleetSnapshot(source="test", nodes=[_dgx_node(model, free)])
        placer = PeerPolicyPlacer(make_policy("TopologyBestEffort"), "heuristic:TopologyBestEffort")
        picks.append(placer.place(snap, JobSpec(num_gpu=2), Reservations(), 1)[0].gpus)
    assert picks[0] == picks[1]
    a, b = picks[1]
    assert get_template("dgx1-v100").nvlinks[a, b] > 0


# -- NVML discovery ---------------------------------------------------------------------------


def _ac922(remote_type: Callable[[int, int], int] | None) -> types.ModuleType:
    """IBM Power System AC922, 4x V100 SXM2: per socket two GPUs with 3 NVLinks to each other and
    3 to the POWER9 CPU (an NVLink NPU, no GPU bus id); nvidia-smi topo -m shows NV3 within a
    socket and SYS across (IBM Redpaper "IBM Power System AC922 Introduction and Technical
    Overview": 6 NVLink 2.0 bricks per V100, GPU-GPU and CPU-GPU)."""
    npu = ["0007:00:00.0", "0007:00:00.1", "0007:00:01.0", "0007:00:01.1"]
    links: list[list[Remote]] = [
        [1, 1, 1, npu[0], npu[0], npu[0]],
        [0, 0, 0, npu[1], npu[1], npu[1]],
        [3, 3, 3, npu[2], npu[2], npu[2]],
        [2, 2, 2, npu[3], npu[3], npu[3]],
    ]
    return fake_nvml(
        ["Tesla V100-SXM2-16GB"] * 4,
        lambda a, b: 30 if a // 2 == b // 2 else 50,
        links,
        numa=[0, 0, 8, 8],
        remote_type=remote_type,
    )


def test_nvlinks_to_a_cpu_connect_no_gpu_pair(monkeypatch: pytest.MonkeyPatch) -> None:
    mod = _ac922(lambda h, link: 0 if link < 3 else 1)  # GPU, then IBMNPU
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    t = discover_local_fleet(node_name="ac922").templates[0]
    assert t.nvlinks[0, 1] == 3 and t.nvlinks[2, 3] == 3
    assert t.nvlinks[0, 2] == 0 and t.nvlinks[1, 3] == 0  # was NV3 through the "switch"
    assert t.labels()[0][2] == "SYS"


def test_nvswitch_links_still_connect_every_pair(monkeypatch: pytest.MonkeyPatch) -> None:
    """DGX A100: 12 NVLinks per GPU, 2 to each of 6 NVSwitches; nvidia-smi topo -m: NV12."""
    sw = [f"00000000:{b:02X}:00.0" for b in (0xC4, 0xC5, 0xC6, 0xC7, 0xC8, 0xC9)]
    links: list[list[Remote]] = [[sw[k // 2] for k in range(12)] for _ in range(8)]
    for remote_type in (lambda h, link: 2, None):  # SWITCH, or a driver without the call
        mod = fake_nvml(["NVIDIA A100-SXM4-80GB"] * 8, lambda a, b: 50, links, [0] * 8, remote_type)
        monkeypatch.setitem(sys.modules, "pynvml", mod)
        t = discover_local_fleet(node_name="dgxa100").templates[0]
        assert (t.nvlinks[~np.eye(8, dtype=bool)] == 12).all()


def test_remote_type_not_supported_keeps_the_switch_reading(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def not_supported(h: int, link: int) -> int:
        raise mod.NVMLError("Not Supported")

    mod = _ac922(not_supported)
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    t = discover_local_fleet(node_name="ac922").templates[0]
    assert t.nvlinks[0, 2] == 3  # documented: without the remote type, a no-GPU end is a switch


def _dgx_a100_nps4() -> types.ModuleType:
    """DGX A100 with its EPYCs in NPS4 mode: the driver's NUMA ids are not 0, 1, ... in GPU order
    (nvidia-smi topo -m's "NUMA Affinity" column prints them as they are: 3, 3, 1, 1, 7, 7, 5, 5)."""
    sw = [f"00000000:{b:02X}:00.0" for b in (0xC4, 0xC5, 0xC6, 0xC7, 0xC8, 0xC9)]
    links: list[list[Remote]] = [[sw[k // 2] for k in range(12)] for _ in range(8)]
    return fake_nvml(
        ["NVIDIA A100-SXM4-80GB"] * 8,
        lambda a, b: 20 if a // 2 == b // 2 else 50,
        links,
        numa=[3, 3, 1, 1, 7, 7, 5, 5],
        remote_type=lambda h, link: 2,
    )


def test_discover_shows_and_saves_the_driver_numa_ids(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _dgx_a100_nps4())
    out = tmp_path / "local.yaml"
    assert main(["fleet", "discover", "--node", "dgxa100", "--out", str(out)]) == 0
    rows = [ln.split() for ln in capsys.readouterr().out.splitlines() if ln.startswith("GPU")]
    assert [r[-1] for r in rows[1:9]] == ["3", "3", "1", "1", "7", "7", "5", "5"]
    doc = yaml.safe_load(out.read_text())
    (tpl,) = doc["templates"].values()
    assert tpl["numa"] == [3, 3, 1, 1, 7, 7, 5, 5]
    again = load_fleet_yaml(out).templates[0]
    assert list(again.numa) == [3, 3, 1, 1, 7, 7, 5, 5]
    assert again.level[0, 2] == LinkLevel.SYS and again.nvlinks[0, 2] == 12


def test_discover_one_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(["Tesla T4"], lambda a, b: 50, [[]], [1]))
    t = discover_local_fleet(node_name="one").templates[0]
    assert list(t.numa) == [1] and nvidia_smi_topo(t, legend=False).splitlines()[1].endswith("1")


# -- dynamic mode: at most 8 GPUs a node --------------------------------------------------------


def _dgx2_yaml(tmp_path: Path) -> Path:
    """DGX-2: 16 V100 SXM3, NV6 all-to-all through 12 NVSwitches."""
    g = 16
    links = [" ".join("X" if i == j else "NV6" for j in range(g)) for i in range(g)]
    doc = {
        "name": "dgx2",
        "templates": {"dgx-2": {"gpu_model": "V100", "links": links, "numa": [0] * 8 + [1] * 8}},
        "clusters": [
            {"name": "a", "region": "us-east", "nodes": [{"name": "dgx2-0", "template": "dgx-2"}]}
        ],
    }
    p = tmp_path / "dgx2.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def test_dynamic_fleet_refuses_a_node_of_16_gpus_in_one_line(tmp_path: Path) -> None:
    path = _dgx2_yaml(tmp_path)
    assert load_fleet_yaml(path).n_gpus == 16  # the fleet itself is fine
    with pytest.raises(ConfigError, match=r"node 'dgx2-0' has 16 GPUs .* at most 8 GPUs per node"):
        load_dynamic_fleet(str(path))


def test_dynamic_fleet_error_is_one_cli_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fleetmind.cli.runner import run_main

    path = _dgx2_yaml(tmp_path)
    assert run_main(lambda: load_dynamic_fleet(str(path)) and 0, prog="fleetmind") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fleetmind: error: node 'dgx2-0' has 16 GPUs")


# -- fleet-file fields copied from nvidia-smi or malformed ------------------------------------


_BOX = {"gpu_model": "A10", "links": ["X PHB", "PHB X"]}


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"numa": ["N/A", "N/A"]}, "'numa[0]' must be a non-negative integer, got 'N/A'"),
        ({"numa": [-1, -1]}, "'numa[0]' must be a non-negative integer, got -1"),
        ({"cpus_per_numa": "0-63"}, "'cpus_per_numa' must be a non-negative integer"),
        ({"pcie_gen": "four"}, "'pcie_gen' must be a non-negative integer"),
        ({"nvlink_gbps": "fast"}, "'nvlink_gbps' must be a non-negative number"),
        ({"socket_gbps": float("nan")}, "'socket_gbps' must be a non-negative number"),
        ({"numa_nodes": -3}, "'numa_nodes' must be a non-negative integer"),
        ({"board": ["a", "b"]}, "'board[0]' must be a non-negative integer, got 'a'"),
        ({"smt": "yes please"}, "'smt' must be true or false"),
        ({"gpu_model": "A100", "links": ["X NV200", "NV200 X"]}, "1 to 18 NVLinks"),
        ({"gpu_model": "A100", "links": ["X NV19", "NV19 X"]}, "1 to 18 NVLinks"),
        ({"links": ["X NV\u00b3", "NV\u00b3 X"]}, "unknown link label 'NV\u00b3'"),
    ],
)
def test_malformed_template_fields_are_one_line_errors(
    fields: dict, needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = {
        "templates": {"box": {**_BOX, **fields}},
        "clusters": [{"name": "a", "nodes": [{"name": "n0", "template": "box"}]}],
    }
    p = tmp_path / "fleet.yaml"
    p.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    assert main(["fleet", "show", "--topology", str(p)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fleetmind: error: ")
    assert "fleet.yaml:" in err and needle in err


def test_nv18_is_the_largest_link_label() -> None:
    assert parse_link_label("NV18") == (int(LinkLevel.NV), 18)
    for bad in ("NV19", "NV0", "NV\u00b2", "NV\u0663"):  # superscript two, Arabic-Indic three
        with pytest.raises(ConfigError):
            parse_link_label(bad)
