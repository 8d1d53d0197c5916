"""``fleetmind sched ...``: placement commands (one handler function per sub-command).

``fleetmind sched evaluate --trace T --mode fgd|dynamic [--policies ...] [--seeds ...] [--model REF]
[--workers N] --json P`` runs heuristics (and the released model's stages: ``ppo``, the released
policy; ``clone``, its warm-start clone before PPO; ``teacher``, the scorer the clone imitated; see
``rl/named_policies.py``) on a trace and writes
``{"trace", "mode", "seeds", "policies": {name: {metrics..., "ms_per_decision"}}}``. In fgd mode the
metrics are ``unallocated_gpu_pct_at_100`` / ``_at_130`` (mean over seeds), their ``_std``, the
``per_seed`` values, and, for the shared openb traces on the openb GPU node list, ``published_unallocated_gpu_pct_at_100``
/ ``_130`` (mean of the FGD authors' per-seed values over the same seeds; a policy they published
no value for on some of the seeds gets its own ``"published_reason"`` instead; elsewhere
``"published": null`` and ``"published_reason"``, :func:`published_mismatch`). A value that is not defined
(a level no pod record came near, on a node list of a few nodes) is ``null`` in the JSON and ``-``
in the table: the file is strict JSON (:func:`json_safe`).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
import textwrap
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fleetmind import argtypes
from fleetmind.argtypes import check_writable_file
from fleetmind.cli.common import (
    MODEL_FILES,
    add_group,
    model_input,
    refuse_input_as_output,
    refuse_same_output,
)
from fleetmind.data.errors import ConfigError, DataError
from fleetmind.data.openb_synthetic import SYNTHETIC_LABEL
from fleetmind.data.paths import openb_is_synthetic
from fleetmind.progress import bar_disable, show_bar
from fleetmind.redact import terminal_safe
from fleetmind.training.io import json_safe, write_json, write_text_whole

DEFAULT_POLICIES = ["Random", "DotProd", "GpuClustering", "GpuPacking", "BestFit", "FGD"]
DEFAULT_SEEDS = list(range(42, 52))
MAX_SEEDS = 10_000
"""The most seeds one ``--seeds`` takes (each is a whole run: ten are the published protocol)."""


def parse_seeds(items: list[str]) -> list[int]:
    """Seeds from ``["42", "43"]``, ``["42-51"]`` or ``["42,43"]`` (ranges inclusive), each once
    in the order first given: a seed given twice (``42 42``, ``42-51 50``) would run twice and
    weigh twice in the mean, so the repeat is dropped with one ``fleetmind: warning:`` line on
    stderr naming the repeated seeds."""
    seeds: dict[int, None] = {}
    repeated: dict[int, None] = {}
    for item in items:
        for part in str(item).split(","):
            part = part.strip()
            if not part:
                continue
            try:
                if "-" in part:
                    lo, hi = part.split("-", 1)
                    a, b = int(lo), int(hi)
                    if b < a:
                        raise ConfigError(f"bad seed range {part!r}: end before start")
                else:
                    a = b = int(part)
            except ValueError:
                raise ConfigError(
                    f"bad seed {part!r}: expected an integer or a range like 42-51"
                ) from None
            if b >= argtypes.SEED_LIMIT:
                raise ConfigError(f"bad seed {part!r}: a seed lies in [0, 2**32)")
            if b - a + 1 > MAX_SEEDS:  # before the range is expanded
                raise ConfigError(f"at most {MAX_SEEDS:,} seeds at once, got {part!r}")
            for s in range(a, b + 1):
                if s in seeds:
                    repeated[s] = None
                seeds[s] = None
            if len(seeds) > MAX_SEEDS:
                raise ConfigError(f"at most {MAX_SEEDS:,} seeds at once, got {part!r}")
    if not seeds:
        raise ConfigError("no seeds given")
    if repeated:
        print(
            f"fleetmind: warning: seed(s) {seed_ranges(list(repeated))} given more than once;"
            " each runs once",
            file=sys.stderr,
        )
    return list(seeds)


def seed_ranges(seeds: list[int]) -> str:
    """``[42, 43, 44, 7]`` -> ``"7, 42-44"``: sorted, consecutive seeds as inclusive ranges."""
    runs: list[list[int]] = []  # [first, last] of each run of consecutive seeds
    for s in sorted(set(seeds)):
        if runs and s == runs[-1][1] + 1:
            runs[-1][1] = s
        else:
            runs.append([s, s])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def check_writable(path: str | None, flag: str) -> None:
    """Check, before any work, that the file ``path`` can be written (nothing for ``None``;
    :func:`fleetmind.argtypes.check_writable_file`).

    Raises:
        ConfigError: naming ``flag``, the path and what blocks it.
    """
    check_writable_file(path, flag)


def _openb_files(names: Any, kind: str) -> list[str]:
    """The files the ``kind`` (``"trace"`` or ``"node"``) names or paths ``names`` (one, a list or
    ``None``; ``None`` is the openb GPU node list for ``"node"``) mean, for
    :func:`fleetmind.cli.common.refuse_input_as_output`; a name that resolves to nothing is kept
    as it is (its loader refuses it later)."""
    from fleetmind.data.openb import node_file, trace_file

    resolve = trace_file if kind == "trace" else node_file

    if names is None:
        names = ["gpu_node"] if kind == "node" else []
    elif not isinstance(names, (list, tuple)):
        names = [names]
    out = []
    for name in names:
        try:
            out.append(str(resolve(str(name))))
        except (DataError, OSError):
            out.append(str(name))
    return out


def _load_ppo(ref: str | None):  # noqa: ANN202 - returns the PPO package's policy object
    from fleetmind.rl.policy_adapter import load_ppo_policy

    return load_ppo_policy(ref)


def published_mismatch(trace: Any, nodes: Any) -> str | None:
    """Why the FGD authors' published values do not describe a run of ``trace`` on ``nodes`` (a
    loaded :class:`fleetmind.data.openb.PodTrace` and
    :class:`fleetmind.data.openb.OpenbNodes`), or None when they do: they were measured on
    the shared openb trace files and the openb GPU node list (``gpu_node``), so a trace file
    elsewhere (a copy, or any CSV named like an openb trace) or another node list gets none."""
    from fleetmind.data.paths import openb_csv_dir

    try:
        folder = openb_csv_dir().resolve()
    except DataError:
        return "the shared openb data folder is absent"
    path = Path(trace.source).resolve()
    if path.parent != folder or not path.name.startswith("openb_pod_list_"):
        return f"the trace {trace.source} is not one of the shared openb trace files in {folder}"
    if Path(nodes.source).resolve() != folder / "openb_node_list_gpu_node.csv":
        return f"the node list {nodes.source} is not the openb GPU node list the authors used"
    return None


def _add_published(result: dict, trace: Any, nodes: Any, seeds: list[int]) -> None:
    """The published means beside each policy (:func:`_published_means`) when they describe this
    run; else ``"published": null`` and ``"published_reason"`` in ``result``."""
    reason = published_mismatch(trace, nodes)
    if reason is None:
        reason = _published_means(trace.name, result["policies"], seeds)
    if reason is not None:
        result["published"] = None
        result["published_reason"] = f"published FGD values omitted: {reason}"


def _published_file() -> str | None:
    """The FGD authors' published figures that fgd mode reads (``fgd_published_unallocated.csv``
    beside the openb CSV folder, as :func:`fleetmind.data.openb.load_fgd_published` finds it), or
    None without an openb data folder."""
    from fleetmind.data.paths import openb_csv_dir

    try:
        return str(openb_csv_dir().parent / "fgd_published_unallocated.csv")
    except DataError:
        return None


def _released_placement(mode: str) -> str:
    """The released placement model folder that ``mode``'s policies ppo, clone, teacher and
    rollout read when ``--model`` is not given (``models/placement``; dynamic mode:
    ``models/placement-dynamic``)."""
    if mode == "fgd":
        from fleetmind.rl.policy_adapter import RELEASED_DIR

        return str(RELEASED_DIR)
    from fleetmind.data.paths import MODELS_DIR

    return str(MODELS_DIR / "placement-dynamic")


def _published_means(trace: str, policies: dict, seeds: list[int]) -> str | None:
    """Each policy's ``published_unallocated_gpu_pct_at_100`` / ``_130`` (the authors' values
    averaged over ``seeds``, %) and ``published_seeds``, when the authors published a value for
    every one of ``seeds``; when some seed has none, the policy's ``published_reason`` names the
    seeds without one instead (a mean over other seeds would not describe the run).

    Returns:
        None, or why no policy got published values: the published figures' file is there but
        cannot be read (a missing file gives None: it is not shipped with every data folder).
    """
    from fleetmind.data.openb import load_fgd_published

    try:
        pub = load_fgd_published()
    except DataError as err:
        path = _published_file()
        if path is None or not Path(path).exists():
            return None
        return f"the published figures cannot be read: {err}"
    for name, metrics in policies.items():
        rows = pub.get((trace, name))
        if not rows:
            continue
        missing = [s for s in seeds if s not in rows]
        if missing:  # a mean over fewer seeds would sit beside ours over all of them
            metrics["published_reason"] = (
                f"published FGD values omitted: the authors published no value for seed(s) "
                f"{seed_ranges(missing)} (they published seeds {seed_ranges(list(rows))})"
            )
            continue
        vals = [rows[s] for s in seeds]
        metrics["published_unallocated_gpu_pct_at_100"] = round(
            sum(v[0] for v in vals) / len(vals), 4
        )
        metrics["published_unallocated_gpu_pct_at_130"] = round(
            sum(v[1] for v in vals) / len(vals), 4
        )
        metrics["published_seeds"] = len(vals)
    return None


def _evaluate_fgd(args: argparse.Namespace, policies: list[str], seeds: list[int]) -> dict:
    from fleetmind.data.openb import (
        check_gpu_specs,
        check_pod_sizes,
        load_openb_nodes,
        load_openb_trace,
    )
    from fleetmind.envs.fgd_mode import aggregate_results, evaluate_fgd
    from fleetmind.envs.policies import POLICIES, canonical_policy_name
    from fleetmind.rl.named_policies import STAGE_NAMES

    trace = load_openb_trace(args.trace)
    nodes = load_openb_nodes(args.nodes)
    if nodes.total_gpus == 0:  # before the checks below, whose "largest node has 0" misleads
        raise DataError(f"node list {nodes.source} has no GPUs")
    where = f"the node list {nodes.source}"
    check_gpu_specs(trace, nodes.model.tolist(), where)
    check_pod_sizes(trace, nodes.cpu_milli, nodes.memory_mib, nodes.num_gpu, where)
    named = []
    stages = [p.lower() for p in policies if p.lower() in STAGE_NAMES]
    for p in policies:
        if p.lower() in STAGE_NAMES:
            continue
        try:
            named.append(canonical_policy_name(p))
        except ConfigError:  # the stage names too, which envs.policies does not know
            raise ConfigError(
                f"unknown policy {p!r}; known: {', '.join(STAGE_NAMES)}, {', '.join(POLICIES)}"
            ) from None
    if getattr(args, "ray_address", None):
        result = _evaluate_fgd_ray(args, trace, named + stages, seeds)
        _add_published(result, trace, nodes, seeds)
        return result
    objects = _stage_policies(args.model, stages)
    result = evaluate_fgd(
        trace, named, seeds, nodes=nodes, workers=args.workers, progress=show_bar()
    )
    result[LOADED_KEY] = objects  # popped by the caller (_loaded_versions), never written
    if objects:
        extra = evaluate_fgd(trace, objects, seeds, nodes=nodes, progress=show_bar())
        result["policies"].update(extra["policies"])
    if "teacher" in stages:
        runs = [_teacher_run(args.model, trace, s, nodes) for s in seeds]
        result["policies"]["teacher"] = aggregate_results(runs)
    if "rollout" in stages:
        result["policies"]["rollout"] = _rollout_fgd(args, trace, seeds, nodes)
    _add_published(result, trace, nodes, seeds)
    if args.causes:
        causes: dict[str, Any] = {n: n for n in named}
        causes.update(objects)
        result["failure_causes"] = _failure_causes(trace, nodes, causes, seeds)
    return result


def _evaluate_fgd_ray(
    args: argparse.Namespace, trace: Any, policies: list[str], seeds: list[int]
) -> dict:
    """Every (policy, seed) run as a Ray task (``rl.scaleout.fgd_eval_job``); same numbers as the
    local path, which runs the same functions."""
    from tqdm import tqdm

    from fleetmind.envs.fgd_mode import aggregate_results
    from fleetmind.rl.scaleout import fgd_eval_job, job_path, run_tasks

    if args.causes:
        raise ConfigError("--causes runs locally; drop --ray-address to use it")
    if "rollout" in policies:
        raise ConfigError("policy 'rollout' runs locally; drop --ray-address to use it")
    if args.model is not None and ("clone" in policies or "teacher" in policies):
        _local(args.model)
    ref = job_path(args.trace)
    jobs = [
        (ref, p, s, job_path(args.nodes), job_path(args.model)) for p in policies for s in seeds
    ]
    with tqdm(
        total=len(jobs), desc=f"fgd {trace.name} (ray)", unit="run", disable=bar_disable()
    ) as bar:
        runs = run_tasks(fgd_eval_job, jobs, ray_address=args.ray_address, progress=bar.update)
    out: dict[str, Any] = {}
    for i, p in enumerate(policies):
        out[p] = aggregate_results(runs[i * len(seeds) : (i + 1) * len(seeds)])
    return {"trace": trace.name, "mode": "fgd", "seeds": list(seeds), "policies": out}


def _stage_policies(model: str | None, stages: list[str]) -> dict[str, Any]:
    """``ppo`` (the released policy or ``--model``) and ``clone`` (its folder's ``clone.onnx``)."""
    from fleetmind.rl.named_policies import clone_file, model_folder
    from fleetmind.rl.policy_adapter import RELEASED_DIR

    out: dict[str, Any] = {}
    if "ppo" in stages:
        out["ppo"] = _load_ppo(model)
    if "clone" in stages:
        out["clone"] = _load_ppo(str(clone_file(model_folder(_local(model), RELEASED_DIR))))
    return out


def rollout_config(args: argparse.Namespace) -> Any:
    """The ``--rollout-*`` options as an :class:`fleetmind.rl.rollout.RolloutConfig` (checked)."""
    from fleetmind.rl.rollout import RolloutConfig

    return RolloutConfig(
        k=args.rollout_k,
        band=tuple(args.rollout_band) if args.rollout_band else None,
        every=args.rollout_every,
        future=args.rollout_future,
        samples=args.rollout_samples,
        depth=args.rollout_depth,
        sample_seed=args.rollout_seed,
    )


def _rollout_fgd(args: argparse.Namespace, trace: Any, seeds: list[int], nodes: Any) -> dict:
    """Policy ``rollout`` in fgd mode: the model folder's clone improved by rollouts, one run per
    seed (``rl.rollout.run_rollout_fgd``); the aggregate plus where it deviated from the clone."""
    from dataclasses import asdict

    from tqdm import tqdm

    from fleetmind.envs.fgd_mode import aggregate_results
    from fleetmind.rl.rollout import run_rollout_fgd

    cfg = rollout_config(args)
    clone = _stage_policies(args.model, ["clone"])["clone"]
    runs, logs = [], {}
    for s in seeds:
        with tqdm(
            desc=f"rollout {trace.name} seed {s}", unit="pod", leave=False, disable=bar_disable()
        ) as bar:
            res, log = run_rollout_fgd(trace, clone, s, nodes, cfg, progress=bar.update)
        runs.append(res)
        logs[str(s)] = log.summary()
    out = aggregate_results(runs)
    out["rollout"] = {"config": {**asdict(cfg), "band": list(cfg.window("fgd"))}, "per_seed": logs}
    return out


def _local(model: str | None) -> str | None:
    if model is not None and str(model).startswith(("models:/", "runs:/")):
        raise ConfigError(
            "policies 'clone' and 'teacher' need --model to be a local model folder (an MLflow URI "
            "carries only the released policy)"
        )
    return model


def _teacher_run(model: str | None, trace: Any, seed: int, nodes: Any) -> Any:
    from fleetmind.rl.named_policies import model_folder, run_teacher_fgd, teacher_file
    from fleetmind.rl.policy_adapter import RELEASED_DIR

    return run_teacher_fgd(
        trace, teacher_file(model_folder(_local(model), RELEASED_DIR)), seed, nodes
    )


def _failure_causes(trace: Any, nodes: Any, policies: dict[str, Any], seeds: list[int]) -> dict:
    """``--causes``: each policy's failed GPU request at 100 % arrived, by cause and pod kind
    (``envs.failure_causes``, the runs repeated with the diagnosis), and the relaxed-packing lower
    bound no policy can beat (``envs.packing_bound``). Means over seeds, % of GPU capacity."""
    import numpy as np
    from tqdm import tqdm

    from fleetmind.envs.failure_causes import run_with_causes, summarise_breakdowns
    from fleetmind.envs.packing_bound import fgd_run_bound

    out: dict[str, Any] = {"policies": {}}
    bar = tqdm(
        total=len(policies) * len(seeds), desc="failure causes", unit="run", disable=bar_disable()
    )
    for name, pol in policies.items():
        rows = []
        for seed in seeds:
            rows.append(run_with_causes(trace, pol, seed, nodes)[1])
            bar.update(1)
        out["policies"][name] = summarise_breakdowns(rows)
    bar.close()
    out["lower_bound_pct"] = round(
        float(np.mean([fgd_run_bound(trace, s, nodes).min_failed_pct for s in seeds])), 3
    )
    out["note"] = (
        "failed request by what stopped each pod when it failed (host: GPU room but not the CPU or"
        " memory; gpu_fragmented: GPU room split; gpu_full: none left); lower_bound_pct: what any"
        " policy must leave unplaced (envs.packing_bound); see docs/ppo.md"
    )
    return out


def _evaluate_dynamic(
    args: argparse.Namespace, policies: list[str] | None, seeds: list[int]
) -> dict:
    from tqdm import tqdm

    from fleetmind.data.openb import check_gpu_specs, check_pod_sizes, load_openb_trace
    from fleetmind.envs.dynamic.evaluate import evaluate_dynamic

    _refuse_fgd_scaleout(args)
    if policies and any(p.lower() in ("ppo", "clone", "teacher", "rollout") for p in policies):
        return _evaluate_dynamic_agent(args, policies, seeds)
    load_start = _load_now()
    trace = load_openb_trace(args.trace)
    kwargs: dict[str, Any] = {}
    if args.backfill_depth is not None:
        kwargs["backfill_depth"] = args.backfill_depth
    fleet = _dynamic_fleet(args.nodes)
    if fleet is not None:  # the node list as given: all its GPU nodes, no sample
        kwargs.update(fleet=fleet, node_fraction=1.0)
        where = f"the node list {fleet.source}"
        check_gpu_specs(trace, fleet.model_names, where)
        check_pod_sizes(trace, fleet.cpu_milli, fleet.memory_mib, fleet.gpu_count, where)
    elif (openb := _openb_nodes()) is not None:
        check_gpu_specs(trace, sorted(set(openb.model.tolist())), "the openb node list")
        check_pod_sizes(
            trace, openb.cpu_milli, openb.memory_mib, openb.num_gpu, "the openb node list"
        )
    n_runs = len(policies) * len(seeds) if policies else None
    with tqdm(total=n_runs, desc=f"dynamic {args.trace}", unit="run", disable=bar_disable()) as bar:
        per_policy = evaluate_dynamic(
            trace, policies, seeds, progress=lambda _msg: bar.update(1), **kwargs
        )
    out: dict[str, Any] = {"trace": str(args.trace), "mode": "dynamic", "seeds": list(seeds)}
    if fleet is not None:
        out["nodes"] = {"source": fleet.source, "n_nodes": fleet.n_nodes, "n_gpus": fleet.n_gpus}
    out["policies"] = per_policy
    return {**_evaluate_provenance(args, load_start), **out}


def _refuse_fgd_scaleout(args: argparse.Namespace) -> None:
    """``--workers`` and ``--ray-address`` spread fgd mode's runs; dynamic mode runs every policy
    in this process, so it refuses them rather than ignore them.

    Raises:
        ConfigError: either given in dynamic mode.
    """
    given = [f"--workers {args.workers}"] if args.workers != 1 else []
    if getattr(args, "ray_address", None):
        given.append(f"--ray-address {args.ray_address}")
    if given:
        raise ConfigError(
            f"{' and '.join(given)}: fgd-mode option(s); dynamic mode runs its policies in one "
            "process (drop them)"
        )


def _load_now() -> list[float] | None:
    """The 1, 5 and 15-minute load averages (:func:`fleetmind.provenance.load_now`)."""
    from fleetmind.provenance import load_now

    return load_now()


def _evaluate_command(args: argparse.Namespace) -> str:
    """The ``fleetmind sched evaluate`` line that reruns ``args`` (either mode), quoted for a
    POSIX shell (``shlex.join``); URIs with credentials are redacted (``fleetmind.redact``)."""
    import shlex

    from fleetmind.redact import safe_uri

    out = ["fleetmind", "sched", "evaluate", "--trace", str(args.trace), "--mode", args.mode]
    if args.policies:
        out += ["--policies", *args.policies]
    out += ["--seeds", *map(str, args.seeds)]
    for flag, value in (
        ("--model", args.model),
        ("--nodes", args.nodes),
        ("--backfill-depth", args.backfill_depth),
        ("--workers", args.workers if args.workers != 1 else None),
        ("--ray-address", getattr(args, "ray_address", None)),
    ):
        if value is not None:
            out += [flag, safe_uri(str(value))]
    if args.causes:
        out += ["--causes"]
    if any(str(p).lower() == "rollout" for p in args.policies or []):
        out += ["--rollout-k", str(args.rollout_k), "--rollout-every", str(args.rollout_every)]
        if args.rollout_band:
            out += ["--rollout-band", *map(str, args.rollout_band)]
        out += ["--rollout-future", args.rollout_future, "--rollout-samples"]
        out += [str(args.rollout_samples), "--rollout-depth", str(args.rollout_depth)]
        out += ["--rollout-seed", str(args.rollout_seed)]
    if args.json is not None:
        out += ["--json", str(args.json)]
    return shlex.join(out)


def _evaluate_provenance(args: argparse.Namespace, load_start: list[float] | None) -> dict:
    """The provenance keys a result of either mode starts with, those of ``rca evaluate --json``
    and the benchmarks (:func:`fleetmind.provenance.run_provenance`; versions of gymnasium and
    ONNX Runtime besides). ``load_start``: the 1, 5 and 15-minute load averages before the runs."""
    from fleetmind.provenance import run_provenance

    return run_provenance(_evaluate_command(args), load_start, ("gymnasium", "onnxruntime"))


DYNAMIC_NODE_CLUSTERS = 3
"""Clusters a ``--nodes`` list is dealt into in dynamic mode (as the openb fleet; fewer when the
list has fewer nodes)."""


def _dynamic_fleet(nodes_arg: str | None) -> Any:
    """``--nodes`` in dynamic mode: the node list (read as fgd mode reads it, GPU nodes only) as a
    fleet of :data:`DYNAMIC_NODE_CLUSTERS` clusters (seed 0); None without ``--nodes``.

    Raises:
        DataError: no such file, a malformed row, or no GPU node.
    """
    if nodes_arg is None:
        return None
    from fleetmind.data.fleet_io import fleet_from_openb_nodes
    from fleetmind.data.openb import load_openb_nodes

    nodes = load_openb_nodes(nodes_arg)  # GPU nodes; fleet_from_openb_nodes refuses none
    return fleet_from_openb_nodes(nodes, n_clusters=max(1, min(DYNAMIC_NODE_CLUSTERS, len(nodes))))


def _openb_nodes() -> Any:
    """The openb GPU node list (:class:`fleetmind.data.openb.OpenbNodes`), or None when it cannot
    be read (the evaluation then says why)."""
    from fleetmind.data.openb import load_openb_nodes

    try:
        return load_openb_nodes()
    except DataError:
        return None


def _checked_dynamic_trace(trace_name: str, cfg: Any) -> Any:
    """The trace ``trace_name``, loaded once, after the warnings of the heuristic path
    (docs/placement.md, "Warnings") against the nodes the model's runs use: its node sample, as
    its env draws it (``cfg``: the model's dynamic-mode config)."""
    from fleetmind.data.openb import check_gpu_specs, check_pod_sizes, load_openb_trace
    from fleetmind.envs.multicluster_env import MultiClusterPlacementEnv

    trace = load_openb_trace(trace_name)
    fleet = MultiClusterPlacementEnv(**cfg.env_kwargs(trace)).fleet
    where = (
        f"the model's node sample ({fleet.n_nodes} nodes, {cfg.node_fraction:.0%} of the openb "
        "GPU nodes)"
    )
    check_gpu_specs(trace, sorted(set(fleet.model.tolist())), where)
    check_pod_sizes(trace, fleet.cpu_milli, fleet.memory_mib, fleet.num_gpu, where)
    return trace


def _evaluate_dynamic_agent(
    args: argparse.Namespace, policies: list[str], seeds: list[int]
) -> dict:
    """Dynamic mode with the PPO agent: every policy runs in the agent's own setting
    (``rl.dynamic_eval.DynEvalConfig``: 10 % node sample, 2,048 jobs, offered load 0.8), on the
    same job stream per seed, because the agent was trained on that setting and its candidates
    come from ``fleetmind/MultiClusterPlacement-v0``."""
    from dataclasses import asdict, replace

    from tqdm import tqdm

    from fleetmind.data.paths import MODELS_DIR
    from fleetmind.envs.dynamic.policies import available_policies
    from fleetmind.rl.dynamic_eval import (
        actor_fn,
        evaluate_streams,
        load_dynamic_actor,
        model_config,
    )
    from fleetmind.rl.named_policies import clone_file, load_dynamic_teacher, model_folder

    def norm(name: str) -> str:
        return name.replace("_", "").replace("-", "").lower()

    load_start = _load_now()
    if args.nodes is not None:  # the agent's setting fixes the fleet (rl.dynamic_eval)
        raise ConfigError(
            "--nodes: in dynamic mode the policies ppo, clone, teacher and rollout run on the "
            "model's own fleet (a sample of the openb GPU nodes); drop --nodes or those policies"
        )
    known = {norm(n): n for n in available_policies()}
    stages = ("ppo", "clone", "teacher", "rollout")
    heuristics = []
    for p in policies:
        if p.lower() in stages:
            continue
        if norm(p) not in known:
            raise ConfigError(
                f"unknown policy {p!r}; known: {', '.join(stages)}, {', '.join(known.values())}"
            )
        heuristics.append(known[norm(p)])
    ref = _local(args.model) if args.model else MODELS_DIR / "placement-dynamic"
    folder = model_folder(ref, Path(ref))
    cfg = model_config(ref)  # the model's own setting (queue_features...); defaults otherwise
    if args.backfill_depth is not None:  # every policy in the window asked for
        cfg = replace(cfg, backfill_depth=args.backfill_depth)
    actors = {}
    wanted = [p.lower() for p in policies]
    if "ppo" in wanted:
        actors["ppo"] = actor_fn(load_dynamic_actor(ref, n_candidates=cfg.n_candidates))
    if "clone" in wanted:
        clone = load_dynamic_actor(clone_file(folder), n_candidates=cfg.n_candidates)
        actors["clone"] = actor_fn(clone)
    if "teacher" in wanted:
        teacher = load_dynamic_teacher(folder)  # K/F the model's env's, else ModelLoadError
        actors["teacher"] = teacher.check_env(
            cfg.n_candidates, cfg.queue_features, folder / "teacher.json"
        )
    extra, rollouts = {}, {}
    if "rollout" in wanted:
        base = replace(cfg, queue_order=None)  # the rollout improves the clone, a FIFO stage
        extra["rollout"] = _rollout_dynamic_factory(args, folder, base, rollouts)
    trace = _checked_dynamic_trace(args.trace, cfg)
    # a model with a learned queue order (--algo order) runs with it; the heuristics and the
    # stages below it (teacher, clone, rollout) run with the simulator's FIFO queue
    with tqdm(
        total=len(policies) * len(seeds),
        desc=f"dynamic {args.trace}",
        unit="run",
        disable=bar_disable(),
    ) as bar:
        per_policy = evaluate_streams(
            trace,
            seeds,
            actors=actors,
            heuristics=heuristics,
            config=cfg,
            progress=lambda _msg: bar.update(1),
            policies=extra,
            ordered={"ppo"},
        )
    if "rollout" in per_policy:
        for _, bar in rollouts.values():
            bar.close()
        rcfg = rollout_config(args)
        per_policy["rollout"]["rollout"] = {
            "config": {**asdict(rcfg), "band": list(rcfg.window("dynamic"))},
            "per_seed": {s: pol.log.summary() for s, (pol, _) in rollouts.items()},
        }
    _add_offered_load(per_policy, args.trace, cfg, seeds)
    return {
        **_evaluate_provenance(args, load_start),
        "trace": str(args.trace),
        "mode": "dynamic",
        "setting": {**asdict(cfg), "model": str(ref)},
        "seeds": list(seeds),
        "policies": per_policy,
    }


def _add_offered_load(per_policy: dict[str, Any], trace: str, cfg: Any, seeds: list[int]) -> None:
    """Each policy's ``per_seed["offered_load"]``, as the heuristic path gives it: the offered GPU
    load of each seed's job stream (the same for every policy: ``rl.dynamic_eval.job_stream``;
    null where every job arrives at one instant)."""
    from fleetmind.envs.multicluster_env import MultiClusterPlacementEnv
    from fleetmind.rl.dynamic_eval import job_stream

    env = MultiClusterPlacementEnv(**cfg.env_kwargs(trace))
    loads = [float(job_stream(env, int(s))[0].offered_load) for s in seeds]
    for entry in per_policy.values():
        entry.setdefault("per_seed", {})["offered_load"] = list(loads)


def _rollout_dynamic_factory(
    args: argparse.Namespace, folder: Path, cfg: Any, runs: dict[str, Any]
) -> Any:
    """``make(env, seed)`` of the dynamic-mode rollout policy over the folder's clone; each policy
    built lands in ``runs[str(seed)]`` (its ``log`` is read after the run)."""
    from tqdm import tqdm

    from fleetmind.envs.multicluster_env import MultiClusterPlacementEnv
    from fleetmind.rl.dynamic_eval import load_dynamic_actor
    from fleetmind.rl.named_policies import clone_file
    from fleetmind.rl.rollout import DynamicRolloutPolicy

    rcfg = rollout_config(args)
    model = load_dynamic_actor(clone_file(folder), n_candidates=cfg.n_candidates)

    def make(env: Any, seed: int) -> Any:
        def new_env() -> Any:
            return MultiClusterPlacementEnv(**cfg.env_kwargs(env.trace))

        bar = tqdm(
            total=cfg.n_jobs,
            desc=f"rollout seed {seed}",
            unit="job",
            leave=False,
            disable=bar_disable(),
        )
        pol = DynamicRolloutPolicy(model, new_env, seed, rcfg, progress=bar.update)
        runs[str(seed)] = (pol, bar)
        return pol

    return make


@contextlib.contextmanager
def trace_warnings_on_stderr() -> Iterator[None]:
    """Print the :class:`fleetmind.data.openb.TraceWarning` raised inside as one line each,
    ``fleetmind: warning: <message>`` on stderr (other warnings keep Python's format); through
    ``tqdm.write``, so that a line said while a progress bar runs gets a line of its own. Each
    distinct message is printed once: a trace read at several steps of a run (and by forked
    environment workers, which inherit the messages said before they start) warns once, where
    Python's ``default`` action said it again whenever a library changed the warning filters."""
    from tqdm import tqdm

    from fleetmind.data.openb import TraceWarning

    shown = warnings.showwarning
    said: set[str] = set()

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: Any = None,
        line: str | None = None,
    ) -> None:
        if issubclass(category, TraceWarning):
            text = terminal_safe(" ".join(str(message).split()))  # a trace file's own text
            if text not in said:
                said.add(text)
                tqdm.write(f"fleetmind: warning: {text}", file=sys.stderr)
                sys.stderr.flush()
        else:
            shown(message, category, filename, lineno, file, line)

    with warnings.catch_warnings():
        warnings.simplefilter("default", TraceWarning)  # each distinct message once
        warnings.showwarning = show
        yield


