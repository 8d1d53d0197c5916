"""GAT ablations: what does the ranker use? One command, JSON with bootstrap 95 % intervals.

    python -m fleetmind.training.rca_ablation --data DIR --json benchmarks/results/rca/rca_ablation_default.json

Variants, each trained from scratch with the same settings (``--epochs``, seed, network size) on the
folder's ``train`` split, best epoch chosen on ``val`` (MRR), scored on ``test``:

* ``full``: the GAT as shipped (same features, same graph);
* ``no_names``: alert-name features zeroed (the ``name:*`` and ``kw:*`` columns of
  :data:`fleetmind.rca.features.FEATURE_NAMES`, in training and test): severities, timing, neighbour
  shares, kinds and degrees remain;
* ``no_edges``: every dependency edge removed, so each node only attends to itself: the same network
  as a per-node MLP over the same features (the features still hold the 1-hop ``nbr:*`` shares the
  feature extractor computes from the graph; a variant with those zeroed too is ``no_edges_no_nbr``);
* ``lofo:<fault>``: trained and validated without incidents of one fault type, scored on the ``test``
  incidents of that type only, beside ``full`` on the same incidents.

Intervals: percentile bootstrap over test incidents (``--boot`` resamples, seeded).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fleetmind.data.rca_dataset import load_dataset
from fleetmind.provenance import load_now, run_provenance
from fleetmind.rca.features.layout import FEATURE_NAMES

LOFO_DEFAULT = ("gpu_ecc_error", "host_not_ready", "network_switch_failure")


def _ci(ranks: np.ndarray, k: int | None, n_boot: int, seed: int) -> list[float]:
    v = (ranks < k).astype(float) if k is not None else 1.0 / (ranks + 1.0)
    if len(v) == 0:
        return [0.0, 0.0]
    idx = np.random.default_rng(seed).integers(0, len(v), size=(n_boot, len(v)))
    m = v[idx].mean(axis=1)
    return [float(np.percentile(m, 2.5)), float(np.percentile(m, 97.5))]


def _summary(ranks: np.ndarray, n_boot: int, seed: int) -> dict[str, Any]:
    """Metrics of 0-based ranks (``MISSING_RANK`` for roots outside the crop) with 95 % intervals."""
    if len(ranks) == 0:
        return {"n": 0}
    return {
        "n": len(ranks),
        "ac@1": float((ranks < 1).mean()),
        "ac@3": float((ranks < 3).mean()),
        "mrr": float((1.0 / (ranks + 1.0)).mean()),
        "ci95": {
            "ac@1": _ci(ranks, 1, n_boot, seed),
            "ac@3": _ci(ranks, 3, n_boot, seed),
            "mrr": _ci(ranks, None, n_boot, seed),
        },
    }


def _ranks(model: Any, data: list) -> np.ndarray:
    import torch
    from torch_geometric.loader import DataLoader

    from fleetmind.rca.lightning_module import MISSING_RANK
    from fleetmind.rca.model import root_ranks

    model.eval()
    out = []
    with torch.no_grad():
        for b in DataLoader(data, batch_size=64):
            logits, _, _ = model(b.x, b.edge_index, b.edge_type, b.batch)
            r = root_ranks(logits, b.batch, b.root_index)
            r[b.root_missing] = MISSING_RANK
            out.append(r)
    return torch.cat(out).double().numpy() if out else np.zeros(0)


def _variant(data: list, zero_cols: np.ndarray | None, drop_edges: bool) -> list:
    import torch

    out = []
    for d in data:
        d = d.clone()
        if zero_cols is not None and len(zero_cols):
            d.x[:, torch.from_numpy(zero_cols)] = 0.0
        if drop_edges:
            d.edge_index = torch.zeros((2, 0), dtype=torch.long)
            d.edge_type = torch.zeros((0,), dtype=torch.long)
        out.append(d)
    return out


def _train(train: list, val: list, fault_types: list[str], a: argparse.Namespace) -> Any:
    """Fit a GAT (GATLightning, best val MRR restored); returns the ``GATRanker``."""
    import pytorch_lightning as pl
    import torch
    from pytorch_lightning.callbacks import ModelCheckpoint
    from torch_geometric.loader import DataLoader

    from fleetmind.rca.lightning_module import GATLightning

    pl.seed_everything(a.seed, workers=True, verbose=False)
    module = GATLightning(fault_types=fault_types, epochs=a.epochs, crop_hops=1)
    ckpt_dir = Path(a.work) / f"ckpt-{time.time_ns()}"
    ckpt = ModelCheckpoint(dirpath=ckpt_dir, monitor="val/mrr", mode="max", save_top_k=1)
    trainer = pl.Trainer(
        max_epochs=a.epochs,
        logger=False,
        callbacks=[ckpt],
        accelerator="cpu",
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    gen = torch.Generator().manual_seed(a.seed)
    trainer.fit(
        module,
        DataLoader(train, batch_size=32, shuffle=True, generator=gen),
        DataLoader(val, batch_size=64),
    )
    if ckpt.best_model_path:
        module = GATLightning.load_from_checkpoint(ckpt.best_model_path, map_location="cpu")
    return module.model


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="dataset folder (train / val / test)")
    ap.add_argument("--json", required=True)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-train", type=int, default=None, help="first N training incidents")
    ap.add_argument("--lofo", nargs="*", default=list(LOFO_DEFAULT), help="left-out fault types")
    ap.add_argument(
        "--variants",
        nargs="*",
        default=["full", "no_names", "no_edges", "no_edges_no_nbr"],
    )
    ap.add_argument("--boot", type=int, default=2000)
    ap.add_argument("--work", default="/tmp/fleetmind-rca-ablation")
    return ap


def _run_variants(
    a: argparse.Namespace,
    feats: dict[str, list],
    fault_types: list[str],
    setups: dict[str, tuple[np.ndarray | None, bool]],
) -> tuple[dict[str, Any], Any]:
    """Train and score each of ``a.variants``; return the summaries by variant and the ``full``
    variant's model (None when not run)."""
    out: dict[str, Any] = {}
    full_model = None
    for v in a.variants:
        cols, drop = setups[v]
        t = time.time()
        model = _train(
            _variant(feats["train_ok"], cols, drop),
            _variant(feats["val"], cols, drop),
            fault_types,
            a,
        )
        r = _ranks(model, _variant(feats["test"], cols, drop))
        out[v] = {**_summary(r, a.boot, a.seed), "train_s": round(time.time() - t, 1)}
        print(f"{v:<18} AC@1 {out[v]['ac@1']:.3f} {out[v]['ci95']['ac@1']}", flush=True)
        if v == "full":
            full_model = model
    return out, full_model


