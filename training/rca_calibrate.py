"""``fleetmind rca calibrate``: fit the GAT's score temperature on a validation split.

Reads a dataset folder (``fleetmind rca generate`` / ``benchmarks.rca.gat_dataset``), runs the model
(a local artifact folder, an MLflow model URI, or the released one) on the fit split (``val`` by
default), fits one temperature by the true root's negative log-likelihood
(:func:`fleetmind.rca.calibration.fit_temperature`), and reports the top score's expected
calibration error before and after on every split asked for. ``--write`` stores the temperature,
what it was fitted on and the figures in a local artifact folder's ``config.json`` under
``calibration``; :class:`fleetmind.rca.gat_analyzer.GATAnalyzer` applies it on load. The ranking
is unchanged (a temperature is monotone); only the scores move. ``fleetmind rca train`` calibrates
the artifact it registers through the same :func:`fit_calibration` and :func:`write_calibration`.

A fit split with fewer than :data:`MIN_FIT_INCIDENTS` usable incidents is refused
(:class:`TooFewToFit`), and a fitted temperature on a bound of the search range
(:data:`fleetmind.rca.calibration.T_MIN`, ``T_MAX``) draws a warning on stderr: the likelihood
kept improving past it (e.g. every root ranked first), so the temperature is an artefact of the
range, not a fit.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from fleetmind.data.errors import DataError, FleetMindError
from fleetmind.data.mlflow_store import is_mlflow_uri
from fleetmind.data.paths import refuse_write_into_installed_package
from fleetmind.data.rca_dataset import RCADataset, load_dataset
from fleetmind.progress import progress_disable, show_bar
from fleetmind.rca.calibration import T_MAX, T_MIN, fit_temperature, reliability, top1
from fleetmind.rca.gat_analyzer import RELEASED_DIR, GATAnalyzer
from fleetmind.training.io import write_json, write_text_whole

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
                "few incidents), so it is no calibration"
            )
    return None


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Flags of ``fleetmind rca calibrate``."""
    p.add_argument("--data", required=True, help="dataset folder with the fit split")
    p.add_argument(
        "--model",
        default=None,
        help="local artifact folder or MLflow model URI (default: the released models/rca); "
        "--write edits a local folder's config.json",
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
        "--write",
        action="store_true",
        help="store the temperature in the artifact's config.json (--model's folder; without "
        "--model the released model's, which only a source checkout may change)",
    )
    p.add_argument("--json", default=None, help="write the figures here")


class TooFewToFit(DataError):
    """A fit split with fewer than :data:`MIN_FIT_INCIDENTS` usable incidents (``n``: how many)."""

    def __init__(self, message: str, n: int) -> None:
        super().__init__(message)
        self.n = n


def require_enough(n: int, split: str, data: str | Path, which: str = "", hint: str = "") -> None:
    """Raise :class:`TooFewToFit` for a fit split of fewer than :data:`MIN_FIT_INCIDENTS`
    incidents (``which``: what counted them; ``hint``: what to do, in brackets at the end)."""
    if n < MIN_FIT_INCIDENTS:
        noun = "incident" if n == 1 else "incidents"
        raise TooFewToFit(
            f"split {split!r} of {data} has {n} {noun}{which}; fitting a temperature needs at "
            f"least {MIN_FIT_INCIDENTS}" + (f" ({hint})" if hint else ""),
            n,
        )


def incident_logits(
    gat: GATAnalyzer, ds: RCADataset, incidents: Sequence[Mapping[str, Any]]
) -> tuple[list[np.ndarray], list[int]]:
    """``(logits, targets)`` of ``incidents`` (graphs from ``ds``): the candidate subgraph's
    logits after the lone-alert rule (:meth:`GATAnalyzer.crop_logits_many`, as the service ranks)
    and the root's index among the candidates, ``-1`` when it is not one."""
    items = [(ds.graph_of(i), i["alerts"]) for i in incidents]
    out = gat.crop_logits_many(items)
    targets = []
    for inc, (keep, _) in zip(incidents, out, strict=True):
        root = ds.graph_of(inc).index.get(str(inc["root_cause"]), -1)
        hit = (keep == root).nonzero()[0]
        targets.append(int(hit[0]) if hit.size else -1)
    return [z for _, z in out], targets


