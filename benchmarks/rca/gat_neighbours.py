"""The GAT with and without neighbour comparisons against ``hop2_gbdt`` and ``node_gbdt``, each tuned
on the validation split with the same budget (the same number of configurations), on simulated
incidents: held-out topologies of the training seed and a held-out generator seed.

Usage (three phases; each writes ``WORK/<phase>.json``, the last one the result)::

    python -m benchmarks.rca.gat_neighbours tune-gbdt --data DIR --work WORK [--configs 3]
    python -m benchmarks.rca.gat_neighbours tune-gat --data DIR --work WORK [--configs 3] \
        [--variants neighbours base] [--epochs 10]
    python -m benchmarks.rca.gat_neighbours evaluate --data DIR --work WORK \
        --test DIR:test --test HELDOUT:test --json benchmarks/results/rca/gat_neighbours.json

**Budget.** Every tuned method gets ``--configs`` configurations: the first is its shipped default
(the released GAT's hyper-parameters; ``GBDTConfig()``), the others are drawn without replacement
from its grid (:data:`GAT_GRID`, :data:`GBDT_GRID`) with ``numpy.random.default_rng(seed)``. Each
configuration is trained once, seed 0, on the folder's ``train`` split; the one with the highest
validation AC@1 (ties: MRR) is kept. Nothing is chosen on a test split. The wall-clock of each fit is
recorded (on a shared machine it says more about the load than about the method).

**Thinned storms.** ``--thin-share S`` trains both learners on the training split plus the same
seeded thinned copies (:func:`fleetmind.rca.thinning.thinned_copies`, drawn with ``--train-seed``; the
GAT through ``fleetmind rca train --thin-share``); validation and tests are never thinned. The share
is recorded in each trial's configuration.

**Scoring.** A root outside a method's candidates counts as a miss. AC@1, AC@3 and MRR come with
95 % percentile-bootstrap intervals over incidents (2,000 resamples, seeded), and the paired
difference GAT - ``hop2_gbdt`` in AC@1 with its own interval (the same resampled incidents for both).
A tie at the top counts in the root's favour (``ac@1``, the rule of every comparison made with this
file); ``ac@1_ties_shared`` counts a tie of ``k`` candidates as ``1/k`` of a hit (:func:`tie_shares`),
which is what a random tie-break earns on average. The GBDT's tree probabilities tie (1-4 of 504
test incidents per fit have the root tied first); the GAT's rarely do (symmetric candidates with the
same inputs and neighbourhood: at most one incident per fit and test set), so the first rule credits
mostly the GBDT with its coin flips.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import joblib
import numpy as np

from benchmarks.provenance import load_now, provenance
from fleetmind import argtypes
from fleetmind.cli.runner import run_main
from fleetmind.errors import ConfigError

GAT_GRID: dict[str, list[Any]] = {
    "hidden": [32, 48, 64],
    "lr": [1e-3, 3e-3, 5e-3],
    "dropout": [0.0, 0.1, 0.2],
    "weight_decay": [1e-4, 1e-3],
}
"""GAT hyper-parameters searched (the released model: hidden 32, lr 3e-3, dropout 0.1, wd 1e-4)."""

GAT_DEFAULT = {"hidden": 32, "lr": 3e-3, "dropout": 0.1, "weight_decay": 1e-4}

GBDT_GRID: dict[str, list[Any]] = {
    "max_iter": [100, 150, 300],
    "learning_rate": [0.05, 0.1, 0.2],
    "max_leaf_nodes": [15, 31, 63],
    "neg_rate": [0.3, 0.6, 1.0],
}
"""``HistGradientBoostingClassifier`` settings and the negative sampling rate searched."""

GBDT_DEFAULT = {"max_iter": 150, "learning_rate": 0.1, "max_leaf_nodes": 63, "neg_rate": 0.3}


def draw_configs(
    grid: dict[str, list[Any]], default: dict[str, Any], k: int, seed: int
) -> list[dict[str, Any]]:
    """``default`` then ``k - 1`` other distinct grid points, drawn with ``default_rng(seed)``."""
    rng = np.random.default_rng(seed)
    keys = sorted(grid)
    out = [dict(default)]
    seen = {tuple(default[x] for x in keys)}
    tries = 0
    while len(out) < k and tries < 10_000:
        tries += 1
        c = {x: grid[x][int(rng.integers(len(grid[x])))] for x in keys}
        t = tuple(c[x] for x in keys)
        if t not in seen:
            seen.add(t)
            out.append(c)
    return out


def rank_metrics(ranks: np.ndarray) -> dict[str, float]:
    """AC@1, AC@3, MRR of 0-based ranks (``-1``: root not ranked, a miss)."""
    hit = ranks >= 0
    return {
        "n": int(ranks.size),
        "ac@1": float(np.mean(hit & (ranks < 1))),
        "ac@3": float(np.mean(hit & (ranks < 3))),
        "mrr": float(np.mean(np.where(hit, 1.0 / (np.maximum(ranks, 0) + 1.0), 0.0))),
    }


def gbdt_scores(an: Any, incs: list[dict], ds: Any) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per incident, ``(candidate node indices (m,), probabilities (m,))`` of a GBDT analyzer."""
    return [tuple(an.scores(ds.graph_of(inc), inc["alerts"])[:2]) for inc in incs]