def _run_lofo(
    a: argparse.Namespace,
    feats: dict[str, list],
    faults: dict[str, np.ndarray],
    fault_types: list[str],
    full_model: Any,
) -> dict[str, Any]:
    """Leave each of ``a.lofo`` out of training and validation; score on its test incidents."""
    train_ok_fault = faults["train"][[not bool(d.root_missing) for d in feats["train"]]]
    lofo: dict[str, Any] = {}
    for f in a.lofo:
        t = time.time()
        tr = [d for d, ff in zip(feats["train_ok"], train_ok_fault, strict=True) if ff != f]
        va = [d for d, ff in zip(feats["val"], faults["val"], strict=True) if ff != f]
        te = [d for d, ff in zip(feats["test"], faults["test"], strict=True) if ff == f]
        if not te:
            continue
        # the fault head keeps the left-out class (never a target); only the ranking is scored
        model = _train(tr, va, fault_types, a)
        lofo[f] = {
            "left_out": _summary(_ranks(model, te), a.boot, a.seed),
            "full": _summary(_ranks(full_model, te), a.boot, a.seed) if full_model else None,
            "train_incidents": len(tr),
            "train_s": round(time.time() - t, 1),
        }
        print(f"lofo {f:<24} AC@1 {lofo[f]['left_out']['ac@1']:.3f}", flush=True)
    return lofo


def _fault_labels(
    splits: Mapping[str, Sequence[Mapping[str, Any]]],
) -> tuple[list[str], dict[str, np.ndarray]]:
    """The fault-head classes and each split's fault type per incident.

    Args:
        splits: split name -> incidents; ``"train"`` gives the classes.

    Returns:
        the classes as training makes them (:func:`fleetmind.rca.lightning_module.fault_classes`:
        an untyped incident, e.g. feedback that named no fault type, is no class, never one named
        ``"None"``), and per split an array of fault types, ``""`` for an untyped incident (never
        a class, so ``--lofo`` never leaves it out nor scores it).
    """
    from fleetmind.rca.lightning_module import fault_classes

    def name(inc: Mapping[str, Any]) -> str:
        f = inc.get("fault_type")
        return "" if f is None else str(f)

    faults = {s: np.array([name(i) for i in incs], dtype=str) for s, incs in splits.items()}
    return fault_classes(splits["train"]), faults


def main(argv: list[str] | None = None) -> int:
    a = _parser().parse_args(argv)

    import logging

    import torch

    from fleetmind.rca.lightning_module import incidents_to_data

    for noisy in ("pytorch_lightning", "lightning", "lightning.pytorch", "lightning_fabric"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    torch.set_num_threads(1)
    t0, load0 = time.time(), load_now()
    ds = load_dataset(a.data, ["train", "val", "test"])
    train_inc = ds.split("train")[: a.max_train] if a.max_train else ds.split("train")
    val_inc, test_inc = ds.split("val"), ds.split("test")
    splits = {"train": train_inc, "val": val_inc, "test": test_inc}
    fault_types, faults = _fault_labels(splits)
    feats = {
        name: incidents_to_data(incs, ds.graphs, fault_types, False, name, 1)
        for name, incs in splits.items()
    }
    feats["train_ok"] = [d for d in feats["train"] if not bool(d.root_missing)]
    names = np.array(FEATURE_NAMES)
    name_cols = np.flatnonzero([n.startswith(("name:", "kw:")) for n in names])
    nbr_cols = np.flatnonzero([n.startswith("nbr:") for n in names])
    setups = {
        "full": (None, False),
        "no_names": (name_cols, False),
        "no_edges": (None, True),
        "no_edges_no_nbr": (nbr_cols, True),
    }
    out, full_model = _run_variants(a, feats, fault_types, setups)
    lofo = _run_lofo(a, feats, faults, fault_types, full_model)
    res = {
        "benchmark": "rca_gat_ablation",
        **run_provenance(
            " ".join(["python -m fleetmind.training.rca_ablation", *(argv or sys.argv[1:])]),
            load0,
            ("torch_geometric",),
        ),
        "data": str(a.data),
        "data_meta": {k: ds.meta.get(k) for k in ("seed", "equivalent_command", "caps")},
        "settings": {
            "epochs": a.epochs,
            "seed": a.seed,
            "train_incidents": len(feats["train_ok"]),
            "val_incidents": len(feats["val"]),
            "network": "GATLightning defaults (3 GATv2 layers, hidden 32, 4 heads), crop 1 hop",
            "zeroed_name_columns": int(len(name_cols)),
            "bootstrap": {"resamples": a.boot, "seed": a.seed, "interval": "percentile 95 %"},
        },
        "variants": out,
        "lofo": lofo,
        "seconds": round(time.time() - t0, 1),
    }
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