def cmd_evaluate(args: argparse.Namespace) -> int:
    """``fleetmind sched evaluate``: policies x seeds on one trace; prints a table, writes JSON."""
    with trace_warnings_on_stderr():
        return _cmd_evaluate(args)


def _cmd_evaluate(args: argparse.Namespace) -> int:
    seeds = parse_seeds(args.seeds)
    check_writable(args.json, "--json")  # before the runs, not after them
    refuse_input_as_output(
        args.json,
        "--json",
        [
            ("--trace", _openb_files(args.trace, "trace"), ()),
            ("--nodes", _openb_files(args.nodes, "node"), ()),
            model_input(args.model or None, _released_placement(args.mode)),
            *([("the published FGD figures", _published_file(), ())] if args.mode == "fgd" else []),
        ],
    )
    if args.workers < 1:
        raise ConfigError("--workers must be at least 1")
    rollout_config(args)  # bad --rollout-* options fail before any run
    if args.causes and args.mode != "fgd":
        raise ConfigError(
            "--causes is an fgd-mode option (dynamic mode has no failed pods: jobs queue)"
        )
    depth = args.backfill_depth
    if depth is not None and (args.mode != "dynamic" or depth < 0):
        raise ConfigError(
            "--backfill-depth is a dynamic-mode option and must be >= 0"
            f" (got {depth} in {args.mode} mode)"
        )
    policies = _policy_list(args)
    inputs = _evaluate_inputs(args, policies)  # hashed before the runs: the bytes they read
    if args.mode == "fgd":
        load_start = _load_now()
        result = _evaluate_fgd(args, policies, seeds)
        _loaded_versions(inputs["model"], result.pop(LOADED_KEY, {}))
        result = {**_evaluate_provenance(args, load_start), **result}  # as in dynamic mode
    else:
        result = _evaluate_dynamic(args, policies, seeds)
    result["policies"] = _in_order(result["policies"], policies)
    result.update(inputs)
    if openb_is_synthetic():
        result["data"] = SYNTHETIC_LABEL
    result = json_safe(result)  # NaN (a level no record reached) -> null, '-' in the table
    # the file before the screen: a reader that stops early (| head) does not cost the file
    write_json(args.json, result)
    _print_table(result, wide=args.wide)
    if "failure_causes" in result:
        _print_causes(result["failure_causes"])
    return 0


