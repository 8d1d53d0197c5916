"""Fleet loaders: YAML (schema, errors, round trip), the openb node list, NVML discovery."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import numpy as np
import pytest

from fleetmind.data import fleet_io
from fleetmind.data.errors import ConfigError, DataError, NotAvailableError
from fleetmind.data.fleet import Cluster, Fleet
from fleetmind.data.fleet_io import (
    discover_local_fleet,
    dump_fleet_yaml,
    fleet_from_dict,
    load_fleet_yaml,
    load_openb_fleet,
)
from fleetmind.data.paths import REPO_ROOT
from fleetmind.data.topology import LinkLevel, get_template

FLEETS = REPO_ROOT / "data" / "fleets"


@pytest.fixture(autouse=True)
def _no_host_sysfs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The stand-ins' bus ids are looked up in an empty sysfs, never this host's (a host with an
    NVIDIA function at 0000:10:00.0 would give the fake GPUs its NUMA node)."""
    monkeypatch.setattr(fleet_io, "PCI_DEVICES_DIR", tmp_path / "no-sysfs")


@pytest.mark.parametrize("name", ["small.yaml", "example_multicluster.yaml"])
def test_yaml_round_trip(name, tmp_path):
    fleet = load_fleet_yaml(FLEETS / name)
    out = tmp_path / "again.yaml"
    dump_fleet_yaml(fleet, out)
    again = load_fleet_yaml(out)
    assert again == fleet
    assert again.n_gpus == fleet.n_gpus > 0
    assert dump_fleet_yaml(again) == out.read_text()


def test_example_fleet_contents():
    fleet = load_fleet_yaml(FLEETS / "example_multicluster.yaml")
    assert [c.region for c in fleet.clusters] == ["us-east", "eu-west", "ap-southeast"]
    dual = fleet.template_of("dual-0")
    assert dual.level[0, 1] == LinkLevel.BRD and dual.level[0, 2] == LinkLevel.PIX
    assert fleet.template_of("h100-3") is get_template("dgx-h100")
    east, eu = fleet.cluster_index("train-east"), fleet.cluster_index("train-eu")
    assert fleet.wan_latency_ms[east, eu] == 80.0 and fleet.wan_bandwidth_gbps[eu, east] == 2.5
    apac = fleet.cluster_index("infer-apac")
    assert 0 < fleet.wan_latency_ms[east, apac] and np.isinf(fleet.wan_bandwidth_gbps[apac, apac])
    assert len(fleet.nodes_in_cluster("train-eu")) == 8
    assert fleet.gpu_offset[-1] == fleet.gpu_count.sum() == fleet.n_gpus


def _write(tmp_path, text):
    p = tmp_path / "fleet.yaml"
    p.write_text(text)
    return p


def test_malformed_yaml_names_file_and_line(tmp_path):
    p = _write(tmp_path, "name: x\nclusters:\n  - name: a\n    nodes: [ {name: n0\n")
    with pytest.raises(DataError, match=r"fleet\.yaml:\d+: not valid YAML"):
        load_fleet_yaml(p)


def test_unknown_key_names_key_and_line(tmp_path):
    p = _write(
        tmp_path,
        "clusters:\n  - name: a\n    nodes:\n      - {name: n0, template: dgx1-v100, gpus: 8}\n",
    )
    with pytest.raises(DataError, match=r"fleet\.yaml:4: unknown key 'gpus'"):
        load_fleet_yaml(p)


def test_unknown_template_is_a_config_error_with_line(tmp_path):
    p = _write(
        tmp_path, "clusters:\n  - name: a\n    nodes:\n      - name: n0\n        template: dgx-2\n"
    )
    with pytest.raises(ConfigError, match=r"fleet\.yaml:4: unknown template 'dgx-2'"):
        load_fleet_yaml(p)