def fit_calibration(
    gat: GATAnalyzer,
    ds: RCADataset,
    fit: Sequence[Mapping[str, Any]],
    evals: Mapping[str, Sequence[Mapping[str, Any]]],
    split: str,
    data: str | Path,
    bins: int = 10,
    hint: str = "",
    progress: bool = True,
) -> tuple[dict[str, Any], str | None]:
    """Fit the temperature on the incidents ``fit`` and report the top score's ECE before and
    after on them and on each of ``evals`` (split name -> incidents); ``rca calibrate`` and
    ``rca train`` both calibrate through here.

    Args:
        gat: the model, loaded as the service loads it (lone-alert rule on).
        ds: the dataset the incidents come from (their graphs).
        fit: the fit split's incidents; only those with their root among the candidates count.
        evals: other splits to report on (a key equal to ``split`` is skipped).
        split: the fit split's name (the report's first key, and ``fitted_on.split``).
        data: the dataset folder, for messages and ``fitted_on.data`` (its name).
        bins: confidence bins of the ECE.
        hint: what to do about too few incidents (see :func:`require_enough`).
        progress: show a progress bar over the splits on stderr (wherever stderr goes;
            ``TQDM_DISABLE`` turns it off).

    Returns:
        ``(payload, warning)``: the ``rca calibrate --json`` payload (``model``, ``temperature``,
        ``fitted_on``, ``bins``, ``date`` (the UTC date), ``splits``; ECE in probability units) and
        :func:`bound_warning`'s line or ``None``.

    Raises:
        TooFewToFit: fewer than :data:`MIN_FIT_INCIDENTS` fit incidents with their root among the
            candidates.
    """
    named = {split: fit, **{s: incs for s, incs in evals.items() if s != split}}
    data_of = {
        s: incident_logits(gat, ds, incs)
        for s, incs in tqdm(
            named.items(), desc="rca calibrate", unit="split", disable=progress_disable(progress)
        )
    }
    z, y = data_of[split]
    fit_z = [zi for zi, yi in zip(z, y, strict=True) if yi >= 0]
    fit_y = [yi for yi in y if yi >= 0]
    require_enough(len(fit_z), split, data, " with their root among the candidates", hint)
    t = fit_temperature(fit_z, fit_y)
    report: dict[str, Any] = {}
    for s, (zs, ys) in data_of.items():
        before = reliability(*top1(zs, ys, 1.0), n_bins=bins)
        after = reliability(*top1(zs, ys, t), n_bins=bins)
        report[s] = {"uncalibrated": before.to_dict(), "calibrated": after.to_dict()}
    payload = {
        "model": gat.version,
        "temperature": round(t, 4),
        "fitted_on": {
            "data": Path(data).name,
            "split": split,
            "n": len(fit_z),
            "generator": ds.meta.get("equivalent_command") or ds.meta.get("generator"),
        },
        "bins": bins,
        "date": dt.datetime.now(dt.UTC).date().isoformat(),  # UTC, as the provenance stamps
        "splits": report,
    }
    return payload, bound_warning(t)


def calibration_record(payload: Mapping[str, Any]) -> dict[str, Any]:
    """The ``calibration`` entry of an artifact's ``config.json`` from :func:`fit_calibration`'s
    payload: the temperature, what it was fitted on, the date, and per split the top score's ECE
    uncalibrated and calibrated (probability units) with its incident count."""
    return {
        "temperature": payload["temperature"],
        "fitted_on": dict(payload["fitted_on"]),
        "date": payload["date"],
        "ece": {
            s: {
                "uncalibrated": r["uncalibrated"]["ece"],
                "calibrated": r["calibrated"]["ece"],
                "n": r["calibrated"]["n"],
            }
            for s, r in payload["splits"].items()
        },
    }


def write_calibration(
    folder: str | Path, record: Mapping[str, Any] | None, reason: str | None = None
) -> None:
    """Store ``record`` (:func:`calibration_record`) as ``calibration`` in ``folder``'s
    ``config.json``; ``None`` stores ``calibration: null`` (scores at ``T = 1``) and ``reason``
    under ``calibration_skipped``."""
    path = Path(folder) / "config.json"
    meta = json.loads(path.read_text())
    meta["calibration"] = None if record is None else dict(record)
    meta.pop("calibration_skipped", None)
    if record is None and reason:
        meta["calibration_skipped"] = reason
    write_text_whole(path, json.dumps(meta, indent=2) + "\n")  # a failed write keeps the old


def calibrate(args: argparse.Namespace) -> dict[str, Any]:
    """Fit and report; returns the JSON payload (see the module docstring)."""
    ref = str(args.model) if args.model else None
    if args.write:
        _check_writable(ref)
    if args.bins < 2:
        raise FleetMindError(f"--bins must be at least 2, got {args.bins}")
    ds = load_dataset(args.data)
    if args.split not in ds.splits:
        raise FleetMindError(f"{args.data} has no {args.split!r} split (has {sorted(ds.splits)})")
    hint = "generate more, or pick a larger --split"
    require_enough(len(ds.split(args.split)), args.split, args.data, "", hint)
    evals = (
        args.eval_splits
        if args.eval_splits is not None
        else [s for s in ds.splits if s not in ("train", args.split)]
    )
    missing = [s for s in evals if s not in ds.splits]
    if missing:
        raise FleetMindError(f"{args.data} has no split(s) {missing} (has {sorted(ds.splits)})")
    gat = GATAnalyzer.load(ref)
    payload, warning = fit_calibration(
        gat,
        ds,
        ds.split(args.split),
        {s: ds.split(s) for s in evals},
        args.split,
        args.data,
        bins=args.bins,
        hint=hint,
        progress=show_bar(),  # no bar frames in a log file
    )
    if warning is not None:
        print(
            f"fleetmind: warning: {warning}; check the ECE figures before --write", file=sys.stderr
        )
    if args.write:
        write_calibration(ref or RELEASED_DIR, calibration_record(payload))
    return payload


def _check_writable(ref: str | None) -> None:
    """Refuse ``--write`` to anything but a local artifact folder, saying what to do instead."""
    if ref is not None and is_mlflow_uri(ref):
        raise FleetMindError(
            f"--write edits a local artifact folder; {ref} is an MLflow model, whose registered "
            "files cannot change: `fleetmind rca train` registers versions already calibrated on "
            "their validation split; to recalibrate, --write the run's local artifact folder "
            "(<--out>/<run name>/model) and serve that folder (without --write, a URI is reported on)"
        )
    folder = Path(ref) if ref else RELEASED_DIR
    if ref is None:  # in a pip install the released model is the installed package's file
        refuse_write_into_installed_package(
            folder,
            "--write without --model",
            f"copy {folder} to a folder of your own and pass that folder with --model",
        )
    if not (folder / "config.json").is_file():
        raise FleetMindError(f"--write needs a local artifact folder; {folder} has no config.json")


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
        folder = Path(args.model) if args.model else RELEASED_DIR
        print(f"wrote calibration into {(folder / 'config.json').resolve()}")
    write_json(args.json, payload)
    return 0