STAGES = ("ppo", "clone", "teacher", "rollout")
"""The released model's stages (``rl/named_policies.py``): the policies ``--model`` is for."""


def _evaluate_inputs(args: argparse.Namespace, policies: list[str] | None) -> dict[str, Any]:
    """The input files ``sched evaluate --json`` records after its other keys, each as given, with
    its absolute path and SHA-256 (:func:`fleetmind.provenance.input_file`), so that a result
    says which bytes it scored when a name (``default``, ``gpu_node``, the released model folder)
    later means other files: ``trace_file``, the trace, and ``nodes_file``, the node list
    (``--nodes``, else the openb GPU node list that both modes run on without it; it sets every
    unallocated-GPU figure), each null when it does not resolve (the run then refuses it), and
    ``model`` (:func:`_model_files`)."""
    from fleetmind.data.openb import node_file, trace_file
    from fleetmind.provenance import input_file

    def hashed(given: str, resolve: Any) -> dict[str, str] | None:
        try:
            return input_file(given, resolve(given))
        except (DataError, OSError):
            return None

    trace = hashed(str(args.trace), trace_file)
    nodes = hashed(str(args.nodes or "gpu_node"), node_file)
    return {"model": _model_files(args, policies), "trace_file": trace, "nodes_file": nodes}


