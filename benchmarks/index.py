"""Write ``benchmarks/INDEX.md``: every result JSON with its command, commit, date, headline figure
and the documents that cite it.

    python -m benchmarks.index            # rewrite benchmarks/INDEX.md
    python -m benchmarks.index --check    # exit 1 if benchmarks/INDEX.md is not what it would write

Everything comes from the JSON files themselves (and the documents' text), never from git, so the
index is the same in any copy of the checkout. Older results lack some fields; the index then says
"not recorded". A date in the file name (``serving_2026-11-30_1545_run1.json``) is used when the
file records none.
"""

from __future__ import annotations

import argparse
import fnmatch
import itertools
import json
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from benchmarks.provenance import AREAS, REPO_ROOT, RESULTS
from fleetmind.cli.runner import run_main

INDEX = REPO_ROOT / "benchmarks" / "INDEX.md"
NOT_RECORDED = "not recorded"

MOVED_SCRIPTS = {
    "benchmarks/bench_gat.py": "benchmarks.rca.gat_speed",
    "benchmarks/rca_main_table.py": "benchmarks.rca.main_table",
    "benchmarks/gat_dataset.py": "benchmarks.rca.gat_dataset",
    "benchmarks/bench_rca_generate.py": "benchmarks.rca.generate_speed",
    "benchmarks/bench_rca_learnability.py": "benchmarks.rca.learnability",
    "benchmarks/bench_petshop.py": "benchmarks.rca.petshop_sensitivity",
    "benchmarks/bench_rca_fit.py": "benchmarks.rca.fit",
    "benchmarks/fgd_fidelity.py": "benchmarks.placement.fgd_fidelity",
    "benchmarks/bench_fgd.py": "benchmarks.placement.fgd_speed",
    "benchmarks/bench_fleet.py": "benchmarks.placement.fleet_speed",
    "benchmarks/bench_ppo.py": "benchmarks.placement.ppo_speed",
    "benchmarks/ppo_heldout.py": "benchmarks.placement.ppo_heldout",
    "benchmarks/placement_failure_causes.py": "benchmarks.placement.failure_causes",
    "benchmarks/plot_failure_causes.py": "benchmarks.placement.plot_failure_causes",
    "benchmarks/plot_ppo_eval.py": "benchmarks.placement.plot_ppo_eval",
    "benchmarks/bench_dynamic.py": "benchmarks.dynamic.heuristics",
    "benchmarks/ppo_dynamic_eval.py": "benchmarks.dynamic.ppo_eval",
    "benchmarks/bench_serving.py": "benchmarks.serving.service",
    "benchmarks/bench_incident_grouping.py": "benchmarks.serving.incident_grouping",
    "benchmarks/bench_incident_worker.py": "benchmarks.serving.incident_worker",
    "benchmarks/serving_cpu_loop.py": "benchmarks.serving.cpu_loop",
    "benchmarks/placement_teacher_search.py": (
        "benchmarks.experiments.2026-11-29-placement-teacher-search.teacher_search"
    ),
    "benchmarks/serving_queue_model.py": (
        "benchmarks.experiments.2026-11-30-serving-queue-model.queue_model"
    ),
    "benchmarks/dynamic_multigpu_diagnosis.py": (
        "benchmarks.experiments.2026-11-30-dynamic-multigpu-diagnosis.multigpu_diagnosis"
    ),
    "benchmarks/dynamic_relaxed_reference.py": (
        "benchmarks.experiments.2026-11-30-dynamic-relaxed-reference.relaxed_reference"
    ),
    "benchmarks/dynamic_insample_teacher.py": (
        "benchmarks.experiments.2026-11-30-dynamic-insample-teacher.insample_teacher"
    ),
    "benchmarks/placement_strand_probe.py": (
        "benchmarks.experiments.2026-11-30-host-stranding-probes.placement_strand_probe"
    ),
    "benchmarks/placement_scarcity_probe.py": (
        "benchmarks.experiments.2026-11-30-host-stranding-probes.placement_scarcity_probe"
    ),
    "benchmarks/dynamic_strand_probe.py": (
        "benchmarks.experiments.2026-11-30-host-stranding-probes.dynamic_strand_probe"
    ),
}
"""Where the scripts named in older results' ``command`` now live (run them as modules)."""

