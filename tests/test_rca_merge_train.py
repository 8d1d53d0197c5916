"""Merging another generator seed's training topologies into a GAT benchmark folder
(``benchmarks/rca/merge_train.py``): validation and test stay byte-identical, the added graphs and
incidents are renamed so nothing collides, and held-out seeds are refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.rca.gat_dataset import main as build
from benchmarks.rca.merge_train import merge
from fleetmind.data.rca_dataset import load_dataset


def _folder(root: Path, name: str, seed: int, **caps: int) -> Path:
    out = root / name
    args = ["--out", str(out), "--seed", str(seed), "--incidents", "150", "--workers", "1"]
    args += ["--train-per-graph", "2", "--large", "0"]
    for k, v in caps.items():
        args += [f"--{k}", str(v)]
    assert build(args) == 0
    return out


def test_merge_adds_renamed_train_topologies_and_keeps_the_rest(tmp_path: Path) -> None:
    base = _folder(tmp_path, "base", 0, val=4, test=4)
    add = _folder(tmp_path, "add", 3, val=0, test=0)
    (base / ".gat_cache").mkdir()
    (base / ".gat_cache" / "features-x.pt").write_bytes(b"stale")
    out = tmp_path / "merged"
    counts = merge(base, [add], out, forbid={1})
    before, extra = load_dataset(base), load_dataset(add, ["train"])
    merged = load_dataset(out)
    assert counts["train"] == len(before.split("train")) + len(extra.split("train"))
    assert not (out / ".gat_cache").exists()  # the base's feature cache is not copied
    for split in ("val", "test"):
        assert (out / f"{split}.jsonl").read_bytes() == (base / f"{split}.jsonl").read_bytes()
    added = [i for i in merged.split("train") if i["graph"].startswith("s3-")]
    assert len(added) == len(extra.split("train")) > 0
    assert all(i["id"].startswith("s3-") for i in added)
    # the renamed graph is the added seed's graph: same nodes, and the root is one of them
    g = merged.graph_of(added[0])
    assert g.name == added[0]["graph"]
    assert [n.id for n in g.nodes] == [n.id for n in extra.graphs[added[0]["graph"][3:]].nodes]


def test_merge_refuses_held_out_or_own_seed_and_an_existing_folder(tmp_path: Path) -> None:
    base = _folder(tmp_path, "base", 0, val=0, test=0)
    held = _folder(tmp_path, "held", 1, val=0, test=0)
    with pytest.raises(ValueError, match="held out"):
        merge(base, [held], tmp_path / "m1", forbid={1})
    with pytest.raises(ValueError, match="held out or the base's own"):
        merge(base, [base], tmp_path / "m2", forbid=set())
    with pytest.raises(ValueError, match="exists"):
        merge(base, [held], base, forbid=set())