def _model_files(args: argparse.Namespace, policies: list[str] | None) -> dict[str, Any] | None:
    """``model`` of ``sched evaluate --json``: for each model stage the run scores (``ppo``,
    ``clone``, ``teacher``, ``rollout``; :data:`STAGES`), the file it reads (:func:`_stage_file`)
    as :func:`fleetmind.provenance.input_file` records it, ``given`` being ``--model`` or the
    released folder; None when no stage runs. An MLflow URI has no local file (``path`` and
    ``sha256`` null, ``given`` with any password masked by :func:`fleetmind.redact.safe_uri`,
    and ``version``, the registry version the run loaded, filled in after it by
    :func:`_loaded_versions`); a file that is not there is left out (its loader refuses the run)."""
    from fleetmind.data.mlflow_store import is_mlflow_uri
    from fleetmind.provenance import input_file
    from fleetmind.redact import safe_uri

    stages = [s for s in STAGES if s in {str(p).lower() for p in policies or []}]
    if not stages:
        return None
    given = str(args.model) if args.model else _released_placement(args.mode)
    out: dict[str, Any] = {}
    for stage in stages:
        if is_mlflow_uri(given):
            out[stage] = {"given": safe_uri(given), "path": None, "sha256": None, "version": None}
            continue
        found = _stage_file(Path(given), stage, args.mode)
        if found is not None and found.is_file():
            out[stage] = input_file(given, found)
    return out


LOADED_KEY = "_loaded_policies"
"""Key under which :func:`_evaluate_fgd` hands the model policies it loaded (stage -> policy
object) to :func:`_cmd_evaluate`, which removes it before the result is written."""


def _loaded_versions(model: dict[str, Any] | None, loaded: dict[str, Any]) -> None:
    """Fill ``version`` of each MLflow entry of ``model`` (:func:`_model_files`) with the registry
    version (``<registered name>/<version>``) of the policy the run loaded for that stage
    (``registry_version`` of :class:`fleetmind.rl.policy_adapter.PPOPlacementPolicy`): a
    ``models:/name@alias`` names other bytes once the alias moves. It stays null for a
    ``runs:/`` URI (its run id names the bytes) and with ``--ray-address`` (each worker loads
    the model itself)."""
    for stage, entry in (model or {}).items():
        if "version" in entry and stage in loaded:
            entry["version"] = getattr(loaded[stage], "registry_version", None)


def _stage_file(ref: Path, stage: str, mode: str) -> Path | None:
    """The file a model stage reads from the model reference ``ref`` (a folder or a file in it),
    as the loaders pick it: ``ppo`` the file itself, else the folder's ``policy.onnx`` (fgd mode,
    ``rl.policy_adapter``) or ``policy.pt`` (dynamic mode, ``rl.dynamic_eval``), the other one when
    it is absent; ``clone`` and ``rollout`` ``clone.onnx``; ``teacher`` ``teacher_strand.json``
    else ``teacher.json`` (dynamic mode: ``teacher.json``). None when none is there."""
    folder = ref if ref.is_dir() else ref.parent
    if stage == "ppo":
        if not ref.is_dir():
            return ref
        names = ("policy.onnx", "policy.pt") if mode == "fgd" else ("policy.pt", "policy.onnx")
    elif stage in ("clone", "rollout"):
        names = ("clone.onnx",)
    else:
        names = ("teacher_strand.json", "teacher.json") if mode == "fgd" else ("teacher.json",)
    return next((folder / n for n in names if (folder / n).is_file()), None)


