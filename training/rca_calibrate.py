"""``fleetmind rca calibrate``: fit the GAT's score temperature on a validation split.

Reads a dataset folder (``fleetmind rca generate`` / ``benchmarks.rca.gat_dataset``), runs the model
on the fit split (``val`` by default), fits one temperature by the true root's negative
log-likelihood (:func:`fleetmind.rca.calibration.fit_temperature`), and reports the top score's
expected calibration error before and after on every split asked for. ``--write`` stores the
temperature, what it was fitted on and the figures in the artifact's ``config.json`` under
``calibration``; :class:`fleetmind.rca.gat_analyzer.GATAnalyzer` applies it on load. The ranking
is unchanged (a temperature is monotone); only the scores move.

A fit split with fewer than :data:`MIN_FIT_INCIDENTS` usable incidents is refused, and a fitted
temperature on a bound of the search range (:data:`fleetmind.rca.calibration.T_MIN`, ``T_MAX``)
draws a warning on stderr: the likelihood kept improving past it (e.g. every root ranked first),
so the temperature is an artefact of the range, not a fit.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import sys
from pathlib import Path
from typing import Any

from tqdm import tqdm

from fleetmind.data.errors import DataError, FleetMindError
from fleetmind.data.rca_dataset import load_dataset
from fleetmind.rca.calibration import T_MAX, T_MIN, fit_temperature, reliability, top1
from fleetmind.rca.gat_analyzer import RELEASED_DIR, GATAnalyzer
from fleetmind.training.io import write_json

MIN_FIT_INCIDENTS = 30
"""The fewest incidents (with their root among the candidates) a temperature is fitted on: on
fewer, a handful of logits decide it (one perfectly ranked incident drives it to ``T_MIN``)."""


def bound_warning(t: float) -> str | None:
    """One line when temperature ``t`` lies on a bound of the search range (within 0.1 % of it),
    else ``None``."""
    for bound, name in ((T_MIN, "T_MIN"), (T_MAX, "T_MAX")):
        if abs(math.log(t / bound)) < 1e-3:
            return (
                f"the fitted temperature {t:.4f} lies on the search bound {name} = {bound:g}: the "
                "fit split's likelihood kept improving past it (all roots ranked first, or too "
                "few incidents), so it is no calibration; check the ECE figures before --write"
            )
    return None


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Flags of ``fleetmind rca calibrate``."""
    p.add_argument("--data", required=True, help="dataset folder with the fit split")
    p.add_argument(
        "--model",
        default=None,
        help="local artifact folder (default: the released models/rca); --write edits its config.json",
    )
    p.add_argument(
        "--split", default="val", help="split the temperature is fitted on (default val)"
    )
    p.add_argument(
        "--eval-splits",
        nargs="*",
        default=None,
        help="splits to report ECE on (default: every other split in --data but train)",
    )
    p.add_argument("--bins", type=int, default=10, help="confidence bins of the ECE (default 10)")
    p.add_argument(
        "--write", action="store_true", help="store the temperature in the artifact's config.json"
    )
    p.add_argument("--json", default=None, help="write the figures here")


def _split_logits(gat: Any, ds: Any, split: str) -> tuple[list[Any], list[int]]:
    incs = ds.split(split)
    items = [(ds.graph_of(i), i["alerts"]) for i in incs]
    out = gat.crop_logits_many(items)
    targets = []
    for inc, (keep, _) in zip(incs, out, strict=True):
        root = ds.graph_of(inc).index.get(str(inc["root_cause"]), -1)
        hit = (keep == root).nonzero()[0]
        targets.append(int(hit[0]) if hit.size else -1)
    return [z for _, z in out], targets