REMOVED_OPTIONS = {
    "benchmarks.serving.cpu_loop": {
        "--repo DIR": "leave it out and run the module with the Python of an environment that has "
        "DIR installed (`pip install -e DIR`), e.g. `DIR/.venv/bin/python -m benchmarks.serving.cpu_loop`",
    },
    "benchmarks.serving.incident_worker": {
        "--repo DIR": "leave it out and run the module with the Python of an environment that has "
        "DIR installed (`pip install -e DIR`), e.g. "
        "`DIR/.venv/bin/python -m benchmarks.serving.incident_worker`",
    },
}
"""Options (with their argument) that older results' commands pass to a moved script and its
module no longer takes, with what to do instead (the module docstrings say the same)."""

AREA_TITLES = {
    "rca": "Root-cause analysis",
    "placement": "Placement (fgd mode)",
    "dynamic": "Dynamic mode",
    "serving": "Service",
}
"""The heading of each results folder (:data:`benchmarks.provenance.AREAS`), in index order."""
assert tuple(AREA_TITLES) == AREAS


def doc_files() -> list[Path]:
    """The documents a user reads: README, CHANGELOG, docs/ and the model cards."""
    docs = [REPO_ROOT / "README.md", REPO_ROOT / "CHANGELOG.md"]
    docs += sorted((REPO_ROOT / "docs").rglob("*.md"))
    docs += sorted((REPO_ROOT / "models").rglob("*.md"))
    return [d for d in docs if d.is_file()]


MODEL_MARKERS = ("model_card.md", "policy.pt", "policy.onnx")
"""A folder holding one of these is a model artifact (its JSON is metadata, not a result)."""


def result_files() -> list[Path]:
    """Every result JSON under ``results/`` and its area folders, except the files of the model
    folders kept beside them (``dynamic/ppo_dynamic_multigpu_fix_models/seed0/metadata.json``)."""
    models = {p.parent for pat in MODEL_MARKERS for p in RESULTS.rglob(pat)}
    return sorted(
        p for p in RESULTS.rglob("*.json") if not any(p.is_relative_to(m) for m in models)
    )


def expand_braces(text: str) -> list[str]:
    """``a_{x,y}_b`` -> ``[a_x_b, a_y_b]``; ``{0..3}`` is a range, as in bash; groups multiply."""

    def options(group: str) -> list[str]:
        r = re.fullmatch(r"(\d+)\.\.(\d+)", group)
        return [str(i) for i in range(int(r[1]), int(r[2]) + 1)] if r else group.split(",")

    parts = re.split(r"\{([^{}]*)\}", text)
    groups = [[p] if i % 2 == 0 else options(p) for i, p in enumerate(parts)]
    return ["".join(combo) for combo in itertools.product(*groups)]


NAME = re.compile(r"[A-Za-z0-9_.{},*\-/]+\.json")


def citations(results: list[Path], docs: list[Path]) -> dict[Path, list[str]]:
    """For each result, the documents whose text names it (by file name, path, glob or braces)."""
    cited: dict[Path, list[str]] = {r: [] for r in results}
    for doc in docs:
        names = set()
        for token in NAME.findall(doc.read_text()):
            for name in expand_braces(token):
                name = name.rsplit("/", 1)[-1]
                if not name.startswith("*"):  # `*ppo*.json` describes a kind, not a file
                    names.add(name)
        rel = doc.relative_to(REPO_ROOT).as_posix()
        for r in results:
            if any(fnmatch.fnmatchcase(r.name, n) for n in names):
                cited[r].append(rel)
    return cited


def first(d: Any, *paths: str) -> Any:
    """The first of the dotted ``paths`` present in ``d`` (``None`` if none is)."""
    for path in paths:
        cur = d
        for key in path.split("."):
            if not isinstance(cur, dict) or key not in cur:
                break
            cur = cur[key]
        else:
            if cur not in (None, "", [], {}):
                return cur
    return None


