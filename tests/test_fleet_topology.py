"""Node templates: the built-in topologies, bandwidths and the nvidia-smi style rendering."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from fleetmind.data.errors import ConfigError
from fleetmind.data.topology import (
    PCIE_X16_GBPS,
    LinkLevel,
    NodeTemplate,
    get_template,
    link_label,
    nvidia_smi_topo,
    parse_link_label,
)

PAIRS8 = list(itertools.combinations(range(8), 2))
NV2 = {(0, 3), (0, 4), (1, 2), (1, 5), (2, 3), (4, 7), (5, 6), (6, 7)}
NV1 = {(0, 1), (0, 2), (1, 3), (2, 6), (3, 7), (4, 5), (4, 6), (5, 7)}
PIX = {(0, 1), (2, 3), (4, 5), (6, 7)}


def test_dgx1_v100_cube_mesh_matches_the_whitepaper_layout():
    t = get_template("dgx1-v100")
    assert (t.n_gpus, t.gpu_model) == (8, "V100")
    for i, j in PAIRS8:
        want_nv = 2 if (i, j) in NV2 else 1 if (i, j) in NV1 else 0
        assert t.nvlinks[i, j] == t.nvlinks[j, i] == want_nv, (i, j)
        same_half = (i < 4) == (j < 4)
        want = LinkLevel.PIX if (i, j) in PIX else LinkLevel.PHB if same_half else LinkLevel.SYS
        assert t.level[i, j] == t.level[j, i] == want, (i, j)
    # Every V100 uses its 6 NVLinks: two bonded pairs and two single links.
    assert (t.nvlinks.sum(axis=1) == 6).all()
    assert list(t.numa) == [0, 0, 0, 0, 1, 1, 1, 1]
    assert (np.diag(t.level) == LinkLevel.X).all() and (np.diag(t.nvlinks) == 0).all()


@pytest.mark.parametrize(
    ("name", "links", "model"), [("dgx-a100", 12, "A100"), ("dgx-h100", 18, "H100")]
)
def test_nvswitch_dgx_are_all_to_all(name, links, model):
    t = get_template(name)
    assert t.gpu_model == model
    off = ~np.eye(8, dtype=bool)
    assert (t.nvlinks[off] == links).all()
    labels = t.labels()
    assert all(labels[i][j] == f"NV{links}" for i, j in PAIRS8)
    assert (t.level[:4, 4:] == LinkLevel.SYS).all()


@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_pcie_servers_have_no_nvlink_and_documented_levels(n):
    t = get_template(f"pcie-{n}gpu", "T4")
    assert t.n_gpus == n and t.name == f"pcie-{n}gpu:T4" and t.gpu_model == "T4"
    assert (t.nvlinks == 0).all()
    if n == 2:
        assert t.level[0, 1] == LinkLevel.PHB
    if n >= 4:
        half = n // 2
        for i, j in itertools.combinations(range(n), 2):
            if (i < half) != (j < half):
                assert t.level[i, j] == LinkLevel.SYS
            elif j == i + 1 and i % 2 == 0:
                assert t.level[i, j] == LinkLevel.PIX
            else:
                assert t.level[i, j] == LinkLevel.PXB


def test_get_template_is_cached_and_rejects_unknown_names():
    assert get_template("dgx1-v100", "V100M32") is get_template("dgx1-v100:V100M32")
    assert get_template("dgx1-v100:V100M32").name == "dgx1-v100:V100M32"
    with pytest.raises(ConfigError, match="unknown template 'dgx-9'"):
        get_template("dgx-9")


def test_bandwidth_orders_links_and_uses_pcie_generation():
    t = get_template("dgx1-v100")
    bw = t.bandwidth_gbps()
    assert bw.shape == (8, 8) and np.array_equal(bw, bw.T)
    assert np.isinf(np.diag(bw)).all()
    assert bw[0, 3] == pytest.approx(2 * t.nvlink_gbps)  # NV2
    assert bw[0, 1] == pytest.approx(t.nvlink_gbps)  # NV1
    assert bw[0, 5] < bw[0, 1]  # SYS slower than any NVLink
    pcie = get_template("pcie-8gpu", "T4").bandwidth_gbps()
    assert pcie[0, 1] == pytest.approx(PCIE_X16_GBPS[3])  # PIX gets the full gen3 x16 peak
    assert pcie[0, 1] > pcie[0, 2] > pcie[0, 4]  # PIX > PXB > SYS
    assert get_template("pcie-8gpu", "A10").bandwidth_gbps()[0, 1] == pytest.approx(31.5)


def test_labels_round_trip_and_bad_labels():
    for lvl in list(LinkLevel)[:6]:
        assert parse_link_label(link_label(lvl)) == (int(lvl), 0)
    assert parse_link_label("nv12") == (int(LinkLevel.NV), 12)
    with pytest.raises(ConfigError, match="unknown link label 'PCI'"):
        parse_link_label("PCI")


def test_template_validation_names_the_problem():
    level = np.full((2, 2), LinkLevel.PIX, dtype=np.int8)
    np.fill_diagonal(level, LinkLevel.X)
    nv = np.array([[0, 1], [0, 0]], dtype=np.int8)
    with pytest.raises(ConfigError, match="not symmetric"):
        NodeTemplate("bad", "T4", 2, level, nv, [0, 0], [0, 1])
    with pytest.raises(ConfigError, match="numa has shape"):
        NodeTemplate("bad", "T4", 2, level, np.zeros((2, 2)), [0, 0, 0], [0, 1])


def test_nvidia_smi_topo_rendering_parses_back():
    t = get_template("dgx1-v100")
    text = nvidia_smi_topo(t)
    lines = text.splitlines()
    assert lines[0].split()[:8] == [f"GPU{i}" for i in range(8)]
    assert "CPU Affinity" in lines[0] and "NUMA Affinity" in lines[0]
    for i in range(8):
        cells = lines[1 + i].split()
        assert cells[0] == f"GPU{i}"
        assert cells[1:9] == t.labels()[i]
        assert cells[-1] == str(t.numa[i])
    assert "Legend:" in text and "NV#" in text


def test_rca_host_templates_follow_the_fleet_templates():
    from fleetmind.data.topology import rca_host_templates

    hosts = rca_host_templates()
    dgx1 = hosts["dgx1-v100"]
    pairs = {link[1]: link[2] for link in dgx1.links}
    assert set(pairs) == NV1 | NV2
    assert all(pairs[p] == "NV2" for p in NV2) and all(pairs[p] == "NV1" for p in NV1)
    pcie = hosts["pcie-l40s-8"]
    assert {link[1] for link in pcie.links} == PIX and all(link[2] == "PIX" for link in pcie.links)


def test_generic_pcie_names_and_bad_sizes():
    t = get_template("pcie-3gpu:T4")
    assert t.n_gpus == 3 and list(t.numa) == [0, 0, 1] and t.level[0, 1] == LinkLevel.PIX
    with pytest.raises(ConfigError, match="1..16 GPUs"):
        get_template("pcie-20gpu")