def gat_scores(gat: Any, incs: list[dict], ds: Any) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per incident, ``(kept node indices (m,), log-softmax of the logits (m,))`` of a GAT."""
    items = [(ds.graph_of(i), i["alerts"]) for i in incs]
    out = []
    for keep, z in gat.crop_logits_many(items):
        z = np.asarray(z, dtype=np.float64)
        out.append((np.asarray(keep), z - np.logaddexp.reduce(z)))
    return out


def ranks_of(scores: list[tuple[np.ndarray, np.ndarray]], incs: list[dict], ds: Any) -> np.ndarray:
    """0-based rank of each incident's root among its candidates (``-1``: not a candidate);
    ties count in the root's favour, as for every method here."""
    out = []
    for inc, (c, p) in zip(incs, scores, strict=True):
        r = ds.graph_of(inc).index[str(inc["root_cause"])]
        pos = np.flatnonzero(c == r)
        out.append(-1 if pos.size == 0 else int(np.sum(p > p[pos[0]])))
    return np.asarray(out, dtype=np.int64)


def tie_shares(
    scores: list[tuple[np.ndarray, np.ndarray]], incs: list[dict], ds: Any
) -> np.ndarray:
    """Per incident, the share of a hit at rank 1 when ties are broken at random: ``1/k`` when the
    root ties with ``k - 1`` other candidates for the top score, 1 when it tops alone, 0 otherwise
    (not a candidate, or below another). Its mean is the expected AC@1 of a random tie-break; the
    GBDT's tree probabilities tie, the GAT's log-probabilities only for symmetric candidates."""
    out = []
    for inc, (c, p) in zip(incs, scores, strict=True):
        pos = np.flatnonzero(c == ds.graph_of(inc).index[str(inc["root_cause"])])
        if pos.size == 0 or np.any(p > p[pos[0]]):
            out.append(0.0)
        else:
            out.append(1.0 / float(np.sum(p == p[pos[0]])))
    return np.asarray(out, dtype=np.float64)


def mean_scores(
    members: list[list[tuple[np.ndarray, np.ndarray]]],
) -> list[tuple[np.ndarray, np.ndarray]]:
    """The seed ensemble: per incident, the members' scores averaged (GAT: mean log-probability;
    GBDT: mean probability). Every member must rank the same candidates, which holds because the
    candidates come from the graph and the alerts, not from the fit."""
    out = []
    for per in zip(*members, strict=True):
        c0 = per[0][0]
        if any(not np.array_equal(c, c0) for c, _ in per[1:]):
            raise ValueError("ensemble members rank different candidates")
        out.append((c0, np.mean([p for _, p in per], axis=0)))
    return out