def test_bad_custom_template_and_missing_file(tmp_path):
    doc = {
        "templates": {"t": {"gpu_model": "T4", "links": ["X PIX", "PIX X", "PIX PIX"]}},
        "clusters": [{"name": "a", "nodes": [{"name": "n", "template": "t"}]}],
    }
    with pytest.raises(DataError, match="2x2|3x3"):
        fleet_from_dict(doc, "inline")
    with pytest.raises(DataError, match="not found"):
        load_fleet_yaml(tmp_path / "missing.yaml")
    doc2 = {
        "clusters": [{"name": "a", "nodes": [{"name": "n", "template": "pcie-2gpu"}]}],
        "wan": [{"between": ["a", "zz"], "latency_ms": 3}],
    }
    with pytest.raises(ConfigError, match="unknown cluster 'zz'"):
        fleet_from_dict(doc2, "inline")


def test_openb_fleet_counts(shared_data):
    fleet = load_openb_fleet()
    assert fleet.n_nodes == 1213 and fleet.n_gpus == 6212
    assert fleet.n_clusters == 1
    assert fleet.node_names[0] == "openb-node-0000"
    v100_8 = [
        i
        for i in range(fleet.n_nodes)
        if fleet.gpu_count[i] == 8 and fleet.gpu_model[i].startswith("V100")
    ]
    assert v100_8 and all(fleet.template_of(i).name.startswith("dgx1-v100") for i in v100_8)
    t4 = [i for i in range(fleet.n_nodes) if fleet.gpu_model[i] == "T4"]
    assert all((fleet.template_of(i).nvlinks == 0).all() for i in t4)
    s = fleet.summary()
    assert sum(m["gpus"] for m in s["gpu_models"].values()) == 6212
    assert set(s["gpu_models"]) == {"A10", "G2", "G3", "P100", "T4", "V100M16", "V100M32"}


def test_openb_partition_is_deterministic_and_balanced(shared_data):
    a = load_openb_fleet(n_clusters=4, seed=7)
    b = load_openb_fleet(n_clusters=4, seed=7)
    c = load_openb_fleet(n_clusters=4, seed=8)
    assert np.array_equal(a.node_cluster, b.node_cluster)
    assert not np.array_equal(a.node_cluster, c.node_cluster)
    sizes = np.bincount(a.node_cluster)
    assert sizes.sum() == 1213 and sizes.max() - sizes.min() <= 1
    assert len({cl.region for cl in a.clusters}) == 4
    assert a.wan_latency_ms.shape == (4, 4) and (a.wan_latency_ms[~np.eye(4, dtype=bool)] > 0).all()
    with pytest.raises(ConfigError, match="--clusters"):
        load_openb_fleet(n_clusters=0)


def test_openb_single_cluster_round_trip(shared_data, tmp_path):
    fleet = load_openb_fleet()
    dump_fleet_yaml(fleet, tmp_path / "openb.yaml")
    assert load_fleet_yaml(tmp_path / "openb.yaml") == fleet


def test_nvml_absent_gives_a_clear_error(monkeypatch):
    import pynvml

    def boom():
        raise pynvml.NVMLError_LibraryNotFound()

    monkeypatch.setattr(pynvml, "nvmlInit", boom)
    with pytest.raises(NotAvailableError) as err:
        discover_local_fleet()
    msg = str(err.value)
    assert "NVML" in msg and "--topology FILE.yaml" in msg and "openb" in msg


def _fake_pynvml(n=4):
    """A stand-in pynvml: GPUs 0-1 and 2-3 bonded by 2 NVLinks, one PCIe switch per socket."""
    mod = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    mod.NVMLError = NVMLError
    mod.NVML_NVLINK_MAX_LINKS = 4
    mod.NVML_FEATURE_ENABLED = 1
    bus = [f"00000000:{0x10 * (i + 1):02X}:00.0".encode() for i in range(n)]
    peers = {
        0: [1, 1, None, None],
        1: [0, 0, None, None],
        2: [3, 3, None, None],
        3: [2, 2, None, None],
    }
    mod.nvmlInit = lambda: None
    mod.nvmlShutdown = lambda: None
    mod.nvmlDeviceGetCount = lambda: n
    mod.nvmlDeviceGetHandleByIndex = lambda i: i
    mod.nvmlDeviceGetName = lambda h: b"Tesla V100-SXM2-32GB"
    mod.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(busId=bus[h])

    def ancestor(a, b):
        return 10 if a // 2 == b // 2 else 50  # SINGLE switch within a socket, SYSTEM across

    def state(h, link):
        if peers[h][link] is None:
            raise NVMLError("not supported")
        return 1

    mod.nvmlDeviceGetTopologyCommonAncestor = ancestor
    mod.nvmlDeviceGetNvLinkState = state
    mod.nvmlDeviceGetNvLinkRemotePciInfo = lambda h, link: types.SimpleNamespace(
        busId=bus[peers[h][link]]
    )
    return mod