def command_of(d: dict[str, Any]) -> str | None:
    cmd = first(d, "command", "train_command", "candidate_train_command", "clone_command")
    if cmd is None:
        cmds = first(d, "train_commands", "commands", "evaluation_commands")
        if isinstance(cmds, dict):
            cmds = list(cmds.values())
        if isinstance(cmds, list) and cmds and isinstance(cmds[0], str):
            cmd = cmds[0] + (f" (and {len(cmds) - 1} more)" if len(cmds) > 1 else "")
    return cmd if isinstance(cmd, str) else None


def commit_of(d: dict[str, Any]) -> str | None:
    commit = first(d, "commit", "code.commit", "git.head", "features_commit")
    return commit[:12] if isinstance(commit, str) else None


UNKNOWN_COMMITS = (
    "03648d39df40",  # placement/placement_env_profile.json
    "21c93c71d203",  # rca/rca_root_share_{default,hard}.json
    "432032b820fd",  # rca/petshop_fit_low_traffic.json, rca/rca_fit_time.json
    "5709ce5a94b6",  # rca/gat_vs_gbdt_retuned_17600.json
    "58e3628459ea",  # placement/variant_fidelity.json
    "8146e1e",  # rca/rca_ablation_default.json
    "bae186cf25a9",  # serving/k8s.json
)
"""Commits that results record and this repository's history does not hold (the code they name
cannot be checked out). Kept as a list rather than asked of git, so that the index is the same in
any copy of the checkout (a shallow clone holds few commits);
``tests/test_benchmark_index_provenance.py`` checks it against git where the whole history is."""

PROVENANCE_FIELDS = ("command", "commit", "machine", "versions")
"""What a result needs to say to be rerun and compared (``benchmarks/provenance.py``)."""


def recorded_commit(d: dict[str, Any]) -> str | None:
    """The commit hash a result records (its leading hex digits; ``None`` when it records none)."""
    commit = first(d, "commit", "code.commit", "git.head", "features_commit")
    m = re.match(r"[0-9a-f]{7,40}\b", commit) if isinstance(commit, str) else None
    return m.group(0) if m else None


def commands_in(d: dict[str, Any]) -> list[str]:
    """Every command a result records where :func:`command_of` finds its first: the one string,
    or each entry of its list or dict of commands (``commands.hard`` as well as
    ``commands.default``)."""
    cmd = first(d, "command", "train_command", "candidate_train_command", "clone_command")
    if cmd is None:
        cmd = first(d, "train_commands", "commands", "evaluation_commands")
    if isinstance(cmd, dict):
        cmd = list(cmd.values())
    cmds = cmd if isinstance(cmd, list) else [cmd]
    return [c for c in cmds if isinstance(c, str)]


CHECKED_PATHS = re.compile(
    r"(?<![\w/.$:@-])(?:benchmarks/results|models)/(?:\{[^{}\s]*\}|[^\s'\",;:{])+"
)
"""Paths in a recorded command that the checkout should hold: results and models (scripts that
moved are listed in :data:`MOVED_SCRIPTS`; scratch and data folders are outside it). Only where a
path starts: ``/tmp/run/models/seed0``, ``runs:/abc/models/policy`` and ``$RUN_DIR/models/s0``
name no folder of the checkout."""

OUTPUT_OPTIONS = re.compile(r"""(?<!\S)(?:--out|--json|-o)(?:=|\s+)(?:"[^"]*"|'[^']*'|\S+)""")
"""An option that names what the run itself writes (``--out DIR``, ``--json FILE``, ``-o FILE``)
with its value: a path that is absent before the run is no missing input."""

SHELL_PUNCTUATION = ";<>|&()"
"""Characters that end a word unquoted in a POSIX shell: a ``;``, ``<``, ``>``, ``|``, ``&``,
``(`` or ``)`` in a recorded command (prose such as ``--note 2-core machine; load averages``, a
placeholder ``<run id>``) makes the shell run something other than what was recorded."""

COMMAND_SUBSTITUTION = re.compile(r"\$\([^()]*\)")
"""``$(nproc)``: a command substitution, which a shell runs as meant."""