def _boot(
    ranks: dict[str, np.ndarray],
    n_boot: int,
    seed: int,
    shares: dict[str, np.ndarray] | None = None,
) -> dict[str, Any]:
    """Intervals of every method's AC@1/AC@3/MRR and of GAT - hop2_gbdt AC@1 (paired); with
    ``shares`` (:func:`tie_shares`, per method), the AC@1 with ties shared and its paired lead too."""
    shares = shares or {}
    rng = np.random.default_rng(seed)
    n = next(iter(ranks.values())).size
    idx = rng.integers(0, n, size=(n_boot, n))
    out: dict[str, Any] = {}
    for name, r in ranks.items():
        hit = r >= 0
        ac1 = (hit & (r < 1)).astype(float)
        ac3 = (hit & (r < 3)).astype(float)
        rr = np.where(hit, 1.0 / (np.maximum(r, 0) + 1.0), 0.0)
        out[name] = {
            **rank_metrics(r),
            **{
                f"{k}_ci95": [float(np.percentile(v[idx].mean(1), q)) for q in (2.5, 97.5)]
                for k, v in (("ac@1", ac1), ("ac@3", ac3), ("mrr", rr))
            },
        }
    for name, r in ranks.items():
        # a GAT fit against the hop2_gbdt fit of the same training seed (``@WORK``), an
        # ensemble against the hop2_gbdt ensemble
        ref = "hop2_gbdt" + (name[name.index("@") :] if "@" in name else "")
        if not (name.startswith("gat") and ref in ranks):
            continue
        d = (r == 0).astype(float) - (ranks[ref] == 0).astype(float)
        out[name]["minus_hop2_gbdt_ac@1"] = float(d.mean())
        out[name]["minus_hop2_gbdt_ac@1_ci95"] = [
            float(np.percentile(d[idx].mean(1), q)) for q in (2.5, 97.5)
        ]
        if name in shares and ref in shares:
            ds_ = shares[name] - shares[ref]
            out[name]["minus_hop2_gbdt_ac@1_ties_shared"] = float(ds_.mean())
            out[name]["minus_hop2_gbdt_ac@1_ties_shared_ci95"] = [
                float(np.percentile(ds_[idx].mean(1), q)) for q in (2.5, 97.5)
            ]
    for name, sh in shares.items():
        out[name]["ac@1_ties_shared"] = float(sh.mean())
    return out


def _configs(
    a: argparse.Namespace,
    phase: str,
    name: str,
    grid: dict[str, list[Any]],
    default: dict[str, Any],
    k: int,
) -> list[dict[str, Any]]:
    """The configurations to try: drawn (:func:`draw_configs`), or with ``--refit-from WORK`` the
    one chosen there (tuned on a smaller set, refitted here)."""
    if a.refit_from:
        rec = json.loads((Path(a.refit_from) / f"{phase}.json").read_text())[name]
        if rec.get("thin_share", 0.0) != a.thin_share:
            raise ConfigError(
                f"{a.refit_from} chose {name} with --thin-share {rec.get('thin_share', 0.0)}; "
                f"refit it with the same share, not {a.thin_share}"
            )
        return [rec["chosen"]]
    if a.first:  # an incumbent chosen earlier stands in for the shipped default
        first = json.loads(a.first)
        if set(first) != set(grid):
            raise ConfigError(f"--first needs exactly the keys {sorted(grid)}")
        default = first
    return draw_configs(grid, default, k, a.seed)


def _thin(a: argparse.Namespace) -> dict[str, float]:
    """The trial record's thinned-storm share (absent when none, as in the older records)."""
    return {"thin_share": a.thin_share} if a.thin_share else {}


def tune_gbdt(a: argparse.Namespace) -> dict[str, Any]:
    from fleetmind.data.rca_dataset import load_dataset
    from fleetmind.rca.gbdt import GBDTAnalyzer, GBDTConfig
    from fleetmind.rca.thinning import thinned_copies

    ds = load_dataset(a.data, ["train", "val"])
    train, val = list(ds.split("train")), ds.split("val")
    train += thinned_copies(train, ds.graphs, a.thin_share, a.train_seed)
    res: dict[str, Any] = {}
    for name, hops in (("hop2_gbdt", 2), ("node_gbdt", 0)):
        if name not in a.gbdts:
            continue
        trials = []
        best_an, best_key = None, (-1.0, -1.0)
        for cfg in _configs(a, "tune-gbdt", name, GBDT_GRID, GBDT_DEFAULT, a.configs):
            t0 = time.perf_counter()
            an = GBDTAnalyzer(
                GBDTConfig(hops=hops, seed=a.train_seed, max_train=10**9, **cfg), name=name
            )
            an.train(train, ds.graphs)
            m = rank_metrics(ranks_of(gbdt_scores(an, val, ds), val, ds))
            trials.append(
                {
                    "config": cfg,
                    **_thin(a),
                    "val": m,
                    "wall_s": round(time.perf_counter() - t0, 1),
                }
            )
            print(name, cfg, m, flush=True)
            if (m["ac@1"], m["mrr"]) > best_key:
                best_an, best_key = an, (m["ac@1"], m["mrr"])
        best = max(trials, key=lambda t: (t["val"]["ac@1"], t["val"]["mrr"]))
        joblib.dump(best_an, Path(a.work) / f"{name}.joblib")
        res[name] = {
            "trials": trials,
            "chosen": best["config"],
            **_thin(a),
            "chosen_val": best["val"],
        }
    return res


