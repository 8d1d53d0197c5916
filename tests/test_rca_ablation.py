"""GAT ablation recipe pieces: feature zeroing, edge removal and bootstrap intervals."""

from __future__ import annotations

import numpy as np
import torch
from torch_geometric.data import Data

from fleetmind.rca.features.layout import FEATURE_NAMES
from fleetmind.rca.model import GATConfig, GATRanker
from fleetmind.training.rca_ablation import _ci, _summary, _variant


def _data(n: int = 5) -> Data:
    g = torch.Generator().manual_seed(0)
    return Data(
        x=torch.rand((n, len(FEATURE_NAMES)), generator=g),
        edge_index=torch.tensor([[0, 1, 2], [1, 2, 3]]),
        edge_type=torch.tensor([0, 1, 2]),
        num_nodes=n,
    )


def test_variants_zero_columns_and_drop_edges_without_touching_the_input() -> None:
    d = _data()
    cols = np.flatnonzero([n.startswith(("name:", "kw:")) for n in FEATURE_NAMES])
    (z,) = _variant([d], cols, drop_edges=False)
    assert float(z.x[:, cols].abs().sum()) == 0.0
    keep = np.setdiff1d(np.arange(len(FEATURE_NAMES)), cols)
    assert torch.equal(z.x[:, keep], d.x[:, keep]) and d.x[:, cols].abs().sum() > 0
    (e,) = _variant([d], None, drop_edges=True)
    assert e.edge_index.shape == (2, 0) and d.edge_index.shape == (2, 3)
    # without edges a node's score depends on its own features only (a per-node network)
    m = GATRanker(GATConfig(fault_types=["a"])).eval()
    x2 = e.x.clone()
    x2[4] += 1.0
    with torch.no_grad():
        a = m(e.x, e.edge_index, e.edge_type)[0]
        b = m(x2, e.edge_index, e.edge_type)[0]
    assert torch.allclose(a[:4], b[:4]) and not torch.allclose(a[4], b[4])


def test_bootstrap_interval_brackets_the_estimate() -> None:
    ranks = np.array([0, 0, 1, 5, 0, 2, 0, 0, 9, 0] * 5, dtype=float)
    s = _summary(ranks, 500, 0)
    lo, hi = s["ci95"]["ac@1"]
    assert lo <= s["ac@1"] <= hi and hi - lo > 0.05
    assert _ci(np.zeros(10), 1, 100, 0) == [1.0, 1.0]
    assert _summary(np.zeros(0), 10, 0) == {"n": 0}


def test_untyped_incidents_are_no_fault_class() -> None:
    """Feedback that named no fault type (``fault_type`` null, ``rca_feedback.merge_feedback``)
    is no class of the fault head, as in training (``fault_classes``), never one named "None"."""
    from fleetmind.training.rca_ablation import _fault_labels

    train = [{"fault_type": "gpu_xid"}, {"fault_type": None}, {"fault_type": "oom"}]
    classes, faults = _fault_labels({"train": train, "test": [{"fault_type": None}]})
    assert classes == ["gpu_xid", "oom"]
    assert faults["train"].tolist() == ["gpu_xid", "", "oom"] and faults["test"].tolist() == [""]