def _policy_list(args: argparse.Namespace) -> list[str] | None:
    """``--policies`` once each (names compared as the runs name them, so ``FGD fgd`` runs FGD
    once), with ``ppo`` added in fgd mode when ``--model`` comes with the default list; None: the
    dynamic-mode default (every heuristic).

    Raises:
        ConfigError: ``--model`` with no policy that reads it (``ppo``, ``clone``, ``teacher``,
            ``rollout``), in either mode.
    """
    policies = _unique_policies(args.policies) if args.policies else None
    if args.model is None or any(p.lower() in STAGES for p in policies or []):
        return policies if policies or args.mode != "fgd" else list(DEFAULT_POLICIES)
    if policies:  # an explicit list without the policy the model is for
        raise ConfigError(
            f"--model {args.model} is the model of policy 'ppo', which --policies "
            f"({' '.join(args.policies)}) does not name; add ppo to --policies"
        )
    if args.mode != "fgd":  # the default is every heuristic, in a setting the agent does not use
        raise ConfigError(
            f"--model {args.model}: in dynamic mode name the model's policies (e.g. --policies ppo"
            " FGD); the default list holds only heuristics"
        )
    return [*DEFAULT_POLICIES, "ppo"]  # a model given: evaluate it beside the default heuristics


def _unique_policies(names: list[str]) -> list[str]:
    """``names`` without repeats, compared as the policies are looked up (case-, ``_``- and
    ``-``-insensitive: ``FGD fgd`` is one policy, ``PPO ppo`` one stage); the first spelling
    stays."""
    seen: dict[str, str] = {}
    for p in names:
        seen.setdefault(_norm(p), p)
    return list(seen.values())


def _norm(name: str) -> str:
    """A policy name as ``envs.policies.canonical_policy_name`` compares them."""
    return name.replace("_", "").replace("-", "").lower()


def _print_causes(causes: dict) -> None:
    from fleetmind.envs.failure_causes import FAILURE_CAUSES

    def num(v: Any, digits: int) -> str:
        return "-" if v is None else f"{v:.{digits}f}"  # None: not defined (null in the JSON)

    print(
        "failed GPU request at 100 % arrived, by cause (% of GPU capacity); lower bound for any "
        f"policy: {num(causes['lower_bound_pct'], 2)}"
    )
    print("policy".ljust(16) + "".join(c.rjust(16) for c in ("failed", *FAILURE_CAUSES)))
    for name, c in causes["policies"].items():
        cells = [c["failed_pct"], *(c["by_cause"][k] for k in FAILURE_CAUSES)]
        print(str(name).ljust(16) + "".join(num(v, 3).rjust(16) for v in cells))
    sys.stdout.flush()


# Table columns: (result key, header, legend); the default table takes them in this order while
# they fit TABLE_WIDTH; --wide shows every numeric key.
TABLE_WIDTH = 100
COLUMNS: tuple[tuple[str, str, str], ...] = (
    (
        "unallocated_gpu_pct_at_100",
        "unalloc@100",
        "unalloc@100/@130: unallocated GPU % once 100 %/130 % of capacity has arrived (lower is better)",
    ),
    (
        "published_unallocated_gpu_pct_at_100",
        "pub@100",
        "pub@100/@130: the FGD authors' published value for the same seeds",
    ),
    ("unallocated_gpu_pct_at_130", "unalloc@130", ""),
    ("mean_slowdown", "slowdown", "slowdown: job completion time / ideal runtime (mean, p99)"),
    ("p99_slowdown", "p99 slowdown", ""),
    ("mean_jct_s", "JCT s", "JCT s: job completion time in seconds (mean, p99)"),
    ("p99_jct_s", "p99 JCT s", ""),
    ("p99_queue_delay_s", "p99 queue s", "p99 queue s: 99th-percentile queueing delay, seconds"),
    ("n_failed_mean", "failed", "failed: pods that found no room (mean over seeds)"),
    ("ms_per_decision", "ms/dec", "ms/dec: milliseconds per placement decision"),
)


def _in_order(policies: dict[str, Any], requested: list[str] | None) -> dict[str, Any]:
    """``policies`` re-keyed in the order of ``requested`` (case-insensitive; others last)."""
    if not requested:
        return policies
    rank = {str(p).lower(): i for i, p in enumerate(requested)}
    return dict(sorted(policies.items(), key=lambda kv: rank.get(kv[0].lower(), len(rank))))


def _cell(metrics: dict[str, Any], key: str) -> str:
    v = metrics.get(key)
    if not isinstance(v, int | float) or isinstance(v, bool) or not math.isfinite(v):
        return "-"  # absent, or not defined (null in the JSON)
    if key == "cpu_seconds_total" and v == 0 and metrics.get("seconds_total"):
        return "-"  # not measured (the teacher runs outside the timed loop)
    return f"{v:.3f}" if abs(v) < 1e5 else f"{v:.3g}"


def _print_table(result: dict, wide: bool = False) -> None:
    """The results as a table: at most :data:`TABLE_WIDTH` columns unless ``wide``, then a legend."""
    pols = result.get("policies", {})
    if not pols:
        return
    headers = {key: head for key, head, _ in COLUMNS}
    numeric = [
        k
        for k in dict.fromkeys(k for m in pols.values() for k in m)
        # a number in some row, or a main column that is null (not defined, e.g. unalloc@130 on a
        # few nodes): it shows as '-'
        if any(isinstance(m.get(k), int | float) for m in pols.values())
        or (k in headers and any(k in m and m[k] is None for m in pols.values()))
    ]
    name_w = max([len(str(n)) for n in pols] + [6]) + 2
    if wide:
        keys = numeric
    else:
        keys, used = [], name_w
        for key, head, _ in COLUMNS:
            w = max(len(head), 8) + 2
            if key in numeric and used + w <= TABLE_WIDTH:
                keys.append(key)
                used += w
    widths = {k: max(len(headers.get(k, k)), 8) + 2 for k in keys}
    source = " [synthetic openb-schema data]" if result.get("data") else ""
    print(
        f"trace={result.get('trace')}{source} mode={result.get('mode')} seeds={result.get('seeds')}"
    )
    print("policy".ljust(name_w) + "".join(headers.get(k, k).rjust(widths[k]) for k in keys))
    for name, m in pols.items():
        print(str(name).ljust(name_w) + "".join(_cell(m, k).rjust(widths[k]) for k in keys))
    legend = [text for key, _, text in COLUMNS if text and key in keys]
    hidden = len([k for k in numeric if k not in keys])
    if hidden and not wide:
        legend.append(f"--wide shows {hidden} more columns; --json writes every value")
    if legend:
        print(textwrap.fill("legend: " + "; ".join(legend), TABLE_WIDTH, subsequent_indent="  "))
    if result.get("published_reason"):  # why the pub@ columns are missing
        note = f"note: {result['published_reason']}"
        print(textwrap.fill(note, TABLE_WIDTH, subsequent_indent="  "))
    for name, m in pols.items():  # a policy whose published values do not cover every seed
        if m.get("published_reason"):
            note = f"note: {name}: {m['published_reason']}"
            print(textwrap.fill(note, TABLE_WIDTH, subsequent_indent="  "))
    sys.stdout.flush()


def register(subparsers: argparse._SubParsersAction, name: str, help_text: str) -> None:
    _, sub = add_group(subparsers, name, help_text)
    ev = sub.add_parser(
        "evaluate",
        help="evaluate placement policies on a trace (fgd or dynamic mode)",
        description="Evaluate placement policies on a trace (an openb name such as 'default' or a CSV path).",
    )
    ev.add_argument(
        "--trace",
        required=True,
        help="openb trace name (default, gpuspec20, ...) or CSV path; without the openb data, "
        "'default' is a small synthetic trace in the openb schema (labelled so)",
    )
    ev.add_argument(
        "--mode", choices=["fgd", "dynamic"], default="fgd", help="simulation mode (default: fgd)"
    )
    ev.add_argument(
        "--policies",
        nargs="+",
        default=None,
        help=f"policies, printed in this order (default: {' '.join(DEFAULT_POLICIES)}); the released model's stages: 'ppo' "
        "(the released policy), 'clone' (its warm-start clone before PPO, clone.onnx) and "
        "'teacher' (the scorer the clone imitated, teacher_strand.json or teacher.json); 'rollout' "
        "(the clone improved by rollouts at run time; slow, see --rollout-*)",
    )
    ev.add_argument(
        "--seeds",
        nargs="+",
        default=[str(s) for s in DEFAULT_SEEDS],
        help="seeds or ranges, e.g. 42-51",
    )
    ev.add_argument(
        "--model",
        default=None,
        help="model REF (folder, file or models:/ URI) for policy 'ppo'; a local folder for 'clone' "
        "and 'teacher'; in fgd mode with the default policies it adds ppo, in dynamic mode name the "
        "policies that read it (ppo, clone, teacher, rollout)",
    )
    ev.add_argument(
        "--nodes",
        default=None,
        help="node list CSV (default: openb GPU nodes); dynamic mode runs on all its GPU nodes, "
        "dealt into 3 clusters",
    )
    ev.add_argument(
        "--workers",
        type=int,
        default=1,
        help="fgd mode: processes for heuristic runs (default 1; dynamic mode refuses it)",
    )
    ev.add_argument(
        "--causes",
        action="store_true",
        help="fgd mode: also sort each policy's failed GPU request by what stopped the pods "
        "(host CPU/memory, split GPU room, none left) and give a lower bound no policy can beat; "
        "repeats the runs with the diagnosis",
    )
    ev.add_argument(
        "--wide",
        action="store_true",
        help=f"print every metric column (default: the main ones, within {TABLE_WIDTH} columns)",
    )
    ev.add_argument(
        "--backfill-depth",
        type=int,
        default=None,
        metavar="N",
        help="dynamic mode: jobs behind the queue head that may start before it, for every policy"
        " (default: the model's setting, 8 without a model; kube-scheduler itself has no such"
        " window: docs/dynamic.md)",
    )
    _rollout_args(ev)
    ev.add_argument("--json", default=None, help="write the results JSON here (every metric)")
    _ray_arg(ev, "fgd mode: run every (policy, seed) as a Ray task")
    ev.set_defaults(func=cmd_evaluate)

    _register_train(sub)
    _register_variants(sub)
    _register_search(sub)


