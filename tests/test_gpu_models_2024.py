"""Current data-centre GPUs (H200, B200, GB200, GH200, L4) get their NVLink boards and specs.

Names are those NVML's ``nvmlDeviceGetName`` gives, which ``nvidia-smi -L`` prints and
dcgm-exporter reports as its ``modelName`` label: "NVIDIA H200", "NVIDIA H200 NVL" (the PCIe
card), "NVIDIA B200", "NVIDIA GB200", "NVIDIA GH200 480GB", "NVIDIA L4". GPU feature discovery's
``nvidia.com/gpu.product`` label is that name with spaces replaced by ``-``, ``-SHARED`` appended
under time-slicing, and ``-MIG-<profile>`` for a MIG device (NVIDIA/k8s-device-plugin,
``internal/lm/resource.go``: ``productLabel``, ``NewMIGResourceLabeler``).
"""

from __future__ import annotations

import sys
import types
import warnings

import numpy as np
import pytest

from fleetmind.data.fleet_io import (
    discover_local_fleet,
    fleet_from_dict,
    fleet_to_dict,
    telemetry_template_for,
)
from fleetmind.data.topology import GPU_SPECS, get_template, gpu_spec
from fleetmind.envs.policies.topology import TopologyBestEffort
from fleetmind.serving.scheduler.placement import PeerPolicyPlacer, Reservations
from fleetmind.serving.schemas import JobSpec
from fleetmind.serving.telemetry.base import FleetSnapshot, GpuState, NodeState

H100 = "NVIDIA H100 80GB HBM3"  # the SXM5 board of DGX H100 / HGX H100


def _node(name: str, model: str, busy: set[int]) -> NodeState:
    gpus = [GpuState(index=i, model=model, free_milli=0 if i in busy else 1000) for i in range(8)]
    return NodeState(
        name=name,
        cluster="c",
        gpus=gpus,
        cpu_milli=200_000,
        cpu_milli_free=200_000,
        memory_mib=2_000_000,
        memory_mib_free=2_000_000,
    )


def _options(nodes: list[NodeState], k: int) -> dict[str, float]:
    snap = FleetSnapshot("sim", nodes)
    placer = PeerPolicyPlacer(TopologyBestEffort(seed=0), "topo")
    return {o.node: o.score for o in placer.place(snap, JobSpec(num_gpu=k), Reservations(), 3)}


@pytest.mark.parametrize("model", ["NVIDIA B200", "NVIDIA H200"])
@pytest.mark.parametrize("k", [2, 4])
def test_an_hgx_board_ranks_with_an_hgx_h100_for_a_multi_gpu_job(model: str, k: int) -> None:
    """Equally loaded, an HGX B200 / H200 node scores as high as an HGX H100 node (both NV18 all
    pairs); it was modelled as a PCIe gen 3 server and scored about 36 times lower."""
    scores = _options([_node("new", model, {0, 1}), _node("h100", H100, {0, 1})], k)
    assert scores["new"] >= scores["h100"]


@pytest.mark.parametrize("k", [2, 4])
def test_the_link_term_of_a_busier_h100_does_not_beat_a_b200(k: int) -> None:
    """The hunt's case: a B200 node with 6 free GPUs, an H100 node with 4. The score is
    ``1000 * mean pair score + BestFit``; the link term (score // 1000) is the NVLink one on both,
    so only BestFit's tie-break (the tighter H100 node) separates them."""
    scores = _options([_node("b200", "NVIDIA B200", {0, 1}), _node("h100", H100, {0, 1, 2, 3})], k)
    assert scores["b200"] // 1000 == scores["h100"] // 1000 >= 1800  # NV18: 100 per link