def paste_gap(cmd: str) -> str | None:
    """Why a POSIX shell would not run ``cmd`` as recorded (None when it would): an unclosed
    quote (``shlex.split`` fails), an unquoted character of :data:`SHELL_PUNCTUATION` (a syntax
    error, a redirection or a second command; ``$(...)`` is allowed), or a word ending in ``,``
    or ``:`` (prose, such as a label with spaces and commas that was not quoted: the shell splits
    it into words the script reads as separate arguments)."""
    import shlex

    try:
        words = shlex.split(cmd)
        lexer = shlex.shlex(
            COMMAND_SUBSTITUTION.sub("x", cmd), posix=True, punctuation_chars=SHELL_PUNCTUATION
        )
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError:
        return "command does not paste back (unclosed quote)"
    mark = next((t for t in tokens if t and set(t) <= set(SHELL_PUNCTUATION)), None)
    if mark is not None:
        return f'command does not paste back (unquoted "{mark}")'
    prose = next((w for w in words if w.endswith((",", ":")) and " " not in w), None)
    if prose is not None:
        return f'command does not paste back (unquoted text: "{prose}")'
    return None


def command_gaps(cmd: str, own: str | None = None) -> list[str]:
    """Why the recorded command ``cmd`` cannot be pasted back as it is: :func:`paste_gap`, and
    ``names a missing path P`` (``and N more``) for the results and model paths it names
    (:data:`CHECKED_PATHS`, brace groups expanded) that this checkout does not hold (a folder
    moved since), outputs of the run itself (:data:`OUTPUT_OPTIONS`) left out. ``own``: the
    result's file name, left out (a result filed into an area folder since names its old
    place)."""
    gaps = [g for g in [paste_gap(cmd)] if g is not None]
    missing: list[str] = []
    for found in CHECKED_PATHS.findall(OUTPUT_OPTIONS.sub(" ", cmd)):
        for path in expand_braces(found.rstrip(".)")):
            name = path.rstrip("/").rsplit("/", 1)[-1]
            if name != own and not (REPO_ROOT / path).exists() and path not in missing:
                missing.append(path)
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        gaps.append(f"names a missing path {missing[0]}{more}")
    return gaps


def provenance_of(d: dict[str, Any], own: str | None = None) -> str:
    """``complete``, or what a result's provenance lacks: the missing fields of
    :data:`PROVENANCE_FIELDS` (``no commit, versions``), a commit this repository does not hold
    (:data:`UNKNOWN_COMMITS`), code changed beside the commit (``code_modified``), and a recorded
    command that does not paste back or names a path the checkout lacks (:func:`command_gaps`;
    ``own``: the result's file name).

    Library versions count as recorded when an older result put them under ``machine``
    (``machine.packages``, ``machine.torch``)."""
    commit = recorded_commit(d)
    present = {
        "command": command_of(d) is not None,
        "commit": commit is not None,
        "machine": first(d, "machine") is not None,
        "versions": first(d, "versions", "machine.packages", "machine.torch", "machine.numpy")
        is not None,
    }
    gaps = []
    missing = [k for k in PROVENANCE_FIELDS if not present[k]]
    if missing:
        gaps.append("no " + ", ".join(missing))
    if commit is not None and any(
        commit.startswith(u) or u.startswith(commit) for u in UNKNOWN_COMMITS
    ):
        gaps.append("commit not in this repository")
    if d.get("code_modified") is True or first(d, "code.serving_rca_data_modified") is True:
        gaps.append("code modified beside the commit")
    for cmd in commands_in(d):
        gaps += [g for g in command_gaps(cmd, own) if g not in gaps]
    return "; ".join(gaps) or "complete"


def date_of(d: dict[str, Any], path: Path) -> str | None:
    date = first(d, "date", "started_utc", "registered_utc", "preregistered_at")
    if isinstance(date, str):
        return date.replace("T", " ").removesuffix("+00:00").removesuffix("Z")
    m = re.search(r"(\d{4}-\d{2}-\d{2})(?:_(\d{2})(\d{2}))?", path.name)
    if m:
        return m.group(1) + (f" {m.group(2)}:{m.group(3)}" if m.group(2) else "") + " (file name)"
    return None


def fmt(x: Any, unit: str = "", digits: int = 2) -> str:
    return f"{x:,.{digits}f}{unit}" if isinstance(x, (int, float)) else str(x)


