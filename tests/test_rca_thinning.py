"""Thinned storms (``fleetmind.rca.thinning``): training copies with the root's alerts and a few
other alerting nodes, and their place in the GAT's training data."""

from __future__ import annotations

import numpy as np
import pytest
from gat_helpers import toy_dataset, toy_graph, toy_incident

from fleetmind.rca.thinning import thin_incident, thinned_copies


def _nodes(graph, alerts) -> list:
    return [graph.node_for_alert(a["labels"]) for a in alerts]


def test_a_thinned_copy_keeps_the_root_and_at_most_max_others_alerting_nodes() -> None:
    g = toy_graph("g", 2, 2, 2, 4)
    rng = np.random.default_rng(0)
    seen_k = set()
    for i in range(200):
        inc = toy_incident(g, rng, i)
        copy = thin_incident(inc, g, np.random.default_rng(i), max_others=2)
        before = _nodes(g, inc["alerts"])
        root = inc["root_cause"]
        others = {n for n in before if n is not None and n != root}
        if copy is None:  # nothing would remain: a silent root and no other alerting node
            assert root not in before and not others
            continue
        after = _nodes(g, copy["alerts"])
        kept = set(after) - {root}
        assert None not in after and kept <= others and len(kept) <= 2
        # every alert of a kept node stays, in the original order; the root's own alerts all stay
        pairs = zip(before, inc["alerts"], strict=True)
        assert copy["alerts"] == [a for n, a in pairs if n in kept | {root}]
        if root not in before:
            assert kept, "a silent root keeps at least one other alerting node"
        assert (copy["root_cause"], copy["graph"], copy["fault_type"]) == (
            root, inc["graph"], inc["fault_type"]
        )  # fmt: skip
        seen_k.add(len(kept))
    assert seen_k == {0, 1, 2}


def test_copies_are_seeded_and_sized_by_the_share() -> None:
    g = toy_graph("g", 1, 2, 2, 3)
    rng = np.random.default_rng(1)
    incs = [toy_incident(g, rng, i) for i in range(40)]
    a = thinned_copies(incs, {"g": g}, 0.5, seed=3)
    assert a == thinned_copies(incs, {"g": g}, 0.5, seed=3)
    assert a != thinned_copies(incs, {"g": g}, 0.5, seed=4)
    assert 0 < len(a) <= 20 and thinned_copies(incs, {"g": g}, 0.0, seed=3) == []
    with pytest.raises(ValueError, match="thin share"):
        thinned_copies(incs, {"g": g}, 1.5, seed=0)


def test_the_data_module_adds_thinned_training_graphs_only(tmp_path) -> None:
    from fleetmind.rca.lightning_module import RCADataModule

    data = toy_dataset(tmp_path / "toy", n_train=30, n_val=8, n_test=8)
    plain = RCADataModule(data, use_cache=False)
    plain.setup()
    thin = RCADataModule(data, use_cache=False, thin_share=0.5)
    thin.setup()
    n = thin.info["n_thinned"]
    assert plain.info["n_thinned"] == 0 and 0 < n <= 15
    assert len(thin.train_data) == len(plain.train_data) + n - (
        thin.info["train_root_outside_crop"] - plain.info["train_root_outside_crop"]
    )
    assert [d.x.shape for d in thin.val_data] == [d.x.shape for d in plain.val_data]
    assert thin.info["n_train"] == plain.info["n_train"] == 30
    # thinned storms are smaller graphs after the crop than their full incidents, on the whole
    assert np.mean([d.num_nodes for d in thin.train_data[-n:]]) < np.mean(
        [d.num_nodes for d in plain.train_data]
    )


def test_a_share_outside_zero_to_one_is_a_one_line_cli_error(tmp_path, capsys) -> None:
    from fleetmind.cli import main

    data = toy_dataset(tmp_path / "toy", n_train=4, n_val=2, n_test=2)
    rc = main(["rca", "train", "--data", str(data), "--thin-share", "1.5", "--no-register"])
    err = capsys.readouterr().err
    assert rc != 0 and "--thin-share must lie in [0, 1], got 1.5" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