def _rollout_args(ev: argparse.ArgumentParser) -> None:
    """Options of policy ``rollout`` (``rl.rollout``; slow: clone episodes per decision)."""
    from fleetmind.rl.rollout import FUTURES

    ev.add_argument(
        "--rollout-k",
        type=int,
        default=3,
        help="rollout: candidates tried per decision (default 3)",
    )
    ev.add_argument(
        "--rollout-band",
        nargs=2,
        type=float,
        default=None,
        metavar=("LO", "HI"),
        help="rollout: where it looks ahead; fgd mode, arrived workload in %% of GPU capacity"
        " (default 50 90); dynamic mode, decision indices (default 0 256); elsewhere it acts as"
        " the clone",
    )
    ev.add_argument(
        "--rollout-every",
        type=int,
        default=1,
        help="rollout: look ahead at every n-th decision of the band (default 1)",
    )
    ev.add_argument(
        "--rollout-future",
        choices=list(FUTURES),
        default="known",
        help="rollout: 'known' (the seed's real future arrivals; an upper bound) or 'sampled'"
        " (futures drawn from the trace's statistics; default known)",
    )
    ev.add_argument(
        "--rollout-samples",
        type=int,
        default=4,
        help="rollout: sampled futures averaged per decision (default 4)",
    )
    ev.add_argument(
        "--rollout-depth",
        type=int,
        default=1,
        choices=[1, 2],
        help="rollout: consecutive decisions searched (default 1)",
    )
    ev.add_argument(
        "--rollout-seed", type=int, default=0, help="rollout: seed of the sampled futures"
    )


def _ray_arg(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--ray-address",
        default=None,
        help=f"{what} on this Ray cluster ('auto', 'HOST:PORT', or 'local' for a private one-node "
        "Ray); default: local processes",
    )


def _register_search(sub: argparse._SubParsersAction) -> None:
    se = sub.add_parser(
        "search-teacher",
        help="CMA-ES search of a linear fgd-mode teacher (episodes as local or Ray jobs)",
        description="Search a linear candidate scorer (rl.teacher_search, the cma package's CMA-ES) "
        "by its mean unallocated GPU % at 100 % arrived over fixed (trace, workload seed) "
        "episodes of fleetmind/GpuPlacement-v0. Writes the scorer JSON (a --teacher for sched "
        "train) and a summary.",
    )
    se.add_argument("--trace", action="append", required=True, help="search trace (repeatable)")
    se.add_argument("--episode-seeds", nargs="+", default=["1000-1001"], help="workload seeds")
    se.add_argument("--nodes", default=None, help="node list CSV (default: openb GPU nodes)")
    se.add_argument("--generations", type=int, default=8, help="CMA-ES iterations (default 8)")
    se.add_argument("--population", type=int, default=14, help="CMA-ES population (default 14)")
    se.add_argument(
        "--init-sd", type=float, default=0.5, help="initial step size, > 0 (default 0.5)"
    )
    se.add_argument("--init", default=None, help="start from this linear scorer JSON (default FGD)")
    se.add_argument("--seed", type=argtypes.seed, default=0, help="CMA-ES seed (default 0)")
    se.add_argument(
        "--fgd-until-pct",
        type=float,
        default=80.0,
        help="pods arriving before this %% of capacity go by FGD (default 80: search the tail;"
        " in [0, 101), where episodes stop)",
    )
    se.add_argument("--workers", type=int, default=1, help="local processes (default 1)")
    _ray_arg(se, "run every episode")
    se.add_argument("--out", required=True, help="scorer JSON to write")
    se.add_argument("--json", default=None, help="write the search summary JSON here")
    se.set_defaults(func=cmd_search_teacher, _parser=se)


SEARCH_STOP_PCT = 101.0
"""``sched search-teacher``: its episodes end once arrivals pass this % of GPU capacity (the
metric is read at 100), so ``--fgd-until-pct`` must stay below it."""


def cmd_search_teacher(args: argparse.Namespace) -> int:
    """``fleetmind sched search-teacher``: see :mod:`fleetmind.rl.teacher_search`."""
    import json

    from tqdm import tqdm

    from fleetmind.rl.scaleout import job_path
    from fleetmind.rl.teacher_search import check_search_settings, cmaes_search

    load_start = _load_now()
    seeds = parse_seeds(args.episode_seeds)
    check_writable(args.out, "--out")
    check_writable(args.json, "--json")
    refuse_same_output([("--out", args.out), ("--json", args.json)])
    inputs = [
        ("--trace", _openb_files(args.trace, "trace"), ()),
        ("--nodes", _openb_files(args.nodes, "node"), ()),
        ("--init", args.init, ()),
    ]
    refuse_input_as_output(args.out, "--out", inputs)
    refuse_input_as_output(args.json, "--json", inputs)
    check_search_settings(
        {"fgd_until_pct": float(args.fgd_until_pct), "stop_arrived_pct": SEARCH_STOP_PCT},
        args.init_sd,
    )
    init = None
    if args.init is not None:
        from fleetmind.rl.teacher import LinearScorer

        init = LinearScorer.load(args.init).weights
    inputs = _search_inputs(args)  # what the search reads, hashed before it starts
    cfg: dict[str, Any] = {
        "traces": [job_path(t) for t in args.trace],
        "fgd_until_pct": float(args.fgd_until_pct),
        "stop_arrived_pct": SEARCH_STOP_PCT,
    }
    if args.nodes is not None:
        cfg["nodes_path"] = job_path(args.nodes)
    episodes = [(job_path(t), s) for t in args.trace for s in seeds]
    # FGD's vector, the --init vector when given, then every generation's population
    vectors = 1 + (init is not None) + args.generations * args.population
    total = vectors * len(episodes)
    with tqdm(total=total, desc="teacher search", unit="episode", disable=bar_disable()) as bar:
        res = cmaes_search(
            cfg,
            episodes,
            generations=args.generations,
            population=args.population,
            init_sd=args.init_sd,
            seed=args.seed,
            init=init,
            ray_address=args.ray_address,
            workers=args.workers,
            progress=bar.update,
        )
    out = Path(args.out)
    scorer = res.scorer_dict(int(cfg.get("n_candidates", 16)))
    write_text_whole(out, json.dumps(scorer, indent=1) + "\n")
    summary = {
        "scorer": str(out),
        "fgd_score": res.fgd_score,
        "init_score": res.init_score,
        "best_score": res.best_score,
        "episodes": res.episodes,
        "history": res.history,
        "optimiser": "cma.CMAEvolutionStrategy",
    }
    prov = _run_provenance(args, ["search-teacher"], load_start, ("gymnasium", "cma"))
    write_json(args.json, {**prov, **inputs, **summary})  # the file before the screen
    print(json.dumps({k: summary[k] for k in ("fgd_score", "best_score")}))
    return 0


def _search_inputs(args: argparse.Namespace) -> dict[str, Any]:
    """``sched search-teacher --json``'s input files, each as given with its absolute path and
    SHA-256 (:func:`fleetmind.provenance.input_file`): ``trace_files`` (:func:`_trace_files`),
    ``nodes_file`` (``--nodes``, else the openb GPU node list) and ``init_file`` (the ``--init``
    scorer; ``None`` without it)."""
    from fleetmind.data.openb import load_openb_nodes
    from fleetmind.provenance import input_file

    nodes = input_file(str(args.nodes or "gpu_node"), load_openb_nodes(args.nodes).source)
    init = None if args.init is None else input_file(str(args.init), args.init)
    return {"trace_files": _trace_files(args.trace), "nodes_file": nodes, "init_file": init}


def _register_variants(sub: argparse._SubParsersAction) -> None:
    from fleetmind.data.openb_variants import VARIANT_KINDS

    va = sub.add_parser(
        "variants",
        help="generate a fresh openb trace variant by the published variants' rules",
        description="Generate an openb trace variant (cpu, gpushare, gpuspec, multigpu) from a source "
        "trace with a seed, by the rules of the FGD authors' published variants (see "
        "data/openb_variants.py and docs/ppo.md). The same arguments give the same bytes.",
    )
    va.add_argument(
        "--from", dest="source", default="default", help="source trace (default: default)"
    )
    va.add_argument("--kind", required=True, choices=list(VARIANT_KINDS), help="variant kind")
    va.add_argument(
        "--level",
        required=True,
        type=float,
        help="percentage the kind sets: cpu 3.7 = published cpu037 (CPU-only pods), gpushare 40 "
        "(GPU demand of sharing pods), gpuspec 20 (GPU pods with a model constraint), multigpu 30 "
        "(GPU demand of multi-GPU pods)",
    )
    va.add_argument("--seed", required=True, type=argtypes.seed, help="random seed")
    va.add_argument("--out", required=True, help="output CSV path")
    va.set_defaults(func=cmd_variants)


