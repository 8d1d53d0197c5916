"""Thinned storms (``fleetmind.rca.thinning``): training copies with the root's alerts and a few
other alerting nodes, and their place in the GAT's training data."""

from __future__ import annotations

import numpy as np
import pytest
from gat_helpers import toy_dataset, toy_graph, toy_incident

from fleetmind.errors import ConfigError
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


def test_the_gbdt_baseline_trains_on_the_same_thinned_copies_and_refits_keep_the_share(
    tmp_path, monkeypatch
) -> None:
    """``benchmarks.rca.gat_neighbours tune-gbdt --thin-share`` gives ``hop2_gbdt`` the copies the
    GAT's data module adds (same function, same seed), records the share, and a ``--refit-from``
    with another share is refused: a paired comparison must not mix recipes silently."""
    import json

    from benchmarks.rca import gat_neighbours
    from fleetmind.data.rca_dataset import load_dataset
    from fleetmind.rca.gbdt import GBDTAnalyzer

    data = toy_dataset(tmp_path / "ds", n_train=40, n_val=10, n_test=4)
    ds = load_dataset(data, ["train"])
    want = len(ds.split("train")) + len(thinned_copies(ds.split("train"), ds.graphs, 0.5, 3))
    assert want > len(ds.split("train"))
    seen: list[list] = []
    train = GBDTAnalyzer.train

    def spy(self, incidents, graphs):
        seen.append(list(incidents))
        return train(self, incidents, graphs)

    monkeypatch.setattr(GBDTAnalyzer, "train", spy)
    small = '{"max_iter": 20, "learning_rate": 0.1, "max_leaf_nodes": 15, "neg_rate": 0.3}'
    common = ["--data", str(data), "--gbdts", "hop2_gbdt", "--configs", "1", "--first", small]
    w = tmp_path / "w"
    args = ["tune-gbdt", "--work", str(w), *common, "--train-seed", "3", "--thin-share", "0.5"]
    assert gat_neighbours.main(args) == 0
    assert len(seen[0]) == want
    rec = json.loads((w / "tune-gbdt.json").read_text())["hop2_gbdt"]
    assert rec["thin_share"] == 0.5 and rec["trials"][0]["thin_share"] == 0.5
    with pytest.raises(ConfigError, match="same share"):  # one line under run_main
        gat_neighbours.main(
            ["tune-gbdt", "--work", str(tmp_path / "r"), *common, "--refit-from", str(w)]
        )
    with pytest.raises(SystemExit):  # argparse: a share outside [0, 1]
        gat_neighbours.main(["tune-gbdt", "--work", str(w), *common, "--thin-share", "2"])