def _serving(d: dict[str, Any]) -> str | None:
    if first(d, "benchmark") == "serving_cpu_loop":
        passes = d.get("cpu_ms_per_request_by_pass") or []
        return f"{fmt(min(passes))} ms CPU per RCA request (best pass)" if passes else None
    if "rca" not in d:
        return None
    out = []
    rate = first(d, "ingestion.alerts_per_s")
    if isinstance(rate, (int, float)):
        out.append(f"ingestion {fmt(rate, ' alerts/s', 0)}")
    rca = d["rca"] if isinstance(d["rca"], dict) else {}
    p99 = rca.get("p99_ms")
    if isinstance(p99, (int, float)):
        out.append(f"RCA p99 {fmt(p99, ' ms', 1)} at {rca.get('clients', '?')} clients")
    place = first(d, "placement.clients_1.p99_ms")
    if isinstance(place, (int, float)):
        out.append(f"placement p99 {fmt(place, ' ms', 1)}")
    return ", ".join(out) or None


def _incident_worker(d: dict[str, Any]) -> str | None:
    if "alerts_per_s" in d and "grouped" in d:
        return (
            f"{fmt(d['grouped'], '', 0)} alerts grouped at {fmt(d['alerts_per_s'], ' alerts/s', 0)}"
        )
    return None


def _incident_grouping(d: dict[str, Any]) -> str | None:
    res = d.get("results")
    if d.get("benchmark") == "incident_grouping" and isinstance(res, list) and res:
        r = next((x for x in res if x.get("hops") == 2), res[0])  # 2 hops: the service's default
        return (
            f"root top cause of some incident {fmt(r.get('root_top1_of_some_incident'), '', 3)}"
            f" ({r.get('hops')} hops)"
        )
    return None


def _ppo_eval(d: dict[str, Any]) -> str | None:
    gap = first(d, "targets.mean_ppo_vs_fgd_pct")
    if isinstance(gap, (int, float)):
        return f"PPO vs FGD {gap:+.1f} % (mean over {d['targets'].get('held_out_traces')} unseen traces)"
    return None


def _dynamic_eval(d: dict[str, Any]) -> str | None:
    diff = d.get("mean_slowdown_diff_pct")
    met = d.get("traces_target_met")
    if isinstance(diff, (int, float)):
        n = len(d.get("summary") or [])
        met_n = len(met) if isinstance(met, list) else met
        return f"PPO vs best heuristic {diff:+.1f} % mean slowdown; target met on {met_n} of {n}"
    return None


def _fidelity(d: dict[str, Any]) -> str | None:
    traces = d.get("traces")
    if "published_source" in d and isinstance(traces, dict):
        diffs = [
            abs(r["diff_100"])
            for t in traces.values()
            for r in t.get("policies", {}).values()
            if "diff_100" in r
        ]
        if diffs:
            return f"mean |ours - published| {sum(diffs) / len(diffs):.2f} points over {len(diffs)} cells"
    return None


def _rca_eval(d: dict[str, Any]) -> str | None:
    methods = d.get("methods")
    if not isinstance(methods, dict):
        return None
    best = max(
        methods, key=lambda m: methods[m].get("ac@1", -1) if isinstance(methods[m], dict) else -1
    )
    ac1 = methods[best].get("ac@1") if isinstance(methods[best], dict) else None
    if isinstance(ac1, (int, float)):
        return f"best AC@1 {ac1:.3f} ({best}, {d.get('n_incidents')} incidents)"
    return None


def _gat_speed(d: dict[str, Any]) -> str | None:
    ms = first(d, "results.simulated.find_root_causes_ms_median")
    if isinstance(ms, (int, float)):
        rate = first(d, "results.simulated.batched_incidents_per_s")
        return f"{ms:.1f} ms median per incident, {fmt(rate, ' incidents/s batched', 0)}"
    return None


def _dynamic_heuristics(d: dict[str, Any]) -> str | None:
    pols = d.get("policies")
    if d.get("mode") == "dynamic" and isinstance(pols, dict) and pols:
        best = min(pols, key=lambda p: pols[p].get("mean_slowdown", float("inf")))
        return f"best mean slowdown {pols[best]['mean_slowdown']:.2f} ({best})"
    return None