@pytest.mark.parametrize(
    ("model", "n", "template"),
    [
        ("NVIDIA H200", 8, "hgx-h200"),
        ("NVIDIA B200", 8, "hgx-b200"),
        ("NVIDIA GB200", 4, "gb200-tray"),
        ("NVIDIA-H200", 8, "hgx-h200"),  # GPU feature discovery's nvidia.com/gpu.product
        ("NVIDIA-H200-141GB-HBM3e-SHARED", 8, "hgx-h200"),  # time-slicing suffix
        ("NVIDIA-B200", 8, "hgx-b200"),
        ("NVIDIA-B200-SHARED", 8, "hgx-b200"),
        ("NVIDIA-GB200", 4, "gb200-tray"),
        ("NVIDIA H200 NVL", 8, "pcie-8gpu:H200"),  # the PCIe card stays PCIe
        ("NVIDIA-H200-NVL", 4, "pcie-4gpu:H200"),
        ("NVIDIA H100 NVL", 8, "pcie-8gpu:H100"),
        ("NVIDIA B200", 4, "pcie-4gpu:B200"),  # not a full board
        ("NVIDIA GB200", 8, "pcie-8gpu:GB200"),
        ("NVIDIA GH200 480GB", 1, "pcie-1gpu:GH200"),  # 480GB: the Grace CPU's memory
        ("NVIDIA L4", 4, "pcie-4gpu:L4"),
        ("NVIDIA L40", 8, "pcie-8gpu:L40"),
        ("NVIDIA L40S", 8, "pcie-8gpu:L40S"),  # the longer key still wins
        # MIG slices are no board positions (the single strategy's product label)
        ("NVIDIA-B200-MIG-1g.23gb", 8, "pcie-8gpu:NVIDIA-B200-MIG-1g.23gb"),
    ],
)
def test_names_map_to_their_templates_without_a_warning(model: str, n: int, template: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert telemetry_template_for(model, n).name == template


def test_board_templates_have_nvlink_on_every_pair() -> None:
    h100 = get_template("dgx-h100")
    for name, n in (("hgx-h200", 8), ("hgx-b200", 8), ("gb200-tray", 4)):
        t = get_template(name)
        off = ~np.eye(n, dtype=bool)
        assert t.n_gpus == n and (t.nvlinks[off] == 18).all(), name
        assert t.pcie_gen == 5, name
    # NVLink 5 carries twice NVLink 4's per link: 18 x 50 GB/s against 18 x 25 GB/s per direction
    assert get_template("hgx-b200").bandwidth_gbps()[0, 7] == 2 * h100.bandwidth_gbps()[0, 7] == 900
    assert get_template("hgx-h200").bandwidth_gbps()[0, 7] == h100.bandwidth_gbps()[0, 7]
    assert get_template("gb200-tray").numa.tolist() == [0, 0, 1, 1]


def test_new_specs_and_the_old_ones_unchanged() -> None:
    old = {
        "P100": ("Pascal", 20.0, 3, 16),
        "V100": ("Volta", 25.0, 3, 32),
        "V100M16": ("Volta", 25.0, 3, 16),
        "V100M32": ("Volta", 25.0, 3, 32),
        "T4": ("Turing", 0.0, 3, 16),
        "A10": ("Ampere", 0.0, 4, 24),
        "L40S": ("Ada Lovelace", 0.0, 4, 48),
        "A100": ("Ampere", 25.0, 4, 80),
        "H100": ("Hopper", 25.0, 5, 80),
        "G2": ("unknown", 0.0, 3, 0),
        "G3": ("unknown", 0.0, 3, 0),
    }
    for key, facts in old.items():
        s = GPU_SPECS[key]
        assert (s.arch, s.nvlink_gbps, s.pcie_gen, s.memory_gib) == facts, key
    new = {
        "H200": ("Hopper", 25.0, 5, 141),
        "B200": ("Blackwell", 50.0, 5, 180),
        "GB200": ("Blackwell", 50.0, 5, 0),
        "GH200": ("Hopper", 25.0, 5, 0),
        "L4": ("Ada Lovelace", 0.0, 4, 24),
    }
    for key, facts in new.items():
        s = gpu_spec(key)
        assert (s.arch, s.nvlink_gbps, s.pcie_gen, s.memory_gib) == facts, key


def test_an_unknown_name_warns_once_that_it_is_modelled_as_pcie_gen3() -> None:
    name = "NVIDIA FixW-Unknown-7"  # used by no other test: the warning is once per process
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        first = telemetry_template_for(name, 8)
        again = telemetry_template_for(name, 8)
        telemetry_template_for(name, 4)
    assert first is again and first.name == f"pcie-8gpu:{name}" and first.pcie_gen == 3
    texts = [str(w.message) for w in seen if issubclass(w.category, UserWarning)]
    assert len(texts) == 1, texts
    assert f"{name!r} is not in the spec table" in texts[0]
    assert "PCIe gen 3" in texts[0] and "without NVLink" in texts[0]


@pytest.mark.parametrize("name", ["unknown", "", "Unknown "])
def test_telemetry_placeholders_for_a_nameless_gpu_do_not_warn(name: str) -> None:
    """Prometheus names a GPU that kube-state-metrics counts and DCGM does not report "unknown",
    and NVML a lost one: no model to add to the spec table."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        telemetry_template_for(name, 8)
    assert not [w for w in seen if "spec table" in str(w.message)]


def test_a_fleets_own_template_under_a_name_now_built_in_survives_save_and_reload() -> None:
    """A fleet file written before ``hgx-h200`` was built in may define its own: it wins on load,
    so saving must write it out, or the reload would get the built-in 8-GPU H200 board."""
    own = {"gpu_model": "H100", "links": ["X NV4", "NV4 X"], "numa": [0, 0]}
    doc = {
        "templates": {"hgx-h200": own},
        "clusters": [
            {"name": "east", "region": "us-east", "nodes": [{"name": "n0", "template": "hgx-h200"}]}
        ],
    }
    fleet = fleet_from_dict(doc)
    saved = fleet_to_dict(fleet)
    assert "hgx-h200" in saved["templates"]
    again = fleet_from_dict(saved)
    assert again == fleet and again.templates[0].n_gpus == 2
    # the built-in itself is still left out of the saved file
    builtin = fleet_from_dict(
        {
            "clusters": [
                {
                    "name": "e",
                    "region": "us-east",
                    "nodes": [{"name": "n0", "template": "hgx-h200"}],
                }
            ]
        }
    )
    assert not fleet_to_dict(builtin).get("templates")


def test_nvml_discovery_of_a_b200_board_gets_gen5_and_nvlink5(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two B200s on one NVSwitch (18 links each), as NVML reports a board: NV18 at 50 GB/s per
    link; unknown to the spec table, they were PCIe gen 3 with 25 GB/s links."""
    mod = types.ModuleType("pynvml")
    mod.NVMLError = type("NVMLError", (Exception,), {})
    mod.nvmlInit = mod.nvmlShutdown = lambda: None
    mod.nvmlDeviceGetCount = lambda: 2
    mod.nvmlDeviceGetHandleByIndex = lambda i: i
    mod.nvmlDeviceGetName = lambda h: b"NVIDIA B200"
    mod.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(busId=f"0000:{h + 1:02X}:00.0")
    mod.nvmlDeviceGetTopologyCommonAncestor = lambda a, b: 40  # NVML_TOPOLOGY_NODE
    mod.NVML_NVLINK_MAX_LINKS = 18
    mod.NVML_FEATURE_ENABLED = 1
    mod.nvmlDeviceGetNvLinkState = lambda h, link: 1
    mod.nvmlDeviceGetNvLinkRemotePciInfo = lambda h, link: types.SimpleNamespace(
        busId="0000:99:00.0"  # an NVSwitch, no GPU
    )
    mod.nvmlDeviceGetNvLinkRemoteDeviceType = lambda h, link: 2  # NVML_NVLINK_DEVICE_TYPE_SWITCH
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a known model warns nothing
        t = discover_local_fleet(node_name="b200").templates[0]
    assert (t.gpu_model, t.pcie_gen, t.nvlink_gbps) == ("B200", 5, 50.0)
    assert t.nvlinks[0, 1] == 18 and t.bandwidth_gbps()[0, 1] == 900.0
