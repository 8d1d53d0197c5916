"""Lightning training of the GAT ranker: incident -> PyG ``Data``, a DataModule and a LightningModule.

* :func:`incident_to_data` turns one incident (graph + alerts + ground truth) into a ``Data`` with
  ``x (|V|, F)``, ``edge_index (2, |E|)``, ``edge_type (|E|,)``, ``root_index (1,)`` (incremented on
  batching, so it stays a global node index) and ``fault (1,)``.
* :class:`RCADataModule` reads a dataset folder (:mod:`fleetmind.data.rca_dataset`), computes features once and
  serves seeded, shuffled PyG ``DataLoader`` batches of many graphs.
* :class:`GATLightning` wraps :class:`fleetmind.rca.model.GATRanker` with one shared step per stage that logs
  ``{stage}/loss``, ``{stage}/rank_loss``, ``{stage}/fault_loss``, ``{stage}/ac1``, ``{stage}/ac3``,
  ``{stage}/mrr`` and ``{stage}/fault_acc`` per epoch.
* :func:`crop_incident` and :class:`CroppedIncident` live in :mod:`fleetmind.rca.crop` (NumPy
  only, so ranking does not import Lightning) and are re-exported here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
from torch_geometric.data import Data
from torch_geometric.loader import DataLoader

from fleetmind.data.errors import DataError
from fleetmind.data.graph import DependencyGraph
from fleetmind.data.rca_dataset import load_dataset
from fleetmind.progress import bar_disable
from fleetmind.rca.crop import CroppedIncident as CroppedIncident
from fleetmind.rca.crop import crop_incident as crop_incident
from fleetmind.rca.features.layout import FEATURE_VERSION
from fleetmind.rca.features.neighbours import neighbour_inputs
from fleetmind.rca.gat_analyzer import UNKNOWN_FAULT
from fleetmind.rca.model import GATConfig, GATRanker, input_width, listwise_loss, root_ranks
from fleetmind.rca.thinning import thinned_copies


def incident_to_data(
    graph: DependencyGraph,
    alerts: Sequence[Mapping[str, Any]],
    root: str | None = None,
    fault: int = -1,
    crop_hops: int | None = None,
    neighbours: bool = False,
) -> Data:
    """Build the PyG ``Data`` of one incident.

    Args:
        graph: the incident's dependency graph.
        alerts: its Alertmanager alerts.
        root: ground-truth root-cause node id (``None`` at inference).
        fault: fault-type class id (``-1`` when unknown).
        crop_hops: keep only the candidate subgraph (nodes within this many hops of a node with a
            recent alert, see :func:`fleetmind.rca.features.dense.candidate_mask`); ``None`` keeps the whole graph.
        neighbours: append :mod:`fleetmind.rca.features.neighbours`'s node columns to ``x`` and
            add its per-edge rows as ``edge_attr (|E|, NUM_EDGE_FEATURES)``.

    Returns:
        ``Data(x, edge_index, edge_type, num_nodes)`` (and ``edge_attr`` with ``neighbours``) plus, with a ``root``, ``root_index (1,)``,
        ``fault (1,)`` and ``root_missing (1,)`` (True when the root fell outside the crop; then
        ``root_index`` points at node 0 and the incident counts as a miss).
    """
    c = crop_incident(graph, alerts, crop_hops)
    x = c.x
    extra: dict[str, torch.Tensor] = {}
    if neighbours:
        node, edge = neighbour_inputs(graph, alerts, c.x, c.keep, c.edge_index)
        x = np.concatenate([c.x, node], axis=1)
        extra["edge_attr"] = torch.from_numpy(edge)
    d = Data(
        x=torch.from_numpy(np.ascontiguousarray(x)),
        edge_index=torch.from_numpy(np.ascontiguousarray(c.edge_index)),
        edge_type=torch.from_numpy(np.ascontiguousarray(c.edge_type)),
        num_nodes=c.x.shape[0],
        **extra,
    )
    if root is not None:
        r = graph.index[root]
        pos = int(np.searchsorted(c.keep, r))
        missing = pos >= c.keep.size or c.keep[pos] != r
        d.root_index = torch.tensor([0 if missing else pos], dtype=torch.long)
        d.fault = torch.tensor([fault], dtype=torch.long)
        d.root_missing = torch.tensor([missing], dtype=torch.bool)
    return d


def incidents_to_data(
    incidents: Sequence[Mapping[str, Any]],
    graphs: Mapping[str, DependencyGraph],
    fault_types: Sequence[str],
    progress: bool = False,
    desc: str = "features",
    crop_hops: int | None = None,
    neighbours: bool = False,
) -> list[Data]:
    """Features of many incidents (a fault type outside ``fault_types``, or none, gets class
    ``-1``: the incident trains the ranking only)."""
    from tqdm.auto import tqdm

    fidx = {f: i for i, f in enumerate(fault_types)}
    out = []
    for inc in tqdm(incidents, desc=desc, disable=bar_disable(progress), leave=False):
        g = graphs[inc["graph"]]
        fault = fidx.get(inc.get("fault_type"), -1)
        out.append(
            incident_to_data(g, inc["alerts"], inc["root_cause"], fault, crop_hops, neighbours)
        )
    return out


def _edge_attr(batch: Data) -> torch.Tensor | None:
    """The batch's per-edge inputs (``None`` for data without them)."""
    return getattr(batch, "edge_attr", None)


