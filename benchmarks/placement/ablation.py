"""Ablation of the fgd-mode placement release: what each stage adds, on the frozen evaluation set.

Rows (``ROWS``; each a policy run through ``rl.scaleout.fgd_eval_job``, so ``--ray-address`` runs the
episodes as Ray tasks and the numbers are the same):

| row | policy |
| --- | --- |
| FGD | the heuristic |
| FGD + penalties, no search | ``StrandPenaltyScorer(FGD, alpha, beta)`` with the release's alpha, beta |
| searched teacher | ``models/placement/teacher.json`` (the cross-entropy-searched linear scorer) |
| teacher + penalties | ``models/placement/teacher_strand.json`` (the release's teacher) |
| clone at step 0 | ``clone.onnx`` of each ``--model`` folder (the warm-start clone) |
| clone + short PPO | ``ppo_policy.onnx`` of each ``--model`` folder, else its ``policy.onnx`` |

More rows: ``--recipe LABEL DIR...`` (another recipe's folders, one per training seed: ``LABEL:
clone at step 0``, ``LABEL: + PPO`` from ``ppo_policy.onnx`` or else ``policy.onnx``, and
``LABEL: + PPO, last`` from ``final.onnx``), ``--scratch LABEL DIR...`` (runs without a warm start: ``policy.onnx`` and
``final.onnx``). Model folders are recorded relative to the repository; run it from the root.

``--model`` takes one folder per training seed (default: the release, training seed 0). Rows with one
policy per training seed report the mean over seeds and a 95 % t-interval of that mean (n - 1
degrees of freedom; none for one seed); per-trace values are means over the eval seeds. Gaps are
relative to FGD on the same episodes, ``100 * (row - FGD) / FGD``, averaged over traces.

    python -m benchmarks.placement.ablation --set frozen --eval-seeds 7301-7310 --workers 2 \
        [--ray-address auto] [--model models/placement runs/seeds/seed1/... ] [--json PATH]

``--set frozen`` regenerates the frozen traces (``benchmarks/placement/frozen_set.py``, hashes
checked) into ``runs/frozen_set``; ``--set heldout`` uses the five pre-set held-out traces
(cpu050 gpushare20 gpushare60 multigpu30 gpuspec20, seeds 42-51 as before).
Without ``--recipe``/``--scratch``, the long-PPO and from-scratch rows are listed in the JSON
(``not_run``) with the commands that train them (``NOT_RUN``). The 2026-12-01 table
(``docs/ppo.md``) was made with

    python -m benchmarks.placement.ablation --set frozen --workers 2 \
      --model models/placement $F/release_recipe/seed1 $F/release_recipe/seed2 \
      --recipe "penalty features, metric reward: clone + 1M PPO" $F/penalty_features_ppo1m/seed{0,1,2} \
      --scratch "PPO from scratch, 1M, penalty features" $F/scratch_ppo1m/seed{0,1,2}

with ``F=benchmarks/results/placement/ablation_models``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from scipy import stats

from benchmarks.placement.frozen_set import load_manifest, write_all
from benchmarks.provenance import REPO_ROOT as REPO
from benchmarks.provenance import load_now, provenance
from fleetmind import argtypes
from fleetmind.cli.runner import run_main
from fleetmind.cli.sched import parse_seeds
from fleetmind.errors import ConfigError
from fleetmind.rl.scaleout import fgd_eval_job, run_tasks
from fleetmind.rl.teacher import LinearScorer, StrandPenaltyScorer

HELDOUT = ["cpu050", "gpushare20", "gpushare60", "multigpu30", "gpuspec20"]
RELEASE = REPO / "models" / "placement"

NOT_RUN = {
    "clone + long PPO (>= 1M steps)": (
        "fleetmind sched train --trace default --trace gpushare40 --trace multigpu20 --trace "
        "gpuspec10 --mode fgd --teacher models/placement/teacher_strand.json --bc-episodes 8 "
        "--bc-target-ce 0.05 --bc-fgd-until-pct 0 --fgd-until-pct 80 --reward metric "
        "--penalty-features --timesteps 1000000 --n-envs 1 --eval-freq 100000 "
        "--eval-fgd-until-pct 0 --eval-trace default --eval-trace gpuspec10 --eval-seeds 42 43 "
        "--seeds 0-2 --out runs/ppo_long"
    ),
    "PPO from scratch (same budget)": (
        "fleetmind sched train --trace default --trace gpushare40 --trace multigpu20 --trace "
        "gpuspec10 --mode fgd --teacher fgd --bc-episodes 0 --fgd-until-pct 80 --reward metric "
        "--penalty-features --timesteps 1000000 --n-envs 1 --eval-freq 100000 "
        "--eval-fgd-until-pct 0 --eval-trace default --eval-trace gpuspec10 --eval-seeds 42 43 "
        "--seeds 0-2 --out runs/ppo_scratch"
    ),
}


def fgd_penalty_teacher(out: Path) -> Path:
    """FGD plus the release's two penalties, no search: the row that isolates the penalties."""
    rel = StrandPenaltyScorer.load(RELEASE / "teacher_strand.json")
    k, f = rel.n_candidates, rel.n_cand_features
    StrandPenaltyScorer(LinearScorer.fgd(k, f, rel.base.blocks), rel.alpha, rel.beta).save(out)
    return out


