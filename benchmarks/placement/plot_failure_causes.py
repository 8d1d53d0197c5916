"""Figure of ``benchmarks/results/placement/placement_failure_causes.json``: where FGD's unallocated GPUs go.

Per trace, one stacked bar splits FGD's unallocated GPU % at 100 % arrived into the relaxed-packing
lower bound (no policy can do better), the extra that FGD loses with CPU and memory requests
dropped (GPU packing), and the extra that host limits add. Markers show PPO and BestFit, as traced
and without host limits.

    python -m benchmarks.placement.plot_failure_causes   # -> docs/img/fgd_loss_breakdown.png
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks.provenance import REPO_ROOT, RESULTS  # noqa: E402
from fleetmind import argtypes
from fleetmind.cli.runner import run_main

SRC = RESULTS / "placement" / "placement_failure_causes.json"
OUT = REPO_ROOT / "docs" / "img" / "fgd_loss_breakdown.png"
KEY = "unallocated_gpu_pct_at_100"


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.placement.plot_failure_causes",
        description="Plot where FGD and the agent lose GPUs from a placement_failure_causes JSON.",
    )
    ap.add_argument("json", nargs="?", type=Path, default=SRC, help=f"input (default {SRC.name})")
    ap.add_argument(
        "--out",
        type=argtypes.output_path,
        default=OUT,
        help=f"figure (default docs/img/{OUT.name})",
    )
    args = ap.parse_args(argv)
    src = args.json
    d = json.loads(src.read_text())
    traced, relaxed = d["summary"]["as_traced"], d["summary"]["no_host_limits"]
    names = list(traced)
    x = np.arange(len(names))
    bound = np.array([d["lower_bound"][t]["min_failed_pct"] for t in names])
    fgd_nohost = np.array([relaxed[t]["FGD"][KEY] for t in names])
    fgd = np.array([traced[t]["FGD"][KEY] for t in names])
    fig, ax = plt.subplots(figsize=(9.5, 4.4))
    w = 0.5
    ax.bar(x, bound, w, color="#c7c7c7", label="lower bound (relaxed packing LP)")
    ax.bar(
        x, fgd_nohost - bound, w, bottom=bound, color="#9ecae1", label="FGD: GPU packing above it"
    )
    ax.bar(
        x, fgd - fgd_nohost, w, bottom=fgd_nohost, color="#1f77b4", label="FGD: added by CPU/memory"
    )
    ppo = [traced[t]["ppo"][KEY] for t in names]
    ppo_nohost = [relaxed[t]["ppo"][KEY] for t in names]
    ax.scatter(x + 0.33, ppo, marker="D", color="#d62728", zorder=3, label="PPO as traced")
    ax.scatter(
        x + 0.33,
        ppo_nohost,
        marker="D",
        zorder=3,
        facecolors="none",
        edgecolors="#d62728",
        label="PPO without CPU/memory requests",
    )
    ax.axhline(0, color="black", lw=0.5)
    for i in range(len(names)):
        ax.text(x[i], fgd[i] + 0.15, f"{fgd[i]:.2f}", ha="center", fontsize=8)
    ax.set_xticks(x, names)
    ax.set_ylabel("unallocated GPU % at 100 % arrived")
    seeds = d["seeds"]
    ax.set_title(f"Where FGD's unallocated GPUs go (mean of seeds {seeds[0]}-{seeds[-1]})")
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    raise SystemExit(run_main(main, prog="benchmarks.placement.plot_failure_causes"))