def cmd_variants(args: argparse.Namespace) -> int:
    """``fleetmind sched variants``: write one generated variant; prints its pod count, the share
    the level set (measured on the file, %) and its SHA-256."""
    from fleetmind.data.openb_variants import generate_variant, variant_share, write_variant

    refuse_input_as_output(args.out, "--out", [("--from", _openb_files(args.source, "trace"), ())])
    text = generate_variant(args.kind, args.level, args.seed, source=args.source)
    try:
        digest = write_variant(args.out, text)
    except BrokenPipeError as err:
        # stdout's reader that left early (--out /dev/stdout | head): quiet, as run_main says;
        # another reader that left (a FIFO): one line naming the path, not a traceback
        raise BrokenPipeError(err.errno, err.strerror, args.out) from None
    except OSError as err:
        raise ConfigError(f"cannot write {args.out}: {err.strerror or err}") from None
    got = variant_share(args.kind, text)
    print(
        f"{args.out}: {text.count(chr(10)) - 1} pods, {args.kind} share {got:.2f} %"
        f" (level {args.level:g}), sha256 {digest}"
    )
    return 0


def _register_train(sub: argparse._SubParsersAction) -> None:
    """``fleetmind sched train`` (PPO agent; the recipes of training/recipes/)."""
    tr = sub.add_parser(
        "train",
        help="train the PPO placement agent (MLflow-tracked, registered as fleetmind-placement)",
        description="Imitation warm start from FGD, then MaskablePPO; exports ONNX + torch.",
    )
    from fleetmind.training.recipes.flags import PAIRED_FLAGS, add_recipe_group, add_train_flags
    from fleetmind.training.recipes.settings import DistillArgs, EsArgs, OrderArgs, PairedArgs

    tr.add_argument("--mode", choices=["fgd", "dynamic"], default="fgd", help="simulation mode")
    tr.add_argument(
        "--algo",
        choices=["ppo", "paired", "distill", "es", "order"],
        default="ppo",
        help="ppo (default: imitation warm start, then MaskablePPO), paired (dynamic mode:"
        " paired, critic-free PPO over a model's clone), distill (dynamic mode: the rollout"
        " policy's decisions distilled into the clone) or es (dynamic mode: evolution strategies"
        " on a residual head of the clone) or order (dynamic mode: evolution strategies on the"
        " queue order the clone places jobs in); docs/ppo-dynamic.md",
    )
    pa = tr.add_argument_group("--algo paired (dynamic mode)")
    add_train_flags(pa, PAIRED_FLAGS, recipes=(PairedArgs,))  # PairedArgs' own settings
    tr.add_argument(
        "--seeds",
        nargs="+",
        default=None,
        help="train one run per seed (e.g. 0-2), each in OUT/seed<S>; see --ray-address/--workers",
    )
    tr.add_argument(
        "--workers",
        type=int,
        default=1,
        help="local processes: one per training run with --seeds (default 1); else the episodes"
        " of --algo paired (default 1) and --algo es (default 2)",
    )
    tr.add_argument("--json", default=None, help="write the run summary JSON here")
    add_train_flags(tr)  # one flag per recipe setting (training/recipes/settings.py)
    # the field's own text describes register=True, what the flag turns off
    tr._option_string_actions["--no-register"].help = (  # noqa: SLF001
        "fgd mode: do not register the model in the MLflow model registry (it is still logged"
        " with the run) and leave the champion alias where it is"
    )
    _ray_arg(tr, "--seeds: run every training seed; else --algo paired/es episodes, distill labels")
    add_recipe_group(tr, DistillArgs, "--algo distill (dynamic mode)")
    add_recipe_group(tr, EsArgs, "--algo es (dynamic mode)")
    add_recipe_group(tr, OrderArgs, "--algo order (dynamic mode; the flags of --algo es)")
    # the flags only the other recipes read, so that --algo ppo refuses them instead of ignoring
    other = {
        a.dest: (a.option_strings[0], a.default)
        for g in tr._action_groups  # noqa: SLF001 - argparse keeps its groups private
        if (g.title or "").startswith("--algo ")
        for a in g._group_actions  # noqa: SLF001
    }
    tr.set_defaults(func=cmd_train, _other_recipe_flags=other, _parser=tr)


def _trace_seeds(items: list[str] | None) -> dict[str, list[int]]:
    """``["multigpu20=1000-1003"]`` -> ``{"multigpu20": [1000, ..., 1003]}``."""
    out: dict[str, list[int]] = {}
    for item in items or []:
        trace, sep, spec = str(item).partition("=")
        if not sep or not trace or not spec:
            raise ConfigError(
                f"--cem-trace-seeds {item!r}: expected TRACE=SEEDS, e.g. multigpu20=1000-1003"
            )
        out[trace] = parse_seeds([spec])
    return out


def check_trace_has_decisions(traces: list[str], nodes_arg: str | None = None) -> None:
    """Refuse training traces that give the agent nothing to decide on the node list: no job fits
    any node (every episode would end at reset: all pods fail) or every job fits at most one (each
    goes to its only node without asking). Checked on empty nodes; the openb GPU nodes by default.

    Raises:
        DataError: names the trace, the node list and, for the first case, why the first pod fits
            nowhere.
    """
    from fleetmind.data.openb import (
        check_gpu_specs,
        load_openb_nodes,
        load_openb_trace,
        no_fit_reason,
        nodes_fitting,
    )

    nodes = load_openb_nodes(nodes_arg)
    where = f"the node list {nodes.source} ({len(nodes):,} nodes)"
    for name in dict.fromkeys(traces):
        trace = load_openb_trace(name)
        check_gpu_specs(trace, nodes.model.tolist(), f"the node list {nodes.source}")
        fit = nodes_fitting(trace, nodes)
        if not fit.any():
            raise DataError(
                f"no job of the trace {name} fits any node of {where}, so training has no "
                f"placement to learn (e.g. {no_fit_reason(trace, nodes, 0)}); "
                "`sched evaluate` shows such a trace as 100 % unallocated"
            )
        if int(fit.max()) < 2:
            raise DataError(
                f"every job of the trace {name} fits at most one node of {where}, so training "
                "has no placement choice to learn"
            )


def cmd_train(args: argparse.Namespace) -> int:
    """``fleetmind sched train``: the recipe of ``--mode`` (:mod:`fleetmind.training.recipes`)."""
    with trace_warnings_on_stderr():
        return _cmd_train(args)


def _cmd_train(args: argparse.Namespace) -> int:
    from fleetmind.training.recipes.flags import recipe_kwargs

    load_start = _load_now()
    check_writable(args.json, "--json")  # before the training, not after it
    refuse_input_as_output(args.json, "--json", _train_inputs(args))
    if args.release:  # in a pip install the released models are the installed package's files
        from fleetmind.data.paths import MODELS_DIR
        from fleetmind.training.recipes.settings import check_release_target

        check_release_target(
            MODELS_DIR / ("placement-dynamic" if args.mode == "dynamic" else "placement")
        )

    dyn_only = args.cem_trace_seeds or args.cem_worst_weight or args.cem_nonneg
    if args.mode != "dynamic" and (dyn_only or args.cem_max_minutes is not None):
        raise ConfigError(
            "--cem-trace-seeds/--cem-worst-weight/--cem-nonneg/--cem-max-minutes are dynamic-mode"
            " options"
        )
    if args.mode == "dynamic" and args.penalty_features:
        raise ConfigError(
            "--penalty-features is an fgd-mode option (dynamic mode has --queue-features)"
        )
    if args.algo == "paired":
        return _train_paired(args)
    if args.algo == "distill":
        from fleetmind.training.recipes.distill import cli_train

        return cli_train(args)
    if args.algo == "es":
        from fleetmind.training.recipes.es import cli_train as es_train

        return es_train(args)
    if args.algo == "order":
        from fleetmind.training.recipes.order import cli_train as order_train

        return order_train(args)
    other = getattr(args, "_other_recipe_flags", {})
    ignored = [flag for dest, (flag, default) in other.items() if getattr(args, dest) != default]
    if ignored:  # e.g. --lr: PPO's step size is the recipe's own, and the flag would do nothing
        raise ConfigError(
            f"{', '.join(ignored)}: option(s) of --algo paired/distill/es/order, which --algo ppo"
            " (the default) does not read"
        )
    if args.mode == "dynamic":
        if args.reward != "shaped":
            raise ConfigError("--reward metric is an fgd-mode option (dynamic mode has its own)")
        if args.cem_init is not None or args.cem_multi_gpu_block:
            # the dynamic recipe has its own scorer (rl.dynamic_teacher); refuse rather than ignore
            raise ConfigError("--cem-init and --cem-multi-gpu-block are fgd-mode options")
        from fleetmind.data.openb import load_openb_trace

        for t in dict.fromkeys(args.eval_trace or []):  # unused in dynamic mode, but checked
            load_openb_trace(t)
        from fleetmind.training.recipes import dynamic as recipe

        cls = recipe.DynamicArgs
    else:
        from fleetmind.training.recipes import fgd as recipe

        cls = recipe.FgdArgs
    from fleetmind.data.openb import trace_file
    from fleetmind.training.tracking import ready_store, tracking_uri

    # Every option is checked; the run tracks itself in MLflow, so a store that cannot be used
    # stops it here, before it writes anything (a misspelt trace first: it creates no store).
    for name in args.trace or []:
        trace_file(name)
    a = cls(**recipe_kwargs(args, cls, convert={"cem_trace_seeds": _trace_seeds}))
    _check_ppo_settings(a)
    # a trace that asks for no decision would end every episode at reset; say so before MLflow
    check_trace_has_decisions(list(a.traces), getattr(a, "nodes", None))
    # sched train has no --tracking-uri: the error names MLFLOW_TRACKING_URI alone
    ready_store(
        tracking_uri(getattr(args, "tracking_uri", None)),
        flag=None,
        experiment=getattr(a, "experiment", None),  # a deleted one stops it here too
    )
    if args.seeds:
        return _train_seeds(args, recipe.__name__, a, load_start)
    files = _train_trace_files(a)  # what the run reads, hashed before it starts
    before = _run_folders(a.out)
    try:
        summary = recipe.run(a)
    except KeyboardInterrupt:  # say which run folder was left half-written, then stop as ever
        _partial_note(a.out, before)
        raise
    write_json(args.json, {**_train_provenance(args, load_start, files), **summary})
    from fleetmind.training.recipes.paired import train_line

    print(train_line(summary))
    _champion_note(summary)
    return 0