def _failure_causes(d: dict[str, Any]) -> str | None:
    if "lower_bound" in d and "summary" in d:
        return f"failure causes and lower bound on {len(d['lower_bound'])} traces"
    return None


def _probe(d: dict[str, Any]) -> str | None:
    scorers = d.get("scorers")
    if isinstance(scorers, dict) and scorers:
        key = "gap_vs_fgd_pct" if "gap_vs_fgd_pct" in next(iter(scorers.values())) else None
        key = key or "mean_gap_vs_fgd_pct"
        gaps = {n: s.get(key) for n, s in scorers.items() if isinstance(s, dict)}
        gaps = {n: g for n, g in gaps.items() if isinstance(g, (int, float)) and n != "FGD"}
        if gaps:
            best = min(gaps, key=gaps.get)
            return f"best gap to FGD {gaps[best]:+.2f} % ({best})"
    gaps = d.get("mean_gap_vs_best_pct")
    if isinstance(gaps, dict) and gaps:
        best = min(gaps, key=gaps.get)
        return f"best gap to the best heuristic {gaps[best]:+.2f} % ({best})"
    return None


def _headroom(d: dict[str, Any]) -> str | None:
    """``benchmarks.placement.headroom``: the rollout policy against the clone, per run label."""
    if not str(d.get("command", "")).startswith("python -m benchmarks.placement.headroom"):
        return None
    parts = [f"{k} {v['mean_relative_pct']:+.1f} %" for k, v in d["summary"].items()]
    return f"{d['mode']} mode, rollout vs its clone: " + ", ".join(parts)


def _speed(d: dict[str, Any]) -> str | None:
    if "decision_ms" in d:
        return f"{fmt(first(d, 'actor_ms.onnx.median'), ' ms')} per actor call, {fmt(d['decision_ms'].get('median'), ' ms')} per decision"
    if "decision_latency" in d:
        fgd = first(d, "decision_latency.policies.FGD.median_ms", "decision_latency.FGD.median_ms")
        return f"FGD {fmt(fgd, ' ms', 3)} median per decision" if fgd is not None else None
    if "alloc_dgx1_v100" in d:
        return f"openb fleet loads in {fmt(d.get('load_openb_fleet_ms'), ' ms')}"
    if "incidents_per_s" in d:
        return f"{fmt(d['incidents_per_s'], ' incidents/s', 0)} generated"
    return None


def _learnability(d: dict[str, Any]) -> str | None:
    if d.get("benchmark") == "rca_learnability_probe":
        parts = [f"{s} AC@1 {r['ac@1']:.3f}" for s, r in d.get("results", {}).items()]
        return ", ".join(parts) or None
    return None


def _origin_only(d: dict[str, Any]) -> str | None:
    if d.get("benchmark") != "rca_origin_only":
        return None
    split = "test" if "test" in d["splits"] else next(iter(d["splits"]))
    oo = d["splits"][split]["origin_only"]
    full = d["splits"][split]["full"]
    return (
        f"{split}: origin-only AC@1 {oo['gat']['ac@1']['value']:.3f} with the lone-alert rule, "
        f"{oo['gat:no_lone_rule']['ac@1']['value']:.3f} without ({oo['n']} storms); full "
        f"incidents {full['gat']['ac@1']['value']:.3f} / {full['gat:no_lone_rule']['ac@1']['value']:.3f}"
    )


def _sensitivity(d: dict[str, Any]) -> str | None:
    variants = d.get("variants")
    if isinstance(variants, list) and variants and "ac@1" in variants[0]:
        return f"default AC@1 {variants[0]['ac@1']:.3f}; {len(variants)} variants"
    return None