def repo_relative(f: str) -> Path:
    """A model folder as given, relative to the repository when inside it (for the JSON)."""
    p = Path(f).resolve()
    return p.relative_to(REPO) if p.is_relative_to(REPO) else p


def _recorded_best_step(folder: Path) -> int | None:
    """The ``best_step`` a training run recorded for its kept checkpoint (``train_summary.json``
    or the model card's table), None when the folder records none."""
    summary = folder / "train_summary.json"
    if summary.is_file():
        step = json.loads(summary.read_text()).get("best_step")
        if step is not None:
            return int(step)
    card = folder / "model_card.md"
    if card.is_file():
        for line in card.read_text().splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) == 2 and cells[0] == "best_step" and cells[1].isdigit():
                return int(cells[1])
    return None


def ppo_stage_file(folder: Path) -> Path:
    """The PPO-stage policy of a model folder (``folder`` as :func:`repo_relative` gives it):
    ``ppo_policy.onnx`` when the folder has one (the release since 2026-12-02, whose
    ``policy.onnx`` is a byte copy of ``clone.onnx``), else ``policy.onnx``. Refuses a folder whose
    PPO-stage file is a byte copy of its ``clone.onnx`` unless the run recorded that it kept the
    clone (``best_step`` 0): such a row would score the clone against itself."""
    root = REPO / folder
    name = "ppo_policy.onnx" if (root / "ppo_policy.onnx").is_file() else "policy.onnx"
    ppo, clone = root / name, root / "clone.onnx"
    if (
        ppo.is_file()
        and clone.is_file()
        and ppo.read_bytes() == clone.read_bytes()
        and _recorded_best_step(root) != 0
    ):
        raise ConfigError(
            f"{folder}: {name} is a byte copy of clone.onnx and the run did not keep its clone "
            "(best_step 0); give the folder of the PPO run (or one with ppo_policy.onnx)"
        )
    return folder / name


def ci95(x: list[float]) -> list[float] | None:
    """95 % t-interval of the mean of ``x`` (None for fewer than 2 values)."""
    if len(x) < 2:
        return None
    a = np.asarray(x, dtype=np.float64)
    h = float(stats.t.ppf(0.975, len(a) - 1) * a.std(ddof=1) / np.sqrt(len(a)))
    return [round(float(a.mean()) - h, 3), round(float(a.mean()) + h, 3)]


def _trained(row: str) -> bool:
    return row not in (
        "FGD",
        "FGD + penalties, no search",
        "searched teacher",
        "teacher + penalties",
    )


