"""``fleetmind rca fit`` on PetShop ``low_traffic`` (fit, then every method on all 26 issues) and the fit
time on a generated 50-service system; writes JSON with machine, versions, command and commit.

Usage::

    python -m benchmarks.rca.fit petshop [--scenario DIR] [--out benchmarks/results/rca/petshop_fit_low_traffic.json]
    python -m benchmarks.rca.fit fit-time [--services 50] [--out benchmarks/results/rca/rca_fit_time.json]

``petshop`` fits the model (reading only ``graph.csv`` and ``noissue/metrics.csv``), then runs
``fleetmind rca petshop --model`` once, with every method (zero-shot GAT, propagation, traversal, BARO,
NSigma, simulated-data baselines) and bootstrap intervals. ``fit-time`` times ``fleetmind rca fit`` with
the default settings on a generated system (``data.synth_system.make_system``: 1-minute rows, five
metrics per service, 7 days of normal data would be 10,080 rows; 1,440 are used, one day). Both report
wall time and the process CPU time (on a shared machine wall time is mostly waiting; CPU time divided by
the cores used is what a dedicated machine would take).
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.provenance import RESULTS, load_now, provenance
from fleetmind import argtypes
from fleetmind.cli import main as cli
from fleetmind.cli.runner import run_main
from fleetmind.data.paths import shared_data_dir
from fleetmind.data.synth_system import make_system
from fleetmind.training.rca_fit import FitArgs, fit


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    p1 = sub.add_parser("petshop")
    p1.add_argument("--scenario", default=None)
    p1.add_argument(
        "--out",
        type=argtypes.output_file,
        default=str(RESULTS / "rca" / "petshop_fit_low_traffic.json"),
    )
    p1.add_argument("--model-out", default=None, help="keep the fitted model here")
    p2 = sub.add_parser("fit-time")
    p2.add_argument("--services", type=argtypes.positive_int, default=50)
    p2.add_argument("--rows", type=argtypes.positive_int, default=1440)
    p2.add_argument(
        "--out", type=argtypes.output_file, default=str(RESULTS / "rca" / "rca_fit_time.json")
    )
    args = ap.parse_args(argv)

    load0 = load_now()
    out: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        if args.what == "petshop":
            scen = Path(args.scenario or shared_data_dir("petshop") / "petshop" / "low_traffic")
            model = Path(args.model_out or Path(tmp) / "model")
            t0, c0 = time.perf_counter(), _cpu_s()
            res = fit(FitArgs(scenario=str(scen), out=str(model)), progress=True)
            out["fit"] = {
                k: res[k] for k in ("version", "metrics", "counts", "timing_s", "settings")
            }
            out["fit"]["wall_s"] = time.perf_counter() - t0
            out["fit"]["cpu_s"] = _cpu_s() - c0
            ev = Path(tmp) / "eval.json"
            rc = cli(
                [
                    "rca",
                    "petshop",
                    "--scenario",
                    str(scen),
                    "--model",
                    str(model),
                    "--json",
                    str(ev),
                ]
            )
            if rc != 0:
                return rc
            out["evaluation"] = json.loads(ev.read_text())
            out["evaluations_on_labels"] = 1
        else:
            scen = Path(tmp) / f"system{args.services}"
            make_system(scen, n_services=args.services, normal_rows=args.rows, issues=0, seed=0)
            t0, c0 = time.perf_counter(), _cpu_s()
            res = fit(FitArgs(scenario=str(scen), out=str(Path(tmp) / "m")), progress=True)
            out["system"] = {"services": args.services, "normal_rows": args.rows, "metrics": 5}
            out["fit"] = {
                k: res[k] for k in ("version", "metrics", "counts", "timing_s", "settings")
            }
            out["fit"]["wall_s"] = time.perf_counter() - t0
            out["fit"]["cpu_s"] = _cpu_s() - c0
            out["target"] = {"fit_minutes_on_2_cores": 10}
    out = {**provenance(__spec__.name, argv, load_start=load0, packages=("pandas",)), **out}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main, prog="benchmarks.rca.fit"))