def _other(d: dict[str, Any]) -> str | None:
    """Scorer files, diagnoses, references and models: what the file is, not a single figure."""
    if "format" in d and ("head" in d or "base" in d or "weights" in d):
        return f"a scorer ({d['format']}), not a measurement"
    overall = d.get("overall")
    if isinstance(overall, dict) and "headroom_pct_min" in overall:
        return (
            f"relaxed reference {overall['headroom_pct_min']:.0f}-{overall['headroom_pct_max']:.0f} %"
            f" below the best heuristic on {overall.get('traces')} traces"
        )
    if d.get("benchmark") == "dynamic_insample_teacher":
        fits = [
            t["summary"]["fit"]["policies"]["insample_teacher"]["slowdown_diff_vs_best_pct"]
            for t in d.get("traces", {}).values()
            if not t.get("skipped")
        ]
        if fits:
            return f"in-sample teacher {max(fits):+.1f} to {min(fits):+.1f} % vs the best heuristic"
    if d.get("benchmark") == "serving_queue_model":
        best = min(d["results"], key=lambda r: r["p99_ms"])
        return f"model's best p99 {best['p99_ms']:.1f} ms (batch {best['batch']}); a simulation"
    runs = d.get("runs")
    if isinstance(runs, dict) and runs and "models" in d:
        return f"per-job diagnosis on {', '.join(runs)}"
    if isinstance(runs, list) and runs:
        return f"summary of {len(runs)} exploratory runs"
    if isinstance(d.get("decision"), str):
        return d["decision"]
    if "note" in d:
        return d["note"]
    return None


def _fuzz(d: dict[str, Any]) -> str | None:
    dbs = d.get("databases")
    if not isinstance(dbs, dict) or not all("server_errors_by_route" in r for r in dbs.values()):
        return None
    parts = []
    for name, r in dbs.items():
        ext = sum(n for route, n in r["server_errors_by_route"].items() if "/scheduler/" in route)
        parts.append(
            f"{name}: {r['server_errors'] - ext} server errors outside the extender, {ext} on it, "
            f"in {r['requests']} requests"
        )
    return "; ".join(parts)


def _plan(d: dict[str, Any]) -> str | None:
    if "registered_utc" in d or "preregistered_at" in d or "preregistration" in d:
        return "registered plan (rules written before the runs)"
    return None


HEADLINES: tuple[Callable[[dict[str, Any]], str | None], ...] = (
    _serving,
    _incident_worker,
    _incident_grouping,
    _ppo_eval,
    _dynamic_eval,
    _fidelity,
    _rca_eval,
    _gat_speed,
    _dynamic_heuristics,
    _failure_causes,
    _headroom,
    _probe,
    _speed,
    _learnability,
    _origin_only,
    _sensitivity,
    _fuzz,
    _plan,
    _other,
)


def headline_of(d: dict[str, Any]) -> str | None:
    for fn in HEADLINES:
        try:
            out = fn(d)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError):
            out = None
        if out:
            return out
    return None


SCRATCH = re.compile(r"/tmp/train(/s\d+[a-z0-9]*)?(?=[/ \"'`)]|$)")
"""A training run's scratch folder as older results recorded it (``/tmp/train/s12b``)."""