def tune_gat(a: argparse.Namespace) -> dict[str, Any]:
    from fleetmind.training.rca_train import Args, run

    res: dict[str, Any] = {}
    runs = Path(a.work) / "runs"
    for variant in a.variants:
        nb = variant == "neighbours"
        k = a.configs if (variant == "neighbours" or a.tune_base) else 1
        trials = []
        for cfg in _configs(a, "tune-gat", f"gat_{variant}", GAT_GRID, GAT_DEFAULT, k):
            t0 = time.perf_counter()
            out = run(
                Args(
                    data=a.data,
                    epochs=a.epochs,
                    seed=a.train_seed,
                    out=str(runs / variant),
                    max_minutes=a.max_minutes,
                    register=False,
                    tracking_uri=f"sqlite:///{Path(a.work).resolve() / 'mlflow.db'}",
                    progress=False,
                    neighbours=nb,
                    thin_share=a.thin_share,
                    **cfg,
                )
            )
            val = out["metrics"]["val"]
            trials.append(
                {
                    "config": cfg,
                    **_thin(a),
                    "val": {k2: val[k2] for k2 in ("n", "ac@1", "ac@3", "mrr")},
                    "epochs": out["epochs"],
                    "artifact": out["artifact"],
                    "wall_s": round(time.perf_counter() - t0, 1),
                }
            )
            print(variant, cfg, trials[-1]["val"], flush=True)
        best = max(trials, key=lambda t: (t["val"]["ac@1"], t["val"]["mrr"]))
        res[f"gat_{variant}"] = {
            "trials": trials,
            "chosen": best["config"],
            **_thin(a),
            "chosen_val": best["val"],
            "artifact": best["artifact"],
        }
    return res


def _fitted(work: Path) -> dict[str, tuple[str, Any]]:
    """The chosen fits a WORK folder holds: ``{method: (kind, analyzer)}``."""
    from fleetmind.rca.gat_analyzer import GATAnalyzer

    methods: dict[str, tuple[str, Any]] = {}
    for name in ("hop2_gbdt", "node_gbdt"):  # the chosen fits, as tune-gbdt saved them
        if (work / f"{name}.joblib").is_file():
            methods[name] = ("gbdt", joblib.load(work / f"{name}.joblib"))
    gt_file = work / "tune-gat.json"
    for name, r in (json.loads(gt_file.read_text()) if gt_file.is_file() else {}).items():
        if isinstance(r, dict) and "artifact" in r:
            methods[name] = ("gat", GATAnalyzer.load(r["artifact"]))
    return methods


def evaluate(a: argparse.Namespace) -> dict[str, Any]:
    """Score WORK's chosen fits and, with ``--member W2 ...``, each method's seed ensemble: the
    same configuration fitted with other ``--train-seed`` values, scores averaged
    (:func:`mean_scores`). Single fits are reported as ``NAME@WORKNAME``, ensembles as ``NAME``
    when there are members."""
    from fleetmind.data.rca_dataset import load_dataset

    works = [Path(a.work), *[Path(m) for m in a.member]]
    fitted = {w: _fitted(w) for w in works}
    tuning: dict[str, Any] = {}
    for w in works:
        for f in ("tune-gbdt.json", "tune-gat.json"):
            if (w / f).is_file():
                for k, v in json.loads((w / f).read_text()).items():
                    if isinstance(v, dict) and "chosen" in v:
                        tuning[f"{k}@{w.name}" if a.member else k] = v
    out: dict[str, Any] = {}
    for spec in a.test:
        folder, split = spec.rsplit(":", 1)
        ds = load_dataset(folder, [split])
        incs = ds.split(split)[: a.limit]
        scores: dict[str, dict[Path, Any]] = {}
        for w in works:
            for name, (kind, an) in fitted[w].items():
                # scores are kept per (fit, test set, limit) so a later run reuses them
                cache = w / f"scores-{name}-{Path(folder).name}-{split}-{a.limit}.joblib"
                t0 = time.perf_counter()
                if cache.is_file():
                    sc = joblib.load(cache)
                else:
                    sc = (gbdt_scores if kind == "gbdt" else gat_scores)(an, incs, ds)
                    joblib.dump(sc, cache)
                scores.setdefault(name, {})[w] = sc
                print(
                    name,
                    w.name,
                    spec,
                    rank_metrics(ranks_of(sc, incs, ds)),
                    f"{time.perf_counter() - t0:.0f}s",
                    flush=True,
                )
        ranks: dict[str, np.ndarray] = {}
        shares: dict[str, np.ndarray] = {}
        for name, per in scores.items():
            if a.member:
                for w, sc in per.items():
                    ranks[f"{name}@{w.name}"] = ranks_of(sc, incs, ds)
                    shares[f"{name}@{w.name}"] = tie_shares(sc, incs, ds)
            ranks[name] = ranks_of(mean_scores(list(per.values())), incs, ds)
            shares[name] = tie_shares(mean_scores(list(per.values())), incs, ds)
        key = f"{Path(folder).name}:{split}"
        out[key] = {
            "data_meta": {k: ds.meta.get(k) for k in ("seed", "equivalent_command")},
            "members": {n: [w.name for w in per] for n, per in scores.items()},
            "methods": _boot(ranks, a.boot, a.seed, shares),
        }
    return {"tuning": tuning, "test": out}