MISSING_RANK = 10**6
"""Rank given to an incident whose root fell outside the candidate subgraph."""
NO_FAULT_TYPE = (None, "", UNKNOWN_FAULT)
"""``fault_type`` values that name no fault type (the incident trains the ranking only)."""


def fault_classes(incidents: Sequence[Mapping[str, Any]]) -> list[str]:
    """The fault-head classes of a training set: its incidents' fault types, sorted. An incident
    without one (feedback that named none: ``None``) or typed
    :data:`fleetmind.rca.gat_analyzer.UNKNOWN_FAULT` gets class ``-1`` and trains the ranking
    only: ``unknown`` says that no type is known, and a class of its own would teach the head to
    answer it for every cause."""
    return sorted(
        {str(f) for inc in incidents if (f := inc.get("fault_type")) not in NO_FAULT_TYPE}
    )


def feedback_id(incident: Mapping[str, Any]) -> str | None:
    """The feedback incident id of a training line that :func:`fleetmind.training.rca_feedback.merge_feedback`
    added (its ``feedback.id``, the same for each copy), ``None`` for a dataset's own incident."""
    fb = incident.get("feedback")
    return str(fb.get("id", incident["id"])) if isinstance(fb, Mapping) else None


class RCADataModule(pl.LightningDataModule):
    """Graph batches from an RCA dataset folder.

    The folder's ``train`` and ``val`` splits are used as they are (they hold different topologies when
    made by ``fleetmind rca generate``); a folder without ``val`` gets a seeded split of the training
    **graphs** (``val_fraction`` of them), so validation still measures unseen topologies. Every other
    split (``test``, ``test_large``, ...) is exposed through :attr:`test_sets`.

    Feedback lines of ``train`` (those :func:`fleetmind.training.rca_feedback.merge_feedback`
    marks with a ``feedback`` key) are always trained on: the validation graphs are drawn from
    the dataset's own incidents only, ``max_train`` subsamples those only, and the feedback is
    added after both. :attr:`feedback` says which were kept and which were dropped (root outside
    the candidate subgraph), by incident id; :attr:`feedback_data` holds one ``Data`` of each
    kept one (to report how well the model fits them).

    Args:
        data_dir: the dataset folder.
        batch_size: graphs per batch.
        seed: seeds the val split and the shuffling of training batches.
        val_fraction: share of training graphs held out when the folder has no ``val`` split.
        max_train: use at most this many of the dataset's own training incidents (seeded
            subsample; ``None``: all); feedback lines are kept whatever this is.
        progress: show a progress bar while computing features.
        crop_hops: candidate subgraph radius (:func:`fleetmind.rca.features.dense.candidate_mask`), the same at
            training and inference (stored in the model config). Training incidents whose root
            falls outside are dropped; in validation and test they count as misses.
        use_cache: keep computed features in ``DIR/.gat_cache/`` (keyed by the feature version,
            these settings and the split files' sizes and mtimes) and reuse them.
        neighbours: also compute :mod:`fleetmind.rca.features.neighbours`'s inputs (for a
            ``neighbours`` model).
        thin_share: add thinned copies (:func:`fleetmind.rca.thinning.thinned_copies`, the
            root's alerts and 0-3 other alerting nodes) of this share of the training incidents;
            validation and test splits are never thinned.
    """

    def __init__(
        self,
        data_dir: str | Path,
        batch_size: int = 32,
        seed: int = 0,
        val_fraction: float = 0.15,
        max_train: int | None = None,
        progress: bool = False,
        crop_hops: int | None = 1,
        use_cache: bool = True,
        neighbours: bool = False,
        thin_share: float = 0.0,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.data_dir = Path(data_dir)
        self.batch_size = batch_size
        self.seed = seed
        self.val_fraction = val_fraction
        self.max_train = max_train
        self.progress = progress
        self.crop_hops = crop_hops
        self.use_cache = use_cache
        self.neighbours = neighbours
        self.thin_share = thin_share
        self.fault_types: list[str] = []
        self.train_data: list[Data] = []
        self.val_data: list[Data] = []
        self.test_sets: dict[str, list[Data]] = {}
        self.info: dict[str, Any] = {}
        self.feedback: dict[str, Any] = {}
        self.feedback_data: list[Data] = []
        self._ready = False

    def _cache_path(self) -> Path | None:
        """Feature cache file for this folder + settings (``None`` when the folder is read-only)."""
        import hashlib
        import json

        files = sorted(self.data_dir.glob("*.jsonl"))
        key = {
            "v": FEATURE_VERSION,
            "crop": self.crop_hops,
            "seed": self.seed,
            "max_train": self.max_train,
            "val_fraction": self.val_fraction,
            "split_rule": 2,  # feedback kept out of validation and subsampling; catalog classes
            **({"neighbours": True} if self.neighbours else {}),
            **({"thin_share": self.thin_share} if self.thin_share else {}),
            "files": [(f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in files],
        }
        h = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
        d = self.data_dir / ".gat_cache"
        try:
            d.mkdir(exist_ok=True)
        except OSError:
            return None
        return d / f"features-{h}.pt"

    def setup(self, stage: str | None = None) -> None:
        """Read the folder and compute features (cached in ``DIR/.gat_cache/`` per settings)."""
        if self._ready:
            return
        cache = self._cache_path() if self.use_cache else None
        if cache is not None and cache.is_file():
            try:
                blob = torch.load(cache, weights_only=False)
                self.fault_types = blob["fault_types"]
                self.train_data, self.val_data = blob["train"], blob["val"]
                self.test_sets, self.info = blob["test_sets"], blob["info"]
                self.feedback, self.feedback_data = blob["feedback"], blob["feedback_data"]
                self._ready = True
                return
            except Exception:  # a stale or broken cache is recomputed
                pass
        self._compute()
        if cache is not None:
            blob = {
                "fault_types": self.fault_types,
                "train": self.train_data,
                "val": self.val_data,
                "test_sets": self.test_sets,
                "info": self.info,
                "feedback": self.feedback,
                "feedback_data": self.feedback_data,
            }
            # under DDP every rank computes the same features; one writes the cache, atomically
            if int(os.environ.get("LOCAL_RANK", "0") or 0) == 0:
                tmp = cache.with_suffix(f".tmp{os.getpid()}")
                try:
                    torch.save(blob, tmp)
                    os.replace(tmp, cache)
                except OSError:
                    tmp.unlink(missing_ok=True)

    def _splits(self, ds: Any, rng: np.random.Generator) -> tuple[list[dict], list[dict]]:
        """``(train, val)`` incidents: the folder's ``val`` or held-out training graphs, drawn
        (like the ``max_train`` subsample) from the dataset's own incidents only; the feedback
        lines of ``train`` are appended to training after both."""
        train = [inc for inc in ds.splits["train"] if feedback_id(inc) is None]
        feedback = [inc for inc in ds.splits["train"] if feedback_id(inc) is not None]
        if "val" in ds.splits and ds.splits["val"]:
            val = list(ds.splits["val"])
        else:
            names = sorted({inc["graph"] for inc in train})
            rng.shuffle(names)
            n_val = max(1, int(round(self.val_fraction * len(names)))) if len(names) > 1 else 0
            held = set(names[:n_val])
            val = [inc for inc in train if inc["graph"] in held]
            train = [inc for inc in train if inc["graph"] not in held]
        if not (train or feedback) or not val:
            raise DataError(f"dataset {self.data_dir}: need training and validation incidents")
        if self.max_train is not None and len(train) > self.max_train:
            keep = np.sort(rng.choice(len(train), size=self.max_train, replace=False))
            train = [train[i] for i in keep]
        return train + feedback, val

    def _compute(self) -> None:

        ds = load_dataset(self.data_dir)
        if "train" not in ds.splits:
            raise DataError(f"dataset {self.data_dir} has no train.jsonl")
        rng = np.random.default_rng(self.seed)
        train, val = self._splits(ds, rng)
        self.fault_types = fault_classes(train)
        g = ds.graphs
        thinned = thinned_copies(train, g, self.thin_share, self.seed)
        ch = self.crop_hops
        ft, pb, nb = self.fault_types, self.progress, self.neighbours
        train_data = incidents_to_data(train + thinned, g, ft, pb, "train features", ch, nb)
        self.train_data = [d for d in train_data if not bool(d.root_missing)]
        self._feedback_outcome(train, train_data)
        self.val_data = incidents_to_data(val, g, ft, pb, "val features", ch, nb)
        self.test_sets = {
            name: incidents_to_data(incs, g, ft, pb, f"{name} features", ch, nb)
            for name, incs in ds.splits.items()
            if name not in ("train", "val") and incs
        }
        self.info = {
            "n_train": len(train),
            "n_val": len(val),
            "train_graphs": len({i["graph"] for i in train}),
            "val_graphs": len({i["graph"] for i in val}),
            "n_thinned": len(thinned),
            "train_root_outside_crop": len(train_data) - len(self.train_data),
            "crop_hops": ch,
            **{f"n_{k}": len(v) for k, v in self.test_sets.items()},
        }
        if self.feedback:
            self.info["n_feedback"] = len(self.feedback["incidents"])
            self.info["feedback_root_outside_crop"] = len(self.feedback["dropped"])
        self._ready = True

    def _feedback_outcome(self, train: Sequence[Mapping[str, Any]], data: Sequence[Data]) -> None:
        """Fill :attr:`feedback` and :attr:`feedback_data` from the training incidents and their
        ``Data`` (the first ``len(train)`` of ``data``, in the same order)."""
        kept: dict[str, Data] = {}
        dropped: set[str] = set()
        copies = [0, 0]  # kept, dropped
        for inc, d in zip(train, data[: len(train)], strict=True):
            fid = feedback_id(inc)
            if fid is None:
                continue
            missing = bool(d.root_missing)
            copies[missing] += 1
            if missing:
                dropped.add(fid)
            else:
                kept.setdefault(fid, d)
        if not (kept or dropped):
            self.feedback, self.feedback_data = {}, []
            return
        self.feedback = {
            "incidents": sorted(kept),
            "copies": copies[0],
            "dropped": sorted(dropped),
            "dropped_copies": copies[1],
        }
        self.feedback_data = [kept[k] for k in sorted(kept)]

    def train_dataloader(self) -> DataLoader:
        gen = torch.Generator().manual_seed(self.seed)
        return DataLoader(self.train_data, batch_size=self.batch_size, shuffle=True, generator=gen)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_data, batch_size=self.batch_size * 2)

    def test_dataloader(self, name: str = "test") -> DataLoader:
        return DataLoader(self.test_sets[name], batch_size=self.batch_size * 2)


class GATLightning(pl.LightningModule):
    """LightningModule of the GAT root-cause ranker.

    Args:
        fault_types: fault type names (class ids of the fault head).
        hidden: hidden channels. heads: attention heads. layers: GATv2 layers. edge_dim: relation
            embedding width. dropout: dropout rate (see :class:`fleetmind.rca.model.GATConfig`).
        lr: AdamW learning rate.
        weight_decay: AdamW weight decay.
        fault_weight: weight of the fault-type cross-entropy in the total loss.
        epochs: planned epochs (cosine learning-rate schedule length).
        crop_hops: candidate subgraph radius stored in the model config (must match the data).
        neighbours: the :class:`fleetmind.rca.model.GATConfig` switch (the data must carry the
            same inputs, see :class:`RCADataModule`).
    """

    def __init__(
        self,
        fault_types: Sequence[str] = (),
        hidden: int = 32,
        heads: int = 4,
        layers: int = 3,
        edge_dim: int = 16,
        dropout: float = 0.1,
        lr: float = 3e-3,
        weight_decay: float = 1e-4,
        fault_weight: float = 0.5,
        epochs: int = 30,
        crop_hops: int | None = 1,
        neighbours: bool = False,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.model = GATRanker(
            GATConfig(
                hidden=hidden,
                heads=heads,
                layers=layers,
                edge_dim=edge_dim,
                dropout=dropout,
                fault_types=list(fault_types),
                crop_hops=crop_hops,
                in_dim=input_width(neighbours),
                neighbours=neighbours,
            )
        )

    def forward(self, batch: Data) -> torch.Tensor:
        """Root-cause logits ``(|V|,)`` of a batch."""
        return self.model(
            batch.x, batch.edge_index, batch.edge_type, batch.batch, edge_attr=_edge_attr(batch)
        )[0]

    def _shared_step(self, batch: Data, stage: str) -> torch.Tensor:
        logits, h, _ = self.model(
            batch.x, batch.edge_index, batch.edge_type, batch.batch, edge_attr=_edge_attr(batch)
        )
        present = ~batch.root_missing
        rank_loss = listwise_loss(logits, batch.batch, batch.root_index[present])
        known = (batch.fault >= 0) & present
        if known.any() and self.model.config.fault_types:
            fl = self.model.fault_logits(h, batch.root_index[known], batch.batch)
            fault_loss = torch.nn.functional.cross_entropy(fl, batch.fault[known])
            fault_acc = (fl.argmax(-1) == batch.fault[known]).float().mean()
        else:
            # no typed incident in the batch: a zero loss through the head all the same, so that
            # under DDP every parameter gets its gradient (DDP stops on parameters a step left out)
            fault_loss = self.model.fault_logits(h, batch.root_index[:1], batch.batch).sum() * 0
            fault_acc = logits.new_zeros(())
        loss = rank_loss + self.hparams.fault_weight * fault_loss
        with torch.no_grad():
            ranks = root_ranks(logits.detach(), batch.batch, batch.root_index).float()
            ranks[batch.root_missing] = float(MISSING_RANK)
        n = batch.num_graphs
        on_step = stage == "train"
        # sync_dist: under DDP each rank sees its own shard; epoch metrics are reduced over ranks
        # (weighted by batch size) so the checkpoint and early stopping monitor the same number
        log = {"batch_size": n, "on_epoch": True, "on_step": False, "sync_dist": True}
        self.log(f"{stage}/loss", loss, prog_bar=True, **log)
        self.log(f"{stage}/rank_loss", rank_loss, **log)
        self.log(f"{stage}/fault_loss", fault_loss, **log)
        self.log(f"{stage}/fault_acc", fault_acc, **log)
        self.log(f"{stage}/ac1", (ranks < 1).float().mean(), prog_bar=not on_step, **log)
        self.log(f"{stage}/ac3", (ranks < 3).float().mean(), **log)
        self.log(f"{stage}/mrr", (1.0 / (ranks + 1)).mean(), **log)
        return loss

    def training_step(self, batch: Data, batch_idx: int) -> torch.Tensor:
        return self._shared_step(batch, "train")

    def validation_step(self, batch: Data, batch_idx: int) -> torch.Tensor:
        return self._shared_step(batch, "val")

    def test_step(self, batch: Data, batch_idx: int) -> torch.Tensor:
        return self._shared_step(batch, "test")

    def configure_optimizers(self) -> Any:
        opt = torch.optim.AdamW(
            self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay
        )
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(self.hparams.epochs, 1))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "epoch"}}