def cell(text: str | None, limit: int = 160) -> str:
    if text is None:
        return NOT_RECORDED
    text = " ".join(str(text).split()).replace("|", "\\|")
    # older results recorded the dataset folder as ../shared/data (docs/data.md)
    text = text.replace("../shared/data/", "$FLEETMIND_SHARED_DATA/")
    # and the scratch folder a training run wrote to as /tmp/train/<name>: shown as $RUN_DIR
    text = SCRATCH.sub("$RUN_DIR", text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def run_now_as(module: str) -> str:
    """The "run now as" cell of a moved script: its module, and what replaces each option of
    :data:`REMOVED_OPTIONS` that its older commands pass."""
    out = f"`python -m {module}`"
    for option, instead in REMOVED_OPTIONS.get(module, {}).items():
        out += f"; for a recorded `{option}`, {instead}"
    return out


def area_of(rel: str) -> str:
    """The index heading of a result at ``rel`` (relative to ``results/``): its area folder's."""
    return AREA_TITLES.get(rel.split("/")[0], "Other")


def row(path: Path, cited: list[str]) -> str:
    try:
        d = json.loads(path.read_text())
    except ValueError:
        d = None
    rel = path.relative_to(RESULTS).as_posix()
    link = f"[`{rel}`](results/{rel})"
    if not isinstance(d, dict):
        return f"| {link} | {NOT_RECORDED} | {NOT_RECORDED} | {NOT_RECORDED} | {NOT_RECORDED} | {NOT_RECORDED} | {', '.join(cited) or 'none'} |"
    cmd = command_of(d)
    cmd_cell = f"`{cell(cmd)}`" if cmd else NOT_RECORDED
    docs = ", ".join(f"[{c}](../{c})" for c in cited) or "none"
    return (
        f"| {link} | {cmd_cell} | {cell(commit_of(d))} | {cell(date_of(d, path))}"
        f" | {cell(provenance_of(d, path.name))} | {cell(headline_of(d))} | {docs} |"
    )


def _complete(path: Path) -> bool:
    """Whether the result at ``path`` records complete provenance (:func:`provenance_of`)."""
    try:
        d = json.loads(path.read_text())
    except ValueError:
        return False
    return isinstance(d, dict) and provenance_of(d, path.name) == "complete"


def render(results: Iterable[Path] | None = None, docs: Iterable[Path] | None = None) -> str:
    results = list(result_files() if results is None else results)
    docs = list(doc_files() if docs is None else docs)
    cited = citations(results, docs)
    n_cited = sum(bool(c) for c in cited.values())
    n_complete = sum(_complete(r) for r in results)
    lines = [
        "# Benchmark results",
        "",
        "<!-- Generated by `python -m benchmarks.index`; do not edit by hand."
        " tests/test_docs.py checks that it is current. -->",
        "",
        f"Every result JSON in [`benchmarks/results/`](results/): {len(results)} files, "
        f"{n_cited} of them cited by a document, filed by the area they measure in the folders"
        " `rca/`, `placement/` (fgd mode), `dynamic/` (dynamic mode) and `serving/`, named after the"
        " benchmark packages ([README.md](README.md) says why and how to rebuild the model files"
        " that are not in git). Each row gives the command that wrote the file, "
        "the commit and date it records, a headline figure read from it, and the documents that "
        'cite it. Older files lack some of these fields: the index then says "not recorded". A date'
        ' marked "(file name)" comes from the file name, not from the file.',
        "",
        f"The provenance column says whether a file records all of {', '.join(PROVENANCE_FIELDS)}"
        f" ({n_complete} of the {len(results)} do: `complete`), else what it lacks: the fields it does"
        " not record, a commit this repository does not hold (`commit not in this repository`),"
        " code changed beside the commit it names (`code modified beside the commit`), a recorded"
        " command that a shell would not run as written (`command does not paste back`: an"
        " unclosed quote, an unquoted label or one of `;<>|&()`) or that names a results or"
        " model path this checkout lacks (`names a missing path`: the folder moved since; what"
        " the run wrote, after `--out`, `--json` or `-o`, does not count). Results are"
        " not rewritten after the fact; a rerun records it all (`benchmarks/provenance.py`).",
        "",
        "Commands are as recorded, with the scratch folder a run wrote to shown as `$RUN_DIR`"
        " and the shared data folder as `$FLEETMIND_SHARED_DATA`. Scripts have since moved into"
        " areas and run as modules from the checkout root; a recorded `python benchmarks/<script>.py`"
        " (or `python -m benchmarks.<script>`) is now:",
        "",
        "| recorded script | run now as |",
        "| --- | --- |",
    ]
    lines += [f"| `{old}` | {run_now_as(new)} |" for old, new in MOVED_SCRIPTS.items()]
    by_area: dict[str, list[Path]] = {}
    for r in results:
        by_area.setdefault(area_of(r.relative_to(RESULTS).as_posix()), []).append(r)
    order = [*AREA_TITLES.values(), "Other"]
    for area in order:
        if area not in by_area:
            continue
        lines += [
            "",
            f"## {area}",
            "",
            "| file | command | commit | date (UTC) | provenance | headline | cited by |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        lines += [row(r, cited[r]) for r in by_area[area]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if INDEX.md is out of date")
    a = ap.parse_args(argv)
    text = render()
    if a.check:
        if not INDEX.is_file() or INDEX.read_text() != text:
            print(f"{INDEX} is out of date: run python -m benchmarks.index", file=sys.stderr)
            return 1
        return 0
    INDEX.write_text(text)
    print(f"wrote {INDEX}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main, prog="benchmarks.index"))
