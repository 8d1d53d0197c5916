"""``fleetmind fleet show`` and ``fleetmind fleet discover``."""

from __future__ import annotations

import json

import pytest

from fleetmind.cli import main


def test_fleet_show_openb_counts(shared_data, capsys, tmp_path):
    out_json = tmp_path / "fleet.json"
    assert (
        main(["fleet", "show", "--topology", "openb", "--clusters", "2", "--json", str(out_json)])
        == 0
    )
    out = capsys.readouterr().out
    assert "1,213 nodes" in out and "6,212 GPUs" in out
    assert "G2" in out and "4,392" in out  # 549 nodes x 8 GPUs
    assert "GPU0" in out and "NV2" in out and "CPU Affinity" in out  # default: an 8-GPU V100 node
    data = json.loads(out_json.read_text())
    assert data["n_nodes"] == 1213 and data["n_gpus"] == 6212 and data["n_clusters"] == 2
    assert sum(c["gpus"] for c in data["clusters"]) == 6212
    assert data["shown_node"]["template"].startswith("dgx1-v100")


def test_fleet_show_yaml_and_node(capsys, repo_root):
    path = repo_root / "data" / "fleets" / "small.yaml"
    assert main(["fleet", "show", "--topology", str(path), "--node", "lab-t4-1"]) == 0
    out = capsys.readouterr().out
    assert "3 nodes" in out and "16 GPUs" in out and "node lab-t4-1" in out and "PIX" in out


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["fleet", "show", "--topology", "no/such.yaml"], "not found"),
        (["fleet", "show", "--topology", "data/fleets/small.yaml", "--node", "zz"], "unknown node"),
    ],
)
def test_fleet_show_bad_input_exits_2(argv, needle, capsys, monkeypatch, repo_root):
    monkeypatch.chdir(repo_root)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("fleetmind: error:") and needle in err


def test_fleet_discover_without_nvml(capsys, monkeypatch):
    import pynvml

    def boom():
        raise pynvml.NVMLError_LibraryNotFound()

    monkeypatch.setattr(pynvml, "nvmlInit", boom)
    assert main(["fleet", "discover"]) == 2
    err = capsys.readouterr().err
    assert "NVML" in err and "openb" in err