@torch.no_grad()
def evaluate_ranks(
    model: GATRanker, data: Sequence[Data], batch_size: int = 64
) -> dict[str, float]:
    """AC@1/3/5, Avg@5 and MRR of ``model`` on a list of incident ``Data`` (eval mode, no grad)."""
    was_training = model.training
    model.eval()
    ranks = []
    for batch in DataLoader(list(data), batch_size=batch_size):
        logits, _, _ = model(
            batch.x, batch.edge_index, batch.edge_type, batch.batch, edge_attr=_edge_attr(batch)
        )
        r = root_ranks(logits, batch.batch, batch.root_index)
        r[batch.root_missing] = MISSING_RANK
        ranks.append(r)
    model.train(was_training)
    r = torch.cat(ranks).double() if ranks else torch.zeros(0, dtype=torch.double)
    if r.numel() == 0:
        return {"n": 0}
    ac = {k: float((r < k).double().mean()) for k in (1, 2, 3, 4, 5)}
    return {
        "n": int(r.numel()),
        "ac@1": ac[1],
        "ac@3": ac[3],
        "ac@5": ac[5],
        "avg@5": float(np.mean([ac[k] for k in (1, 2, 3, 4, 5)])),
        "mrr": float((1.0 / (r + 1)).mean()),
    }