def markdown(out: dict) -> str:
    """The docs table of an ablation JSON (``--table-from``)."""
    lines = [
        "| row | training seeds | unallocated GPU % at 100 % (mean) | gap to FGD (mean over traces)"
        " | 95 % interval over training seeds | traces at or below FGD |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    n = len(out["traces"])
    for row, r in out["rows"].items():
        ci = r["gap_vs_fgd_pct_ci95"]
        ci_s = f"[{ci[0]:+.2f}, {ci[1]:+.2f}] %" if ci else "n/a (one seed)"
        lines.append(
            f"| {row} | {r['training_seeds'] if _trained(row) else '-'} | "
            f"{r['unallocated_pct_mean']:.3f} | "
            f"{r['gap_vs_fgd_pct_mean']:+.2f} % | {ci_s} | {r['traces_at_or_below_fgd']} of {n} |"
        )
    for row in out.get("not_run", {}):
        lines.append(f"| {row} | not run | - | - | - | - |")
    return "\n".join(lines)


def _check_traces(wanted: list[str] | None, known: list[str], set_name: str) -> None:
    """Raise :class:`ConfigError` when ``--traces`` names a trace outside the set."""
    unknown = [t for t in wanted or () if t not in known]
    if unknown:
        raise ConfigError(
            f"--traces: {', '.join(unknown)} not in the {set_name} set (its traces: "
            f"{', '.join(known)})"
        )


def main() -> None:
    load0 = load_now()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", choices=["frozen", "heldout"], default="frozen")
    ap.add_argument("--eval-seeds", nargs="+", default=None, help="default: the set's own")
    ap.add_argument("--traces", nargs="+", default=None, help="a subset of the set's traces")
    ap.add_argument("--model", nargs="+", default=[str(RELEASE)], help="one folder per seed")
    ap.add_argument("--workers", type=argtypes.positive_int, default=1)
    ap.add_argument("--ray-address", default=None)
    ap.add_argument("--json", type=argtypes.output_file, default=None)
    ap.add_argument("--table-from", default=None, help="print the markdown table of this JSON")
    ap.add_argument(
        "--merge", nargs="+", default=None, help="add the episodes of earlier runs (same rows)"
    )
    ap.add_argument(
        "--rows", nargs="+", default=None, help="run only these rows (FGD is always run)"
    )
    ap.add_argument(
        "--recipe",
        nargs="+",
        action="append",
        default=[],
        metavar="LABEL DIR",
        help="more rows from another training recipe: LABEL then one model folder per training"
        " seed; adds 'LABEL: clone at step 0' (clone.onnx) and 'LABEL: + PPO' (policy.onnx) and"
        " their paired difference (repeatable)",
    )
    ap.add_argument(
        "--scratch",
        nargs="+",
        action="append",
        default=[],
        metavar="LABEL DIR",
        help="like --recipe for runs without a warm start: only 'LABEL' (policy.onnx)",
    )
    a = ap.parse_args()
    if a.table_from:
        print(markdown(json.loads(Path(a.table_from).read_text())))
        return
    for opt, specs in (("--recipe", a.recipe), ("--scratch", a.scratch)):
        if any(len(spec) < 2 for spec in specs):  # before the frozen set is written
            raise ConfigError(f"{opt} needs a label and at least one model folder")
    t0 = time.time()
    # the seeds and trace names are checked before the frozen set is regenerated
    if a.set == "frozen":
        m = load_manifest()
        seeds = parse_seeds(a.eval_seeds) if a.eval_seeds else list(m["eval_seeds"])
        _check_traces(a.traces, [e["name"] for e in m["traces"]], a.set)
        paths = write_all(REPO / "runs" / "frozen_set", m)
        traces = {n: str(p) for n, p in paths.items()}
    else:
        seeds = parse_seeds(a.eval_seeds) if a.eval_seeds else list(range(42, 52))
        _check_traces(a.traces, list(HELDOUT), a.set)
        traces = {t: t for t in HELDOUT}
    if a.traces:
        traces = {n: traces[n] for n in a.traces}
    ppo_files = [ppo_stage_file(repo_relative(f)) for f in a.model]  # refused before any write
    pen = fgd_penalty_teacher(REPO / "runs" / "ablation_fgd_penalties.json")
    rows: dict[str, list[str]] = {
        "FGD": ["FGD"],
        "FGD + penalties, no search": [f"teacher:{pen}"],
        "searched teacher": [f"teacher:{RELEASE / 'teacher.json'}"],
        "teacher + penalties": [f"teacher:{RELEASE / 'teacher_strand.json'}"],
        "clone at step 0": [f"policy:{repo_relative(f) / 'clone.onnx'}" for f in a.model],
        "clone + short PPO": [f"policy:{f}" for f in ppo_files],
    }
    pairs = {"release recipe": ("clone at step 0", "clone + short PPO")}
    for spec in a.recipe:
        if len(spec) < 2:
            raise ConfigError("--recipe needs a label and at least one model folder")
        label, folders = spec[0], [repo_relative(f) for f in spec[1:]]
        rows[f"{label}: clone at step 0"] = [f"policy:{f / 'clone.onnx'}" for f in folders]
        rows[f"{label}: + PPO"] = [f"policy:{ppo_stage_file(f)}" for f in folders]
        pairs[label] = (f"{label}: clone at step 0", f"{label}: + PPO")
        if all((f / "final.onnx").is_file() for f in folders):  # the last policy, not the best
            rows[f"{label}: + PPO, last"] = [f"policy:{f / 'final.onnx'}" for f in folders]
            pairs[f"{label}, last"] = (f"{label}: clone at step 0", f"{label}: + PPO, last")
    for spec in a.scratch:
        if len(spec) < 2:
            raise ConfigError("--scratch needs a label and at least one model folder")
        folders = [repo_relative(f) for f in spec[1:]]
        rows[spec[0]] = [f"policy:{f / 'policy.onnx'}" for f in folders]
        if all((f / "final.onnx").is_file() for f in folders):
            rows[f"{spec[0]}, last"] = [f"policy:{f / 'final.onnx'}" for f in folders]
    if a.rows:
        rows = {r: ps for r, ps in rows.items() if r == "FGD" or r in a.rows}
    pols = list(dict.fromkeys(p for ps in rows.values() for p in ps))
    jobs = [(traces[t], p, s, None, None) for p in pols for t in traces for s in seeds]
    done = [0]

    def tick(n: int) -> None:
        done[0] += n
        print(f"{done[0]}/{len(jobs)} episodes, {time.time() - t0:.0f} s", flush=True)

    res = run_tasks(fgd_eval_job, jobs, ray_address=a.ray_address, workers=a.workers, progress=tick)
    val: dict[tuple[str, str, int], float] = {}
    i = 0
    for p in pols:
        for t in traces:
            for s in seeds:
                val[(p, t, s)] = float(res[i].unallocated[100])
                i += 1
    for f in a.merge or []:  # earlier runs of the same rows on other eval seeds
        old = json.loads(Path(f).read_text())
        for k, v in old["per_episode"].items():
            p, t, s = k.rsplit("|", 2)
            if t in traces and p in pols:
                val[(p, t, int(s))] = float(v)
        seeds = sorted(set(seeds) | set(old["eval_seeds"]))
    fgd = {t: float(np.mean([val[("FGD", t, s)] for s in seeds])) for t in traces}
    table = {}
    for row, ps in rows.items():
        per_model = []
        for p in ps:
            per_trace = {t: float(np.mean([val[(p, t, s)] for s in seeds])) for t in traces}
            gap = float(np.mean([100 * (per_trace[t] - fgd[t]) / fgd[t] for t in traces]))
            per_model.append({"per_trace": per_trace, "gap_vs_fgd_pct": gap})
        gaps = [x["gap_vs_fgd_pct"] for x in per_model]
        unal = [float(np.mean(list(x["per_trace"].values()))) for x in per_model]
        table[row] = {
            "policies": ps,
            "training_seeds": len(ps),
            "unallocated_pct_mean": round(float(np.mean(unal)), 3),
            "gap_vs_fgd_pct_mean": round(float(np.mean(gaps)), 3),
            "gap_vs_fgd_pct_ci95": ci95(gaps),
            "per_trace_mean": {
                t: round(float(np.mean([x["per_trace"][t] for x in per_model])), 3) for t in traces
            },
            "traces_at_or_below_fgd": int(
                sum(
                    np.mean([x["per_trace"][t] for x in per_model]) <= fgd[t] + 1e-9 for t in traces
                )
            ),
        }
    # what PPO added, paired per episode: (clone + PPO) - clone, in % of the clone, per seed model
    ppo_vs_clone = {}
    for label, (crow, prow) in pairs.items():
        if crow not in rows or prow not in rows:
            continue
        paired = []
        for c, p in zip(rows[crow], rows[prow], strict=True):
            d = [
                100 * (val[(p, t, s)] - val[(c, t, s)]) / val[(c, t, s)]
                for t in traces
                for s in seeds
            ]
            paired.append(float(np.mean(d)))
        ppo_vs_clone[label] = {
            "per_training_seed": [round(x, 3) for x in paired],
            "mean": round(float(np.mean(paired)), 3),
            "ci95": ci95(paired),
            "target": "<= -3 % with the interval below 0 (target set on 2026-12-01)",
        }
    out = {
        **provenance(__spec__.name, load_start=load0, packages=("ray", "cma", "onnxruntime")),
        "set": a.set,
        "traces": traces,
        "eval_seeds": seeds,
        "models": a.model,
        "rows": table,
        "ppo_vs_clone_pct": ppo_vs_clone,
        "not_run": {} if a.recipe or a.scratch else NOT_RUN,
        "wall_time_s": round(time.time() - t0, 1),
        "per_episode": {f"{p}|{t}|{s}": v for (p, t, s), v in val.items()},
    }
    path = Path(
        a.json or REPO / "benchmarks" / "results" / "placement" / f"placement_ablation_{a.set}.json"
    )
    path.write_text(json.dumps(out, indent=1) + "\n")
    for row, r in table.items():
        print(f"{row:30s} {r['unallocated_pct_mean']:7.3f} {r['gap_vs_fgd_pct_mean']:+7.2f} %")
    print("ppo vs clone:", out["ppo_vs_clone_pct"])
    print(markdown(out))


if __name__ == "__main__":
    raise SystemExit(run_main(main, prog="benchmarks.placement.ablation"))
