"""Figure of a ``benchmarks.placement.ppo_heldout`` JSON: PPO vs FGD vs BestFit per trace, mean and per seed.

python -m benchmarks.placement.plot_ppo_eval [JSON]   # -> docs/img/ppo_vs_fgd.png

The default JSON, ``benchmarks/results/placement/ppo_eval_scarcity.json``, is the released model
(2026-11-30); ``ppo_eval_strand.json`` holds the same day's first strand release and
``ppo_eval.json`` the release of 2026-11-29.
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

SRC = RESULTS / "placement" / "ppo_eval_scarcity.json"
OUT = REPO_ROOT / "docs" / "img" / "ppo_vs_fgd.png"
STYLE = {"BestFit": "#9e9e9e", "FGD": "#1f77b4", "ppo": "#d62728"}
KEY = "unallocated_gpu_pct_at_100"


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.placement.plot_ppo_eval",
        description="Plot PPO vs FGD and BestFit per openb trace from a ppo_heldout JSON.",
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
    names = list(d["traces"])
    fig, ax = plt.subplots(figsize=(9.5, 4.2))
    width = 0.26
    x = np.arange(len(names))
    for j, pol in enumerate(("BestFit", "FGD", "ppo")):
        means = [d["traces"][t]["policies"][pol][KEY] for t in names]
        ax.bar(x + (j - 1) * width, means, width, color=STYLE[pol], alpha=0.85, label=pol)
        for i, t in enumerate(names):
            vals = [v[KEY] for v in d["traces"][t]["policies"][pol]["per_seed"].values()]
            ax.scatter(
                np.full(len(vals), x[i] + (j - 1) * width), vals, s=6, color="black", zorder=3
            )
    for i, t in enumerate(names):
        rel = d["traces"][t]["ppo_vs_fgd_pct"]
        top = d["traces"][t]["policies"]["BestFit"][KEY]
        ax.text(x[i], top + 0.3, f"{rel:+.1f} %", ha="center", fontsize=9)
    labels = [t + ("" if d["traces"][t]["held_out"] else "\n(training)") for t in names]
    ax.set_xticks(x, labels)
    ax.set_ylabel("unallocated GPU % at 100 % arrived (lower is better)")
    n = len(d["seeds"])
    ax.set_title(f"PPO agent vs FGD and BestFit, openb traces, {n} seeds each (text: PPO vs FGD)")
    ax.legend(loc="upper left")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=120)
    print(args.out)


if __name__ == "__main__":
    raise SystemExit(run_main(main, prog="benchmarks.placement.plot_ppo_eval"))