def main(argv: list[str] | None = None) -> int:
    import sys

    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("phase", choices=["tune-gbdt", "tune-gat", "evaluate"])
    ap.add_argument("--data", required=True, help="dataset folder with train and val splits")
    ap.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "gat_neighbours"))
    ap.add_argument(
        "--configs", type=argtypes.positive_int, default=3, help="configurations per tuned method"
    )
    ap.add_argument(
        "--seed", type=argtypes.seed, default=0, help="seed of the draws and the bootstrap"
    )
    ap.add_argument(
        "--train-seed",
        type=argtypes.seed,
        default=0,
        help="seed of every fit (weights, batches, sampling)",
    )
    ap.add_argument("--variants", nargs="+", default=["neighbours", "base"])
    ap.add_argument("--tune-base", action="store_true", help="tune the base GAT too")
    ap.add_argument(
        "--first",
        default=None,
        help="JSON configuration tried first instead of the shipped default (an incumbent)",
    )
    ap.add_argument(
        "--gbdts",
        nargs="+",
        choices=["hop2_gbdt", "node_gbdt"],
        default=["hop2_gbdt", "node_gbdt"],
        help="the GBDT baselines tune-gbdt fits (default both)",
    )
    ap.add_argument("--epochs", type=argtypes.positive_int, default=10)
    ap.add_argument(
        "--refit-from", default=None, help="WORK folder whose chosen configurations to refit"
    )
    ap.add_argument("--max-minutes", type=float, default=12.0)
    ap.add_argument(
        "--thin-share",
        type=float,
        default=0.0,
        help="train both learners on thinned copies of this share of the training incidents too",
    )
    ap.add_argument("--test", action="append", default=[], help="FOLDER:SPLIT to score")
    ap.add_argument(
        "--member",
        action="append",
        default=[],
        help="another WORK folder (the same configurations, another --train-seed) to average with",
    )
    ap.add_argument(
        "--limit", type=argtypes.positive_int, default=None, help="first N incidents of each test"
    )
    ap.add_argument("--boot", type=argtypes.positive_int, default=2000)
    ap.add_argument(
        "--json", type=argtypes.output_file, default=None, help="result file (evaluate)"
    )
    a = ap.parse_args(argv)
    if not 0.0 <= a.thin_share <= 1.0:
        ap.error(f"--thin-share must lie in [0, 1], got {a.thin_share}")
    Path(a.work).mkdir(parents=True, exist_ok=True)
    load0 = load_now()
    fn = {"tune-gbdt": tune_gbdt, "tune-gat": tune_gat, "evaluate": evaluate}[a.phase]
    body = fn(a)
    res = {**provenance(__spec__.name, argv, load_start=load0, packages=("scikit-learn",)), **body}
    (Path(a.work) / f"{a.phase}.json").write_text(json.dumps(res, indent=2) + "\n")
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(res, indent=2) + "\n")
    print(f"wrote {a.work}/{a.phase}.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main, prog="benchmarks.rca.gat_neighbours"))