def calibrate(args: argparse.Namespace) -> dict[str, Any]:
    """Fit and report; returns the JSON payload (see the module docstring)."""
    folder = Path(args.model) if args.model else RELEASED_DIR
    if args.write and not (folder / "config.json").is_file():
        raise FleetMindError(f"--write needs a local artifact folder; {folder} has no config.json")
    if args.bins < 2:
        raise FleetMindError(f"--bins must be at least 2, got {args.bins}")
    ds = load_dataset(args.data)
    if args.split not in ds.splits:
        raise FleetMindError(f"{args.data} has no {args.split!r} split (has {sorted(ds.splits)})")
    _require_enough(args, len(ds.split(args.split)), "")
    evals = (
        args.eval_splits
        if args.eval_splits is not None
        else [s for s in ds.splits if s not in ("train", args.split)]
    )
    missing = [s for s in evals if s not in ds.splits]
    if missing:
        raise FleetMindError(f"{args.data} has no split(s) {missing} (has {sorted(ds.splits)})")
    meta = json.loads((folder / "config.json").read_text()) if args.write else None
    gat = GATAnalyzer.load(str(folder))
    splits = [args.split, *[s for s in evals if s != args.split]]
    data = {s: _split_logits(gat, ds, s) for s in tqdm(splits, desc="rca calibrate", unit="split")}
    z, y = data[args.split]
    fit_z = [zi for zi, yi in zip(z, y, strict=True) if yi >= 0]
    fit_y = [yi for yi in y if yi >= 0]
    if not fit_z:
        raise FleetMindError(
            f"no incident of split {args.split!r} has its root among the candidates"
        )
    _require_enough(args, len(fit_z), " with their root among the candidates")
    t = fit_temperature(fit_z, fit_y)
    warning = bound_warning(t)
    if warning is not None:
        print(f"fleetmind: warning: {warning}", file=sys.stderr)
    report: dict[str, Any] = {}
    for s in splits:
        zs, ys = data[s]
        before = reliability(*top1(zs, ys, 1.0), n_bins=args.bins)
        after = reliability(*top1(zs, ys, t), n_bins=args.bins)
        report[s] = {"uncalibrated": before.to_dict(), "calibrated": after.to_dict()}
    payload = {
        "model": gat.version,
        "temperature": round(t, 4),
        "fitted_on": {
            "data": Path(args.data).name,
            "split": args.split,
            "n": len(fit_z),
            "generator": ds.meta.get("equivalent_command") or ds.meta.get("generator"),
        },
        "bins": args.bins,
        "date": dt.date.today().isoformat(),
        "splits": report,
    }
    if args.write and meta is not None:
        meta["calibration"] = {
            "temperature": payload["temperature"],
            "fitted_on": payload["fitted_on"],
            "date": payload["date"],
            "ece": {
                s: {
                    "uncalibrated": r["uncalibrated"]["ece"],
                    "calibrated": r["calibrated"]["ece"],
                    "n": r["calibrated"]["n"],
                }
                for s, r in report.items()
            },
        }
        (folder / "config.json").write_text(json.dumps(meta, indent=2) + "\n")
    return payload


def _require_enough(args: argparse.Namespace, n: int, which: str) -> None:
    """Refuse a fit split of fewer than :data:`MIN_FIT_INCIDENTS` incidents (``which``: what
    counted them)."""
    if n < MIN_FIT_INCIDENTS:
        noun = "incident" if n == 1 else "incidents"
        raise DataError(
            f"split {args.split!r} of {args.data} has {n} {noun}{which}; fitting a temperature "
            f"needs at least {MIN_FIT_INCIDENTS} (generate more, or pick a larger --split)"
        )


def run(args: argparse.Namespace) -> int:
    """CLI handler: print a table, write JSON and (with ``--write``) the artifact."""
    payload = calibrate(args)
    print(
        f"temperature {payload['temperature']:.4f} (fitted on {args.split}, "
        f"{payload['fitted_on']['n']} incidents)"
    )
    print(
        f"{'split':<12} {'n':>6} {'AC@1':>6} {'ECE before':>11} {'ECE after':>10} {'mean score':>11}"
    )
    for s, r in payload["splits"].items():
        b, a = r["uncalibrated"], r["calibrated"]
        print(
            f"{s:<12} {a['n']:>6} {a['accuracy']:>6.3f} {b['ece']:>11.4f} {a['ece']:>10.4f} "
            f"{a['mean_confidence']:>11.3f}"
        )
    if args.write:
        print(
            f"wrote calibration into {(Path(args.model) if args.model else 'models/rca')}/config.json"
        )
    write_json(args.json, payload)
    return 0
