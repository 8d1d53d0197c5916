"""Learnability probe for an RCA dataset: is the root identifiable from its alert neighbourhood?

Not the GAT: a gradient-boosted tree classifier (scikit-learn) on hand-built 2-hop features that a
2-3 layer message-passing model can represent. Per candidate node (alerting nodes and their 1-hop
neighbours): node kind, in/out degree, alerting in/out neighbours, minutes between its first alert and
the end of the window, and bags of alert tokens (``alertname`` or ``alertname:xid``) at the node, its
dependencies, its dependents and the four 2-hop compositions. Trained on ``train`` (negatives
subsampled to 30 %), scored as AC@1 (argmax per incident) on held-out topologies. If this probe
reaches AC@1 >= 0.9, the signal is there for the GAT.

Run: ``python -m benchmarks.rca.learnability DATA [--train 1500] [--eval 400]`` -> JSON in
``benchmarks/results/rca/rca_learnability_<name>.json``.
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import datetime
from pathlib import Path

from benchmarks.provenance import RESULTS, load_now, provenance
from fleetmind import argtypes
from fleetmind.cli.runner import run_main


def _ts(s: str) -> float:
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("data")
    ap.add_argument(
        "--train", type=argtypes.positive_int, default=1500, help="training incidents used"
    )
    ap.add_argument(
        "--eval", type=argtypes.positive_int, default=400, help="incidents per evaluated split"
    )
    ap.add_argument("--splits", nargs="+", default=["test", "test_large"])
    ap.add_argument("--name", default=None, help="result name (default: the data folder's name)")
    args = ap.parse_args()

    import numpy as np
    import scipy.sparse as sp
    from sklearn.ensemble import HistGradientBoostingClassifier

    from fleetmind.data.graph import NODE_KINDS
    from fleetmind.data.rca_dataset import load_dataset
    from fleetmind.rca.baselines import alerts_by_node

    load0 = load_now()
    ds = load_dataset(args.data, splits=["train", *args.splits])
    train = ds.splits["train"][: args.train]

    def tok(a: dict) -> str:
        lab = a["labels"]
        return lab["alertname"] + (":" + lab["xid"] if "xid" in lab else "")

    vocab: dict[str, int] = {}
    for inc in train:
        for a in inc["alerts"]:
            vocab.setdefault(tok(a), len(vocab))
    n_tok = len(vocab)
    adj: dict[str, tuple] = {}

    def feats(inc: dict):  # noqa: ANN202
        g = ds.graphs[inc["graph"]]
        n = g.num_nodes
        if g.name not in adj:
            down = sp.csr_matrix(
                (np.ones(g.num_edges), (g.edge_index[0], g.edge_index[1])), shape=(n, n)
            )
            adj[g.name] = (down, down.T.tocsr())
        down, up = adj[g.name]
        by = alerts_by_node(g, inc["alerts"])
        wend = _ts(inc["window"]["end"])
        rows, cols = [], []
        tfirst = np.full(n, -1.0)
        for i, al in by.items():
            for a in al:
                j = vocab.get(tok(a))
                if j is not None:
                    rows.append(i)
                    cols.append(j)
                age = (wend - _ts(a["startsAt"])) / 60.0
                tfirst[i] = max(tfirst[i], age)
        x = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(n, n_tok))
        cand: set[int] = set(by)
        for i in by:
            cand.update(down[i].indices.tolist())
            cand.update(up[i].indices.tolist())
        c = np.array(sorted(cand))
        xd, xu = down @ x, up @ x
        al = np.zeros(n)
        al[list(by)] = 1.0
        deg_d, deg_u = np.diff(down.indptr), np.diff(up.indptr)
        ad, au = down @ al, up @ al
        kind = np.eye(len(NODE_KINDS))[g.node_type]
        dense = np.column_stack(
            [kind[c], deg_d[c], deg_u[c], ad[c], au[c], tfirst[c], au[c] / np.maximum(deg_u[c], 1)]
        )
        z = sp.hstack(
            [
                x[c],
                xd[c],
                xu[c],
                (down @ xd)[c],
                (up @ xu)[c],
                (up @ xd)[c],
                (down @ xu)[c],
                sp.csr_matrix(dense),
            ]
        ).tocsr()
        y = (c == g.index[inc["root_cause"]]).astype(int)
        return z, y

    t0 = time.perf_counter()
    zs, ys = [], []
    for inc in train:
        z, y = feats(inc)
        zs.append(z)
        ys.append(y)
    X = sp.vstack(zs).tocsr()
    y = np.concatenate(ys)
    keep = (y == 1) | (np.random.default_rng(0).random(len(y)) < 0.3)
    X, y = X[keep].toarray(), y[keep]
    clf = HistGradientBoostingClassifier(
        max_iter=150, learning_rate=0.1, max_leaf_nodes=63, random_state=0
    ).fit(X, y)
    fit_s = time.perf_counter() - t0
    out: dict = {}
    for split in args.splits:
        hits, miss = [], {}
        for inc in ds.splits[split][: args.eval]:
            z, yv = feats(inc)
            p = clf.predict_proba(z.toarray())[:, 1]
            ok = bool(yv.any() and yv[int(np.argmax(p))] == 1)
            hits.append(ok)
            if not ok:
                miss[inc["fault_type"]] = miss.get(inc["fault_type"], 0) + 1
        out[split] = {
            "n": len(hits),
            "ac@1": float(np.mean(hits)),
            "misses_by_fault_type": dict(sorted(miss.items())),
        }
        print(split, out[split])
    name = args.name or Path(args.data).name
    res = {
        "benchmark": "rca_learnability_probe",
        **provenance(__spec__.name, load_start=load0, packages=("scikit-learn",)),
        "data": str(args.data),
        "data_meta": {k: ds.meta.get(k) for k in ("seed", "n_incidents", "sim")},
        "train_incidents": len(train),
        "train_rows": int(len(y)),
        "features": int(X.shape[1]),
        "featurize_and_fit_s": round(fit_s, 1),
        "results": out,
    }
    path = RESULTS / "rca" / f"rca_learnability_{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    raise SystemExit(run_main(main, prog="benchmarks.rca.learnability"))
