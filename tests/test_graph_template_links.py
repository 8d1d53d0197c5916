"""``fleetmind graph build --template-links``: the link nodes of each GPU host's template.

The released GAT was trained on graphs whose GPU hosts carry one ``link`` node per NVLink-connected
GPU pair (``nvl-<i>-<j>``) or per shared PCIe switch (``pcie-sw<k>``), :func:`fleetmind.data.
topology.rca_host_templates` as :mod:`fleetmind.data.rca_gen.graphs` adds them. A graph built from
the Kubernetes API had none (only the ``--nvml`` host's one ``nvlink`` node), so XID 74 (NVLink
error, NVIDIA's "XID Errors" table) on GPUs 0 and 1 of a DGX A100 named the trainer pod or the
host, never the link. The alerts follow dcgm-exporter's labels as kube-prometheus-stack scrapes
them (``tests/kps_helpers.py``; NVIDIA/dcgm-exporter ``default-counters.csv``, ``DCGM_FI_DEV_XID_ERRORS``).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

from fleetmind.cli import main
from fleetmind.data.fleet_io import names_board_part
from fleetmind.data.graph import DependencyGraph
from fleetmind.data.graph_build import build_graph
from fleetmind.data.topology import rca_host_templates

DATA = Path(__file__).parent / "data" / "k8s"
KPS = DATA / "kps_cluster.json"
C = "prod-eu"
HOSTS = ("gpu-a100-0", "gpu-a100-1")  # both "NVIDIA-A100-SXM4-80GB", 8 GPUs


def _kps(**kw: object) -> dict:
    """The graph JSON ``fleetmind graph build`` makes of the test cluster."""
    k = json.loads(KPS.read_text())
    model = build_graph(k["nodes"], k["pods"], k["services"], k["endpointslices"], cluster=C, **kw)
    return model.model_dump(mode="json")


def _links(g: dict) -> dict[str, dict]:
    return {n["id"]: n for n in g["nodes"] if n["kind"] == "link"}


def _attached(g: dict, link: str) -> set[str]:
    return {e["dst"] for e in g["edges"] if e["src"] == link and e["kind"] == "attached_to"}


def test_links_of_the_template_as_the_training_graphs_name_them() -> None:
    tpl = rca_host_templates()["dgx-a100"]
    g = _kps(template_links=True)
    links = _links(g)
    assert len(links) == 2 * len(tpl.links) == 56
    for h in HOSTS:
        for label, gpus, level, bw in tpl.links:
            lid = f"{C}/link/{h}/{label}"
            node = links[lid]
            assert node["match"] == {"cluster": C, "node": h, "link": label}
            assert node["attrs"] == {"level": level, "bandwidth_gbps": bw}
            assert _attached(g, lid) == {f"{C}/gpu/{h}/{i}" for i in gpus}
    assert {lbl for lbl, *_ in tpl.links} >= {"nvl-0-1", "nvl-6-7"}


def test_off_by_default() -> None:
    assert _links(_kps()) == {}


def test_nvml_host_keeps_its_nvml_links_only() -> None:
    g = _kps(template_links=True, nvlinks={"gpu-a100-0": list(range(8))})
    by_host: dict[str, set[str]] = {}
    for lid, node in _links(g).items():
        by_host.setdefault(node["match"]["node"], set()).add(lid.rsplit("/", 1)[1])
    assert by_host["gpu-a100-0"] == {"nvlink"}
    assert len(by_host["gpu-a100-1"]) == 28 and "nvlink" not in by_host["gpu-a100-1"]


def test_gpu_alerts_still_map_to_gpus() -> None:
    g = DependencyGraph.from_json(_kps(template_links=True))
    gpu = {"alertname": "GpuXidError", "cluster": C, "Hostname": "gpu-a100-0", "node": "gpu-a100-0",
           "gpu": "1", "xid": "74"}  # fmt: skip
    assert g.node_for_alert(gpu) == f"{C}/gpu/gpu-a100-0/1"
    link = {"alertname": "NvlinkDown", "cluster": C, "node": "gpu-a100-0", "link": "nvl-0-1"}
    assert g.node_for_alert(link) == f"{C}/link/gpu-a100-0/nvl-0-1"


def test_cli_flag(tmp_path: Path) -> None:
    k = json.loads(KPS.read_text())
    src = tmp_path / "lists"
    src.mkdir()
    for what in ("nodes", "pods", "services", "endpointslices"):
        (src / f"{what}.json").write_text(json.dumps(k[what]))
    for flag, want in (([], 0), (["--template-links"], 56)):
        out = tmp_path / f"g{len(flag)}.json"
        rc = main(["graph", "build", "--from-dir", str(src), "--cluster", C, "--out", str(out),
                   *flag])  # fmt: skip
        assert rc == 0
        assert len(_links(json.loads(out.read_text()))) == want


KPS_EXT = {"prometheus": "monitoring/kps-prometheus"}


def _xid74(gpu: int) -> dict[str, str]:
    """dcgm-exporter's XID alert on GPU ``gpu`` of gpu-a100-0, as kube-prometheus-stack relabels
    it (``honor_labels: false``: the exporter's pod in ``pod``, the workload in ``exported_pod``)."""
    return {"alertname": "GpuXidError", "job": "nvidia-dcgm-exporter",
            "instance": "10.244.0.105:9400", "container": "nvidia-dcgm-exporter",
            "endpoint": "gpu-metrics", "service": "nvidia-dcgm-exporter",
            "namespace": "gpu-operator", "pod": "nvidia-dcgm-exporter-9fx2k", "gpu": str(gpu),
            "UUID": f"GPU-gpu-a100-0-{gpu}", "device": f"nvidia{gpu}",
            "modelName": "NVIDIA A100-SXM4-80GB", "Hostname": "nvidia-dcgm-exporter-9fx2k",
            "pci_bus_id": f"00000000:0{gpu}:00.0", "xid": "74", "severity": "critical",
            "exported_pod": "llama-train-0", "exported_namespace": "ml",
            "exported_container": "llama", **KPS_EXT}  # fmt: skip


@pytest.mark.parametrize("first", [0, 1])
def test_xid74_on_two_gpus_names_the_link_between_them(first: int) -> None:
    from fastapi.testclient import TestClient

    from fleetmind.serving.app import create_app
    from fleetmind.serving.settings import Settings

    tmp = tempfile.mkdtemp()
    path = f"{tmp}/graph.json"
    Path(path).write_text(json.dumps(_kps(template_links=True)))
    alerts = [{"status": "firing", "labels": _xid74(gpu), "startsAt": f"2026-03-01T10:00:0{i}Z"}
              for i, gpu in enumerate((first, 1 - first))]  # fmt: skip
    settings = Settings(database_url=f"sqlite:///{tmp}/fm.db", graph=path,
                        placement_model="heuristic:builtin-bestfit", incident_worker=False)  # fmt: skip
    with TestClient(create_app(settings)) as c:
        out = c.post("/api/v1/rca", json={"alerts": alerts, "top_k": 3}).json()
    assert out["method"] == "gat" and out["mapped_alerts"] == 2
    top = out["causes"][0]
    assert top["node"] == f"{C}/link/gpu-a100-0/nvl-0-1", out["causes"]
    assert top["score"] > 0.5


def _node(name: str, product: str, devices: int) -> dict:
    """A Node as GPU feature discovery labels it (``nvidia.com/gpu.product``, ``.count``)."""
    return {"metadata": {"name": name, "labels": {"nvidia.com/gpu.product": product,
                                                  "nvidia.com/gpu.count": str(devices)}},
            "status": {"capacity": {"nvidia.com/gpu": str(devices)}}}  # fmt: skip


@pytest.mark.parametrize(
    ("product", "devices", "labels"),
    [
        ("NVIDIA-H100-80GB-HBM3", 8, 28),  # DGX H100: NV18 all-to-all
        ("Tesla-V100-SXM2-32GB", 8, 16),  # DGX-1 hybrid cube-mesh
        ("NVIDIA-L40S", 8, 4),  # PCIe: one link per shared switch
        ("NVIDIA-A100-SXM4-80GB-MIG-1g.10gb", 56, 0),  # MIG single strategy: no board positions
        ("NVIDIA-RTX-FOO-9000", 8, 0),  # unknown model: no template
    ],
)
def test_templates_of_gpu_models(product: str, devices: int, labels: int) -> None:
    nodes = {"items": [_node("n0", product, devices)]}
    g = build_graph(nodes, {"items": []}, {"items": []}, cluster=C, template_links=True)
    links = _links(g.model_dump(mode="json"))
    assert len(links) == labels
    if labels:
        kind = "nvl-0-1" if labels != 4 else "pcie-sw0"
        assert f"{C}/link/n0/{kind}" in links


@pytest.mark.parametrize(
    ("product", "devices"),
    [
        ("NVIDIA-H100-80GB-HBM3", 4),  # GCP a3-highgpu-4g: 4 GPUs of an HGX H100 board
        ("NVIDIA-A100-SXM4-40GB", 4),  # GCP a2-highgpu-4g: 4 GPUs of an HGX A100 board
        ("NVIDIA-H100-80GB-HBM3", 3),
        ("NVIDIA-A100-SXM4-40GB", 16),  # GCP a2-megagpu-16g: two NVSwitch-joined boards
        ("Tesla-V100-SXM3-32GB", 16),  # DGX-2: no built-in template
        ("NVIDIA-H200", 4),
        ("NVIDIA-GB200", 2),
    ],
)
def test_board_gpus_at_another_count_get_no_made_up_pcie_switches(
    product: str, devices: int
) -> None:
    """The GPUs of an SXM / NVSwitch board are NVLinked at any count: the ``pcie-<n>gpu`` template
    such a count falls back to has PCIe switches these hosts do not have, so no link is guessed."""
    nodes = {"items": [_node("n0", product, devices)]}
    g = build_graph(nodes, {"items": []}, {"items": []}, cluster=C, template_links=True)
    dumped = g.model_dump(mode="json")
    assert _links(dumped) == {}
    assert sum(n["kind"] == "gpu" for n in dumped["nodes"]) == devices


@pytest.mark.parametrize(
    ("product", "devices", "labels"),
    [
        ("NVIDIA-L40S", 4, 2),
        ("NVIDIA-H100-PCIe", 4, 2),  # the PCIe card of the H100 keeps its switches
        ("NVIDIA-H200-NVL", 4, 2),
        ("NVIDIA-A100-PCIE-40GB", 16, 8),
    ],
)
def test_pcie_cards_keep_their_switches_at_any_count(
    product: str, devices: int, labels: int
) -> None:
    nodes = {"items": [_node("n0", product, devices)]}
    g = build_graph(nodes, {"items": []}, {"items": []}, cluster=C, template_links=True)
    links = _links(g.model_dump(mode="json"))
    assert len(links) == labels and f"{C}/link/n0/pcie-sw0" in links


def test_xid74_on_a_four_gpu_board_host_names_no_pcie_switch() -> None:
    """XID 74 (NVLink error) on GPUs 0 and 1 of gpu-a100-0 cut to 4 of its board's GPUs (as a
    4-GPU A100 SXM4 cloud instance): no ``pcie-sw`` link exists for the model to rank first."""
    k = json.loads(KPS.read_text())
    for n in k["nodes"]["items"]:
        if n["metadata"]["name"] == "gpu-a100-0":
            n["metadata"]["labels"]["nvidia.com/gpu.count"] = "4"
            for part in ("capacity", "allocatable"):
                if part in n["status"]:
                    n["status"][part]["nvidia.com/gpu"] = "4"
    g = build_graph(k["nodes"], k["pods"], k["services"], k["endpointslices"], cluster=C,
                    template_links=True).model_dump(mode="json")  # fmt: skip
    by_host = {n["match"]["node"] for n in _links(g).values()}
    assert by_host == {"gpu-a100-1"}  # the 8-GPU host keeps its board's 28 NVLink pairs
    assert not [i for i in _links(g) if "/pcie-sw" in i]


def test_names_board_part() -> None:
    board = ["NVIDIA-H100-80GB-HBM3", "NVIDIA A100-SXM4-80GB", "Tesla V100-SXM3-32GB",
             "NVIDIA-H200-141GB-HBM3e", "NVIDIA B200", "NVIDIA GB200"]  # fmt: skip
    pcie = ["NVIDIA H100 PCIe", "NVIDIA H100 NVL", "NVIDIA A100-PCIE-40GB", "NVIDIA H200 NVL",
            "NVIDIA-L40S", "Tesla-T4", "V100M32", "H100", "NVIDIA A100-SXM4-40GB MIG 3g.20gb",
            "NVIDIA-RTX-FOO-9000", ""]  # fmt: skip
    assert [m for m in board if not names_board_part(m)] == []
    assert [m for m in pcie if names_board_part(m)] == []
