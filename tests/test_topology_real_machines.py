"""GPU topology as real machines report it: NVML / DCGM model names, NVLinks to CPUs, NUMA ids,
nodes of more than 8 GPUs, and fleet-file fields copied from ``nvidia-smi topo -m``.

The stand-in pynvml below answers what the NVML API reference (docs.nvidia.com/deploy/nvml-api)
and nvml.h document: ``nvmlDeviceGetNvLinkRemoteDeviceType`` returns an
``nvmlIntNvLinkDeviceType_t`` (``NVML_NVLINK_DEVICE_TYPE_GPU`` 0, ``_IBMNPU`` 1, ``_SWITCH`` 2,
``_UNKNOWN`` 0xFF), ``nvmlDeviceGetMemoryAffinity(handle, nodeSetSize, NVML_AFFINITY_SCOPE_NODE)``
the NUMA node set nearest the GPU (64 nodes per word), ``nvmlDeviceGetNumaNodeId`` the GPU's own
NUMA node, which "only applies to platforms where the GPUs are NUMA nodes" (nvml.h) and is
NotSupported on x86 hosts (``nvidia-smi topo -m`` prints "GPU NUMA ID N/A" beside "NUMA Affinity 3
1 7 5" there, NVIDIA/nccl#1617), ``nvmlDeviceGetTopologyCommonAncestor`` an
``nvmlGpuTopologyLevel_t``. Model names are those ``nvidia-smi -L`` and dcgm-exporter's
``modelName`` label print (``fleetmind.data.topology.DCGM_MODEL_NAMES``).
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
from fleetmind.data import fleet_io
from fleetmind.data.errors import ConfigError, DataError
from fleetmind.data.fleet_io import (
    discover_local_fleet,
    dump_fleet_yaml,
    load_fleet_yaml,
    names_mig_instances,
    openb_template_for,
    telemetry_template_for,
    template_from_dict,
)
from fleetmind.data.topology import (
    DCGM_MODEL_NAMES,
    LinkLevel,
    get_template,
    nvidia_smi_topo,
    nvlink_max_links,
    parse_link_label,
)
from fleetmind.envs.dynamic.fleet import load_dynamic_fleet
from fleetmind.envs.policies import make_policy
from fleetmind.serving.scheduler.placement import PeerPolicyPlacer, Reservations, names_mig
from fleetmind.serving.schemas import JobSpec
from fleetmind.serving.telemetry.base import FleetSnapshot, GpuState, NodeState

Remote = int | str  # a peer GPU's index, or a bus id that is no GPU (NVSwitch, CPU NPU)


@pytest.fixture(autouse=True)
def _no_host_sysfs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The stand-ins' bus ids are looked up in an empty sysfs, never this host's."""
    monkeypatch.setattr(fleet_io, "PCI_DEVICES_DIR", tmp_path / "no-sysfs")