def test_discovery_with_a_fake_nvml(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml())
    fleet = discover_local_fleet()
    t = fleet.templates[0]
    # the spec-table key, not the NVML name's first word ("V100-SXM2-32GB" is no key, so its
    # NVLink and PCIe facts were the unknown-model default): V100 with its 32 GB variant
    assert fleet.n_nodes == 1 and t.n_gpus == 4 and t.gpu_model == "V100M32"
    assert t.pcie_gen == 3 and t.nvlink_gbps == 25.0
    assert t.nvlinks[0, 1] == 2 and t.nvlinks[2, 3] == 2 and t.nvlinks[0, 2] == 0
    assert t.level[0, 1] == LinkLevel.PIX and t.level[1, 2] == LinkLevel.SYS
    assert list(t.numa) == [0, 0, 1, 1]
    assert t.labels()[0][1] == "NV2"


def test_discovery_reads_no_host_sysfs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake GPUs' bus ids are never looked up under this host's /sys."""
    read: list[str] = []
    real = Path.read_text

    def spy(self: Path, *args: object, **kwargs: object) -> str:
        read.append(str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", spy)
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml())
    assert list(discover_local_fleet().templates[0].numa) == [0, 0, 1, 1]
    assert read and not [p for p in read if p.startswith("/sys/")]


def test_fleet_validation():
    tpl = get_template("pcie-1gpu")
    with pytest.raises(ConfigError, match="duplicate node name 'n'"):
        Fleet("f", [Cluster("a", "us-east")], [tpl], ["n", "n"], [0, 0], [0, 0], [1, 1], [1, 1])
    fleet = Fleet("f", [Cluster("a", "us-east")], [tpl], ["n"], [0], [0], [1000], [1024])
    with pytest.raises(ConfigError, match="unknown node 'x'"):
        fleet.template_of("x")
    with pytest.raises(ConfigError, match="unknown cluster 'b'"):
        fleet.nodes_in_cluster("b")


def test_duplicate_yaml_key_is_rejected(tmp_path):
    p = _write(tmp_path, "name: a\nname: b\nclusters: []\n")
    with pytest.raises(DataError, match=r"fleet\.yaml: line 2: duplicate key 'name'"):
        load_fleet_yaml(p)


def test_discovery_through_nvswitch(monkeypatch):
    """Links that end on an NVSwitch (no GPU has that bus id) connect every switch-attached pair."""
    mod = _fake_pynvml()
    switch = types.SimpleNamespace(busId=b"00000000:F0:00.0")
    mod.NVML_NVLINK_MAX_LINKS = 3
    mod.nvmlDeviceGetNvLinkState = lambda h, link: 1
    mod.nvmlDeviceGetNvLinkRemotePciInfo = lambda h, link: switch
    mod.nvmlDeviceGetNumaNodeId = lambda h: 3 if h < 2 else 7
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    t = discover_local_fleet().templates[0]
    off = ~np.eye(4, dtype=bool)
    assert (t.nvlinks[off] == 3).all()
    assert list(t.numa) == [0, 0, 1, 1]  # GetNumaNodeId is the GPU's own node, not its affinity


def test_fleet_pickles_for_worker_processes():
    import pickle

    fleet = load_fleet_yaml(FLEETS / "small.yaml")
    tpl = fleet.template_of("lab-dgx1-0")
    from fleetmind.data.gpu_alloc import best_gpu_set

    best_gpu_set(tpl, np.ones(8, bool), 2)
    again = pickle.loads(pickle.dumps(fleet))
    assert again == fleet
    t2 = again.template_of("lab-dgx1-0")
    assert not t2.level.flags.writeable and not again.node_cluster.flags.writeable
    assert best_gpu_set(t2, np.ones(8, bool), 4) == (0, 1, 2, 3)