def _check_ppo_settings(a: Any) -> None:
    """The PPO recipes' settings the recipe checks again at its start, checked here too so that
    ``--seeds`` refuses them before it starts a run per seed; in fgd mode, also a trace without
    GPU demand (every episode would measure nothing)."""
    from fleetmind.training.recipes.common import check_fgd_prefixes, check_run_limits

    check_run_limits(a)
    if a.mode == "fgd":
        from fleetmind.data.openb import load_openb_trace
        from fleetmind.envs.fgd_mode import check_gpu_demand

        check_fgd_prefixes(a)
        for t in dict.fromkeys([*a.traces, *a.eval_traces]):
            check_gpu_demand(load_openb_trace(t))


def _train_paired(args: argparse.Namespace) -> int:
    """``fleetmind sched train --algo paired`` (:mod:`fleetmind.training.recipes.paired`)."""
    if args.mode != "dynamic":
        raise ConfigError("--algo paired is a dynamic-mode recipe (add --mode dynamic)")
    if args.teacher != "fgd" or args.queue_features or args.reward != "shaped":
        raise ConfigError(
            "--algo paired starts from a model's clone (--init); --teacher, --queue-features and"
            " --reward belong to --algo ppo"
        )
    from fleetmind.training.recipes import paired as recipe
    from fleetmind.training.recipes.flags import PAIRED_FLAGS, TRAIN_FLAGS, recipe_kwargs
    from fleetmind.training.recipes.settings import PairedArgs

    a = PairedArgs(**recipe_kwargs(args, PairedArgs, TRAIN_FLAGS + PAIRED_FLAGS))
    if not args.seeds:  # one run: --workers/--ray-address run its episodes
        a.workers, a.ray_address = args.workers, args.ray_address
    if a.workers < 1:
        raise ConfigError(f"--workers must be >= 1, got {a.workers}")
    load_start = _load_now()
    if args.seeds:
        a.init = str(Path(a.init).resolve())
        return _train_seeds(args, recipe.__name__, a, load_start)
    files = _train_trace_files(a)
    summary = recipe.run(a)
    write_json(args.json, {**_train_provenance(args, load_start, files), **summary})
    print(recipe.train_line(summary))
    return 0


def _train_seeds(
    args: argparse.Namespace, recipe: str, a: Any, load_start: list[float] | None = None
) -> int:
    """``--seeds``: one training run per seed (``out/seed<S>``), local processes or Ray tasks;
    ``load_start``: the 1, 5 and 15-minute load averages when the command started."""
    import json
    from dataclasses import asdict

    from fleetmind.rl.scaleout import job_path, run_tasks, train_job

    if args.release:
        raise ConfigError("--release takes one run; train the seeds, then release the chosen one")
    seeds = parse_seeds(args.seeds)
    files = _train_trace_files(a)
    base = asdict(a)
    jobs = []
    for s in seeds:
        kw = dict(base, seed=s, out=str(Path(job_path(args.out) or "runs/ppo") / f"seed{s}"))
        kw["traces"] = [job_path(t) for t in kw["traces"]]
        if "eval_traces" in kw:
            kw["eval_traces"] = [job_path(t) for t in kw["eval_traces"]]
        jobs.append((recipe, type(a).__name__, kw))
    runs = run_tasks(train_job, jobs, ray_address=args.ray_address, workers=args.workers)
    summary = {"seeds": seeds, "runs": {str(s): r for s, r in zip(seeds, runs, strict=True)}}
    write_json(args.json, {**_train_provenance(args, load_start, files), **summary})
    print(json.dumps({s: r.get("metrics") for s, r in summary["runs"].items()}))
    for r in summary["runs"].values():
        _champion_note(r)
    return 0


TRAIN_VERSIONS = ("gymnasium", "onnxruntime", "mlflow", "stable-baselines3", "sb3-contrib")
"""The packages whose versions ``sched train --json`` records beside torch and numpy."""


def _train_inputs(args: argparse.Namespace) -> list[tuple[str, Any, tuple[str, ...]]]:
    """The input options of ``sched train`` that name files (traces, node list, start points,
    the tracking store), for :func:`fleetmind.cli.common.refuse_input_as_output`."""
    from fleetmind.training.tracking import tracking_uri

    inputs: list[tuple[str, Any, tuple[str, ...]]] = [
        ("--trace", _openb_files(getattr(args, "trace", None) or ["default"], "trace"), ()),
        ("--eval-trace", _openb_files(getattr(args, "eval_trace", None), "trace"), ()),
        ("MLFLOW_TRACKING_URI", tracking_uri(getattr(args, "tracking_uri", None)), ()),
    ]
    for dest, flag in (("nodes", "--nodes"), ("init", "--init"), ("cem_init", "--cem-init")):
        inputs.append((flag, getattr(args, dest, None), MODEL_FILES))
    teacher = getattr(args, "teacher", None)
    if teacher is not None and teacher != "fgd":
        inputs.append(("--teacher", teacher, MODEL_FILES))
    return inputs


def _train_trace_files(a: Any) -> list[dict[str, str]]:
    """:func:`_trace_files` of every training and evaluation trace of the recipe's settings ``a``;
    taken before the run starts, so that the digests are those of the files it read (a file
    rewritten during a long run is not credited to it)."""
    return _trace_files([*getattr(a, "traces", []), *getattr(a, "eval_traces", [])])


def _train_provenance(
    args: argparse.Namespace, load_start: list[float] | None, files: list[dict[str, str]]
) -> dict:
    """The keys ``sched train --json`` starts with: those of ``sched evaluate --json``
    (:func:`_run_provenance`) and ``trace_files``: ``files``, each training and evaluation trace
    as given, with its absolute path and SHA-256 when the run started (:func:`_train_trace_files`)."""
    prov = _run_provenance(args, ["train"], load_start, TRAIN_VERSIONS)
    return {**prov, "trace_files": files}


def _trace_files(names: list[str]) -> list[dict[str, str]]:
    """Each trace of ``names`` once (openb names or CSV paths), as given, with its file's absolute
    path and SHA-256 (:func:`fleetmind.provenance.input_file`)."""
    from fleetmind.data.openb import trace_file
    from fleetmind.provenance import input_file

    return [input_file(t, trace_file(t)) for t in dict.fromkeys(map(str, names))]


def _run_provenance(
    args: argparse.Namespace,
    words: list[str],
    load_start: list[float] | None,
    packages: tuple[str, ...],
) -> dict:
    """:func:`fleetmind.provenance.run_provenance` of ``fleetmind sched <words...>`` run with
    ``args`` (:func:`command_line`), with the versions of ``packages`` besides."""
    from fleetmind.provenance import run_provenance

    line = command_line(args, ["fleetmind", "sched", *words])
    return run_provenance(line, load_start, packages)


def command_line(args: argparse.Namespace, words: list[str]) -> str:
    """The command line that reruns ``args``: ``words``, then every option of the sub-command's
    parser (``args._parser``) whose value differs from its default, in the parser's order, quoted
    for a POSIX shell (``shlex.join``); URIs with credentials are redacted (``fleetmind.redact``).
    Without ``args._parser``, ``words`` alone."""
    import shlex

    from fleetmind.redact import safe_uri

    out = list(words)
    parser = getattr(args, "_parser", None)
    for act in parser._actions if parser is not None else ():  # noqa: SLF001 - argparse's list
        longs = [o for o in act.option_strings if o.startswith("--")]
        if not longs or not hasattr(args, act.dest) or act.dest == "help":
            continue
        value = getattr(args, act.dest)
        if value == act.default or value is None:
            continue
        if act.nargs == 0:  # a switch (store_true, store_false)
            out.append(longs[0])
        elif isinstance(act, argparse._AppendAction):  # noqa: SLF001 - one flag per value
            for v in value:
                out += [longs[0], safe_uri(str(v))]
        elif isinstance(value, list | tuple):
            out += [longs[0], *(safe_uri(str(v)) for v in value)]
        else:
            out += [longs[0], safe_uri(str(value))]
    return shlex.join(out)


def _run_folders(out: str) -> set[Path]:
    """The folders in ``out`` (the run folders of ``--out``; none when it does not exist yet)."""
    root = Path(out)
    return {p for p in root.iterdir() if p.is_dir()} if root.is_dir() else set()


def _partial_note(out: str, before: set[Path]) -> None:
    """One ``fleetmind: warning:`` line on stderr per run folder that appeared in ``out`` since
    ``before`` (:func:`_run_folders`): a run stopped before its end leaves checkpoints and
    perhaps a ``model/`` folder without its card or ONNX policy."""
    for folder in sorted(_run_folders(out) - before):
        print(
            f"fleetmind: warning: training stopped before the end: {folder} is a partial run"
            " (its model/ folder, if any, is incomplete); delete it or train again",
            file=sys.stderr,
        )


def _champion_note(summary: dict[str, Any]) -> None:
    """One ``fleetmind: note:`` line on stderr when the run's registered version did not have its
    score compared with the champion's (``registry.champion_refused``: another evaluation set)."""
    reg = summary.get("registry") or {}
    if reg.get("champion_refused"):
        print(
            f"fleetmind: note: {reg['registered_model']} version {reg['version']} registered; "
            f"{reg['champion_refused']}",
            file=sys.stderr,
        )