def fake_nvml(
    names: list[str],
    ancestor: Callable[[int, int], int],
    links: list[list[Remote]],
    numa: list[int] | None = None,
    remote_type: Callable[[int, int], int] | None = None,
    gpu_numa_id: list[int] | None = None,
    max_links: int = 18,
) -> types.ModuleType:
    """A stand-in pynvml: ``links[i]`` lists the remote of each active NVLink of GPU ``i``;
    ``numa[i]`` is GPU ``i``'s NUMA affinity (``nvmlDeviceGetMemoryAffinity``'s one node, absent:
    the call answers NotSupported); ``gpu_numa_id[i]`` its own NUMA node
    (``nvmlDeviceGetNumaNodeId``; absent: NotSupported, as on x86 hosts)."""
    mod = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    mod.NVMLError = NVMLError
    mod.NVML_NVLINK_MAX_LINKS = max_links
    mod.NVML_FEATURE_ENABLED = 1
    mod.NVML_AFFINITY_SCOPE_NODE = 0
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

    def memory_affinity(h: int, words: int, scope: int) -> list[int]:
        if numa is None or scope != 0:
            raise NVMLError("Not Supported")
        out = [0] * words
        out[numa[h] // 64] = 1 << (numa[h] % 64)
        return out

    def numa_node_id(h: int) -> int:
        if gpu_numa_id is None:
            raise NVMLError("Not Supported")
        return gpu_numa_id[h]

    mod.nvmlDeviceGetMemoryAffinity = memory_affinity
    mod.nvmlDeviceGetNumaNodeId = numa_node_id
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
        warnings.simplefilter("error")  # a known name warns nothing
        # an unknown one warns once per process (tests/test_gpu_models_2024.py)
        warnings.filterwarnings("ignore", "GPU model .* is not in the spec table", UserWarning)
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
    named V100M32, on a 2-NVLink pair of the hybrid cube-mesh (with a PCIe-only template the placer
    took GPUs 0 and 1, which share a PCIe switch but have one NVLink only: NV1 in the whitepaper's
    cube-mesh, ``DGX1_V100_NVLINKS``)."""
    picks = []
    for model in ("V100M32", "Tesla V100-SXM2-32GB"):
        snap = FleetSnapshot(source="test", nodes=[_dgx_node(model, free)])
        placer = PeerPolicyPlacer(make_policy("TopologyBestEffort"), "heuristic:TopologyBestEffort")
        picks.append(placer.place(snap, JobSpec(num_gpu=2), Reservations(), 1)[0].gpus)
    a, b = picks[1]
    assert get_template("dgx1-v100").nvlinks[a, b] == 2  # the PCIe pick 0-1 is NV1
    assert picks[0] == picks[1]


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
    """DGX A100 with its EPYCs in NPS4 mode: the GPUs' NUMA affinities are not 0, 1, ... in GPU
    order (nvidia-smi topo -m's "NUMA Affinity" column prints them as they are: 3, 3, 1, 1, 7, 7,
    5, 5); an x86 host, so nvmlDeviceGetNumaNodeId ("GPU NUMA ID") answers NotSupported."""
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
        ({"gpu_model": "A100", "links": ["X NV200", "NV200 X"]}, "1 to 36 NVLinks"),
        ({"gpu_model": "A100", "links": ["X NV37", "NV37 X"]}, "1 to 36 NVLinks"),
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


def test_nvml_nvlink_max_links_is_the_largest_link_label() -> None:
    """nvidia-ml-py 13.x's pynvml.py has NVML_NVLINK_MAX_LINKS = 36."""
    import pynvml

    cap = nvlink_max_links()
    assert cap >= max(36, int(pynvml.NVML_NVLINK_MAX_LINKS))
    assert parse_link_label("NV18") == (int(LinkLevel.NV), 18)
    assert parse_link_label("NV24") == (int(LinkLevel.NV), 24)
    assert parse_link_label(f"NV{cap}") == (int(LinkLevel.NV), cap)
    for bad in (f"NV{cap + 1}", "NV0", "NV\u00b2", "NV\u0663", "NV" + "9" * 5000):
        with pytest.raises(ConfigError):
            parse_link_label(bad)


# -- NUMA affinity: memory affinity or sysfs, not the GPU's own NUMA node ----------------------


def test_x86_numa_affinity_comes_from_memory_affinity_not_gpu_numa_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On x86 nvmlDeviceGetNumaNodeId answers NotSupported (GPU NUMA ID N/A); the NPS4 ids come
    from nvmlDeviceGetMemoryAffinity, kept as numbered."""
    mod = _dgx_a100_nps4()
    with pytest.raises(mod.NVMLError):
        mod.nvmlDeviceGetNumaNodeId(0)
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    t = discover_local_fleet(node_name="dgxa100").templates[0]
    assert list(t.numa) == [3, 3, 1, 1, 7, 7, 5, 5]


def test_grace_hopper_gpu_numa_node_is_not_its_affinity(monkeypatch: pytest.MonkeyPatch) -> None:
    """GH200: nvmlDeviceGetNumaNodeId is the GPU's own CPU-less HBM node (1); the CPU cores the GPU
    is near are node 0, which the memory affinity gives."""
    mod = fake_nvml(["NVIDIA GH200 480GB"], lambda a, b: 50, [[]], numa=[0], gpu_numa_id=[1])
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # GH200 is not in the spec table
        t = discover_local_fleet(node_name="gh").templates[0]
    assert list(t.numa) == [0] and t.numa_nodes == 1


def _sysfs(root: Path, bus: str, numa_node: int, vendor: str = "0x10de") -> None:
    dev = root / bus
    dev.mkdir(parents=True)
    (dev / "vendor").write_text(vendor + "\n")
    (dev / "numa_node").write_text(f"{numa_node}\n")


def test_numa_affinity_from_sysfs_when_nvml_has_none(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No memory affinity (older driver) and GPU NUMA ID NotSupported: the PCI device's
    numa_node (bus id 00000000:10:00.0 is sysfs's 0000:10:00.0), kept as the kernel numbers it."""
    root = tmp_path / "sys"
    for i, node in enumerate([3, 3, 1, 1]):
        _sysfs(root, f"0000:{0x10 * (i + 1):02x}:00.0", node)
    monkeypatch.setattr(fleet_io, "PCI_DEVICES_DIR", root)
    mod = fake_nvml(["Tesla T4"] * 4, lambda a, b: 20 if a // 2 == b // 2 else 50, [[]] * 4)
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    assert list(discover_local_fleet(node_name="t4").templates[0].numa) == [3, 3, 1, 1]


@pytest.mark.parametrize(("node", "vendor"), [(-1, "0x10de"), (0, "0x8086")])
def test_numa_falls_back_to_sys_groups_when_nothing_answers(
    node: int, vendor: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """sysfs's -1 (no NUMA node known) or a device that is no NVIDIA GPU tells nothing: GPUs not
    separated by SYS are numbered 0, 1, ..."""
    root = tmp_path / "sys"
    for i in range(4):
        _sysfs(root, f"0000:{0x10 * (i + 1):02x}:00.0", node if i else 2, vendor)
    monkeypatch.setattr(fleet_io, "PCI_DEVICES_DIR", root)
    mod = fake_nvml(
        ["Tesla T4"] * 4, lambda a, b: 20 if a // 2 == b // 2 else 50, [[]] * 4, gpu_numa_id=[5] * 4
    )
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    assert list(discover_local_fleet(node_name="t4").templates[0].numa) == [0, 0, 1, 1]


# -- NVLink counts NVML allows: NV19 and more reload ------------------------------------------


def test_discovered_nv24_dumps_and_reloads(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """8 GPUs with 24 NVLinks each to 6 switches (NVML_NVLINK_MAX_LINKS = 36 in nvidia-ml-py
    13.x): discovery writes NV24, which the fleet file loader takes back."""
    sw = [f"00000000:{b:02X}:00.0" for b in range(0xC4, 0xCA)]
    links: list[list[Remote]] = [[sw[k % 6] for k in range(24)] for _ in range(8)]
    mod = fake_nvml(
        ["NVIDIA H100 80GB HBM3"] * 8,
        lambda a, b: 50,
        links,
        [0] * 4 + [1] * 4,
        lambda h, link: 2,
        max_links=36,
    )
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    fleet = discover_local_fleet(node_name="big")
    assert int(fleet.templates[0].nvlinks.max()) == 24
    path = tmp_path / "local.yaml"
    dump_fleet_yaml(fleet, path)
    again = load_fleet_yaml(path).templates[0]
    assert again.labels()[0][1] == "NV24" and np.array_equal(
        again.nvlinks, fleet.templates[0].nvlinks
    )


# -- remote device type UNKNOWN ----------------------------------------------------------------


def test_remote_type_unknown_is_a_switch_link(monkeypatch: pytest.MonkeyPatch) -> None:
    """nvml.h's NVML_NVLINK_DEVICE_TYPE_UNKNOWN (0xFF) tells nothing: read as NotSupported is, a
    switch link; only GPU (0) and IBMNPU (1) are not."""
    mod = _ac922(lambda h, link: 0 if link < 3 else 0xFF)
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    t = discover_local_fleet(node_name="ac922").templates[0]
    assert t.nvlinks[0, 1] == 3 and t.nvlinks[0, 2] == 3


# -- MIG instance names are no SXM board positions ----------------------------------------------

_MIG_NAMES = [
    "NVIDIA A100-SXM4-40GB MIG 3g.20gb",
    "NVIDIA-A100-SXM4-40GB-MIG-3g.20gb",
    "NVIDIA H100 80GB HBM3 MIG 1g.10gb",
    "NVIDIA H100 80GB HBM3 MIG 1g.10gb+me",
    "Tesla V100-SXM2-32GB mig 1g.5gb",
]


@pytest.mark.parametrize("model", _MIG_NAMES)
def test_mig_instance_names_get_no_board_template(model: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert telemetry_template_for(model, 8).name == f"pcie-8gpu:{model}"


@pytest.mark.parametrize(
    "name", [*_MIG_NAMES, "NVIDIA A100-SXM4-40GB", "MIGHTY-A100", "NVIDIA H100 80GB HBM3", "MIG"]
)
def test_mig_names_follow_the_placer_rule(name: str) -> None:
    assert names_mig_instances(name) == names_mig(name)


def test_live_placer_takes_the_template_from_healthy_gpus() -> None:
    """gpus[0] is a placeholder the kubelet counts but telemetry does not report ("unknown",
    unhealthy): the node is still a DGX-1, so the 2-NVLink pair 1-2 is taken, not the PCIe
    template's PIX pair 4-5 (one NVLink on a DGX-1)."""
    node = _dgx_node("Tesla V100-SXM2-32GB", {1, 2, 4, 5})
    node.gpus[0] = GpuState(index=0, model="unknown", healthy=False, free_milli=0)
    snap = FleetSnapshot(source="test", nodes=[node])
    placer = PeerPolicyPlacer(make_policy("TopologyBestEffort"), "heuristic:TopologyBestEffort")
    a, b = placer.place(snap, JobSpec(num_gpu=2), Reservations(), 1)[0].gpus
    assert get_template("dgx1-v100").nvlinks[a, b] == 2


# -- fleet-file fields: quoted numbers and 0/1 smt load as before --------------------------------


@pytest.mark.parametrize(
    ("fields", "attr", "want"),
    [
        ({"pcie_gen": "4"}, "pcie_gen", 4),
        ({"cpus_per_numa": "24"}, "cpus_per_numa", 24),
        ({"numa_nodes": "2"}, "numa_nodes", 2),
        ({"nvlink_gbps": "25"}, "nvlink_gbps", 25.0),
        ({"socket_gbps": "41.6"}, "socket_gbps", 41.6),
        ({"nvlink_gbps": "2.5e1"}, "nvlink_gbps", 25.0),
        ({"socket_gbps": "4E1"}, "socket_gbps", 40.0),
        ({"socket_gbps": ".5e+2"}, "socket_gbps", 50.0),
        ({"nvlink_gbps": "250e-1"}, "nvlink_gbps", 25.0),
        ({"cpus_per_numa": " 24"}, "cpus_per_numa", 24),
        ({"pcie_gen": "4\n"}, "pcie_gen", 4),
        ({"socket_gbps": "\t41.6 "}, "socket_gbps", 41.6),
        ({"numa": ["0", "1"]}, "numa", [0, 1]),
        ({"numa": [" 0", "1\n"]}, "numa", [0, 1]),
        ({"board": ["0", "0"]}, "board", [0, 0]),
        ({"smt": 0}, "smt", False),
        ({"smt": 1}, "smt", True),
        ({"smt": "true"}, "smt", True),
        ({"smt": "false"}, "smt", False),
        ({"smt": "False"}, "smt", False),
    ],
)
def test_quoted_numbers_and_01_smt_load(
    fields: dict, attr: str, want: object, tmp_path: Path
) -> None:
    doc = {
        "templates": {"box": {**_BOX, **fields}},
        "clusters": [{"name": "a", "nodes": [{"name": "n0", "template": "box"}]}],
    }
    p = tmp_path / "fleet.yaml"
    p.write_text(yaml.safe_dump(doc), encoding="utf-8")  # strings stay text: '4', 2.5e1
    assert yaml.safe_load(p.read_text())["templates"]["box"] == {**_BOX, **fields}
    got = getattr(load_fleet_yaml(p).templates[0], attr)
    assert (list(got) if isinstance(got, np.ndarray) else got) == want


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"numa": ["N/A", "N/A"]}, "'numa[0]' must be a non-negative integer"),
        ({"numa": ["0-63", "0-63"]}, "'numa[0]' must be a non-negative integer"),
        ({"numa": ["-1", "0"]}, "'numa[0]' must be a non-negative integer"),
        ({"numa": [True, False]}, "'numa[0]' must be a non-negative integer"),
        ({"numa": ["1.0", "0"]}, "'numa[0]' must be a non-negative integer"),
        ({"board": ["a", "b"]}, "'board[0]' must be a non-negative integer"),
        ({"board": [False, False]}, "'board[0]' must be a non-negative integer"),
        ({"pcie_gen": "4.0"}, "'pcie_gen' must be a non-negative integer"),
        ({"pcie_gen": "+4"}, "'pcie_gen' must be a non-negative integer"),
        ({"pcie_gen": "4e0"}, "'pcie_gen' must be a non-negative integer"),
        ({"pcie_gen": "1_0"}, "'pcie_gen' must be a non-negative integer"),
        ({"pcie_gen": "\u0664"}, "'pcie_gen' must be a non-negative integer"),  # Arabic-Indic 4
        ({"cpus_per_numa": "\u00a024"}, "'cpus_per_numa' must be a non-negative integer"),
        ({"cpus_per_numa": "2" * 5000}, "'cpus_per_numa' must be a non-negative integer"),
        ({"socket_gbps": "41.6.1"}, "'socket_gbps' must be a non-negative number"),
        ({"socket_gbps": "+4e1"}, "'socket_gbps' must be a non-negative number"),
        ({"socket_gbps": "4e"}, "'socket_gbps' must be a non-negative number"),
        ({"socket_gbps": "e1"}, "'socket_gbps' must be a non-negative number"),
        ({"socket_gbps": "4e1.5"}, "'socket_gbps' must be a non-negative number"),
        ({"socket_gbps": "1e400"}, "'socket_gbps' must be a non-negative number"),  # inf
        ({"socket_gbps": "4_1.6"}, "'socket_gbps' must be a non-negative number"),
        ({"nvlink_gbps": "-25"}, "'nvlink_gbps' must be a non-negative number"),
        ({"nvlink_gbps": "-2.5e1"}, "'nvlink_gbps' must be a non-negative number"),
        ({"smt": 2}, "'smt' must be true or false"),
        ({"smt": "yes"}, "'smt' must be true or false"),
    ],
)
def test_template_fields_still_refused(fields: dict, needle: str) -> None:
    with pytest.raises(DataError, match=needle.replace("[", r"\[").replace("]", r"\]")):
        template_from_dict("box", {**_BOX, **fields})


def test_exponent_and_block_scalar_numbers_load_from_yaml(tmp_path: Path) -> None:
    """PyYAML (YAML 1.1) reads an unquoted ``2.5e1`` as the text '2.5e1' (its float needs a ``.``
    and a signed exponent, yaml/pyyaml resolver.py), and a ``|`` block as '24\\n': both load."""
    p = tmp_path / "fleet.yaml"
    p.write_text(
        "templates:\n"
        "  box:\n"
        "    gpu_model: A10\n"
        '    links: ["X PHB", "PHB X"]\n'
        "    nvlink_gbps: 2.5e1\n"
        "    socket_gbps: 1e2\n"
        "    cpus_per_numa: |\n"
        "      24\n"
        "clusters:\n"
        "  - name: a\n"
        "    nodes:\n"
        "      - {name: n0, template: box}\n",
        encoding="utf-8",
    )
    raw = yaml.safe_load(p.read_text())["templates"]["box"]
    assert raw["nvlink_gbps"] == "2.5e1" and raw["cpus_per_numa"] == "24\n"
    t = load_fleet_yaml(p).templates[0]
    assert (t.nvlink_gbps, t.socket_gbps, t.cpus_per_numa) == (25.0, 100.0, 24)


# -- NUMA affinity masks of several nodes name none ----------------------------------------------


def _multi_node_affinity(mod: types.ModuleType) -> types.ModuleType:
    """NVML's answer where the node scope does not apply: the immediate non-I/O ancestor's
    affinity (nvml.h, nvmlDeviceGetMemoryAffinity), here nodes 0 and 1 for every GPU
    (``nvidia-smi topo -m`` prints ``0-1``)."""
    mod.nvmlDeviceGetMemoryAffinity = lambda h, words, scope: [0b11] + [0] * (words - 1)
    return mod


def test_a_two_node_affinity_mask_falls_back_to_sys_groups(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """4 T4s, SYS between the pairs, every mask 0b11: not all NUMA 0, but the SYS groups."""
    mod = fake_nvml(["Tesla T4"] * 4, lambda a, b: 20 if a // 2 == b // 2 else 50, [[]] * 4)
    monkeypatch.setitem(sys.modules, "pynvml", _multi_node_affinity(mod))
    assert list(discover_local_fleet(node_name="t4").templates[0].numa) == [0, 0, 1, 1]


def test_a_two_node_affinity_mask_defers_to_sysfs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    root = tmp_path / "sys"
    for i, node in enumerate([3, 3, 1, 1]):
        _sysfs(root, f"0000:{0x10 * (i + 1):02x}:00.0", node)
    monkeypatch.setattr(fleet_io, "PCI_DEVICES_DIR", root)
    mod = fake_nvml(["Tesla T4"] * 4, lambda a, b: 20 if a // 2 == b // 2 else 50, [[]] * 4)
    monkeypatch.setitem(sys.modules, "pynvml", _multi_node_affinity(mod))
    assert list(discover_local_fleet(node_name="t4").templates[0].numa) == [3, 3, 1, 1]


@pytest.mark.parametrize(
    ("words", "want"),
    [
        ([0b100, 0], 2),
        ([0, 1 << 5], 69),  # node 69: bit 5 of the second 64-bit word
        ([0b11, 0], None),
        ([1, 1], None),  # nodes 0 and 64
        ([0, 0], None),
        ([1 << 64, 0], None),  # a bit past the word's 64 is no node
    ],
)
def test_memory_affinity_node_needs_exactly_one_bit(words: list[int], want: int | None) -> None:
    nv = types.SimpleNamespace(
        NVML_AFFINITY_SCOPE_NODE=0,
        nvmlDeviceGetMemoryAffinity=lambda h, n, scope: words + [0] * (n - len(words)),
    )
    assert fleet_io._memory_affinity_node(nv, 0) == want
