"""Fidelity of the fgd-mode simulator: our six policies vs the FGD authors' published results.

Runs every openb trace in the shared folder (``default`` on seeds 42-51, the others on
``--other-seeds``, 42-44 by default, to fit the shared 2-core machine) and writes
``benchmarks/results/placement/fgd_fidelity.json`` after each trace, so a partial run keeps what it finished.
``--markdown`` prints the docs table from an existing JSON instead of running.

Usage::

    python -m benchmarks.placement.fgd_fidelity --workers 2
    python -m benchmarks.placement.fgd_fidelity --markdown
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from benchmarks.provenance import RESULTS, load_now, provenance
from fleetmind import argtypes
from fleetmind.cli.runner import run_main
from fleetmind.data.openb import (
    load_fgd_published,
    load_openb_nodes,
    load_openb_trace,
    openb_trace_names,
)
from fleetmind.envs.fgd_mode import evaluate_fgd
from fleetmind.envs.policies import PUBLISHED_POLICIES
from fleetmind.progress import show_bar

OUT = RESULTS / "placement" / "fgd_fidelity.json"


def seeds_of(text: str) -> list[int]:
    lo, _, hi = text.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


def run(args: argparse.Namespace) -> dict:
    traces = args.traces or openb_trace_names()
    published = load_fgd_published()
    nodes = load_openb_nodes()
    payload: dict = {
        **provenance(__spec__.name, load_start=load_now()),
        "published_source": "fgd_published_unallocated.csv (hkust-adsl/kubernetes-scheduler-simulator expected results)",
        "traces": {},
    }
    if args.out.exists() and args.resume:
        payload["traces"] = json.loads(args.out.read_text()).get("traces", {})
    for name in traces:
        if name in payload["traces"]:
            continue
        seeds = seeds_of(args.default_seeds if name == "default" else args.other_seeds)
        t0 = time.perf_counter()
        res = evaluate_fgd(
            load_openb_trace(name),
            list(PUBLISHED_POLICIES),
            seeds,
            nodes=nodes,
            workers=args.workers,
            progress=show_bar(),
        )
        entry: dict = {
            "seeds": seeds,
            "seconds": round(time.perf_counter() - t0, 1),
            "policies": {},
        }
        for pol, m in res["policies"].items():
            row = {
                "ours_100": m["unallocated_gpu_pct_at_100"],
                "ours_100_std": m["unallocated_gpu_pct_at_100_std"],
                "ours_130": m["unallocated_gpu_pct_at_130"],
                "per_seed_100": {
                    s: v["unallocated_gpu_pct_at_100"] for s, v in m["per_seed"].items()
                },
                "ms_per_decision": m["ms_per_decision"],
            }
            pub = published.get((name, pol))
            if pub:
                all_vals = np.array(list(pub.values()))
                same = np.array([pub[s] for s in seeds if s in pub])
                row.update(
                    published_100=round(float(all_vals[:, 0].mean()), 3),
                    published_100_std=round(float(all_vals[:, 0].std(ddof=1)), 3),
                    published_130=round(float(all_vals[:, 1].mean()), 3),
                    published_100_same_seeds=round(float(same[:, 0].mean()), 3)
                    if len(same)
                    else None,
                    diff_100=round(row["ours_100"] - float(all_vals[:, 0].mean()), 3),
                )
            entry["policies"][pol] = row
        payload["traces"][name] = entry
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(payload, indent=2) + "\n")
        print(f"{name}: done in {entry['seconds']} s", flush=True)
    return payload


def markdown(payload: dict) -> str:
    pols = list(PUBLISHED_POLICIES)
    lines = [
        "| trace | seeds | " + " | ".join(pols) + " |",
        "| --- | --- | " + " | ".join("---" for _ in pols) + " |",
    ]
    for name, entry in payload["traces"].items():
        cells = []
        for p in pols:
            r = entry["policies"].get(p, {})
            if "published_100" in r:
                cells.append(
                    f"{r['ours_100']:.2f} / {r['published_100']:.2f} ({r['diff_100']:+.2f})"
                )
            elif r:
                cells.append(f"{r['ours_100']:.2f} / -")
            else:
                cells.append("-")
        s = entry["seeds"]
        lines.append(f"| {name} | {s[0]}-{s[-1]} | " + " | ".join(cells) + " |")
    diffs = [
        r["diff_100"]
        for e in payload["traces"].values()
        for r in e["policies"].values()
        if "diff_100" in r
    ]
    if diffs:
        d = np.abs(np.array(diffs))
        lines.append("")
        lines.append(
            f"{len(d)} trace x policy cells with published results: mean |difference| {d.mean():.2f}, "
            f"median {np.median(d):.2f}, max {d.max():.2f}; {int((d <= 0.5).sum())} within 0.5 point, "
            f"{int((d <= 1.0).sum())} within 1.0."
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--traces", nargs="*", default=None, help="trace names (default: all in the shared folder)"
    )
    ap.add_argument("--default-seeds", default="42-51")
    ap.add_argument("--other-seeds", default="42-44")
    ap.add_argument("--workers", type=argtypes.positive_int, default=2)
    ap.add_argument("--out", type=argtypes.output_path, default=OUT)
    ap.add_argument("--resume", action="store_true", help="keep traces already in --out")
    ap.add_argument(
        "--markdown", action="store_true", help="print the docs table from --out and exit"
    )
    args = ap.parse_args()
    if args.markdown:
        print(markdown(json.loads(args.out.read_text())))
        return
    payload = run(args)
    print(markdown(payload))


if __name__ == "__main__":
    raise SystemExit(run_main(main, prog="benchmarks.placement.fgd_fidelity"))
