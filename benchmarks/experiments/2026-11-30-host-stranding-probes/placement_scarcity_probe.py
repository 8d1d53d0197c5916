"""Can a GPU-model scarcity term fix the strand teacher on ``gpuspec33``? (2026-11-30 probe)

Item 15's model (teacher ``benchmarks/results/placement/placement_strand_teacher.json``: R minus 4 x the
change in host-stranded GPUs) is 3.3 % above FGD on ``gpuspec33``. There, a third of the GPU pods may use
only some GPU models, and they fail for lack of GPU room on those models
(``benchmarks/results/placement/placement_failure_causes_gpuspec33.json``). This probe adds a second term
that keeps pods *without* a model restriction off the models the restricted pods need:

    score_k = strand(x_k) - beta * r[model of node_k] * request / 1000   (unrestricted GPU pods)

``r[g]`` is the restricted pods' GPU request in the episode's workload, each spread over its
allowed models in proportion to their capacity, divided by model g's capacity (both in milli-GPU).
Restricted pods, CPU-only pods, and every pod of a trace without restricted pods get no such term.
On such traces the scorer is the strand teacher exactly. Like the stranding signal, ``r`` is read
from the environment, not from the observation.

    python -m benchmarks.experiments.2026-11-30-host-stranding-probes.placement_scarcity_probe \\
        --traces gpuspec05 gpuspec10 \\
        gpuspec33 --seeds 330-333 --betas 0 1 2 4 8 --out ...
"""

from __future__ import annotations

import os

import numpy as np

from benchmarks.provenance import REPO_ROOT as ROOT
from fleetmind.cli.runner import run_main

from .probe_common import probe_main, whole_episode_env

TEACHER = ROOT / "benchmarks" / "results" / "placement" / "placement_strand_teacher.json"
"""Item 15's teacher (R, alpha 4, no beta). The choice and confirmation runs read the same file as
``models/placement/teacher_strand.json``, which held it until item 16's release replaced it."""


def model_scarcity(env: object) -> np.ndarray:
    """``(max model id + 1,)`` restricted-pod demand / capacity per GPU model for the env's
    current workload (0 for models without restricted demand or without GPUs)."""
    from fleetmind.envs.core import ANY_GPU_MODEL, GPU_MILLI

    st = env.state
    n_models = int(st.model_id.max()) + 1
    cap = np.zeros(n_models)
    for g, k in zip(st.model_id.tolist(), st.num_gpu.tolist(), strict=True):
        if g >= 0:
            cap[g] += k * GPU_MILLI
    demand = np.zeros(n_models)
    models = np.arange(n_models)
    for pod in env._pods:  # noqa: SLF001 - probe reads the env's workload
        if pod.num_gpu == 0 or pod.gpu_spec_mask == ANY_GPU_MODEL:
            continue
        allowed = ((pod.gpu_spec_mask >> models) & 1).astype(bool) & (cap > 0)
        if allowed.any():
            share = cap * allowed
            demand += pod.gpu_request * share / share.sum()
    return np.divide(demand, cap, out=np.zeros(n_models), where=cap > 0)


def scarcity_actor(strand: object, beta: float, env: object):  # noqa: ANN201 - Actor
    from fleetmind.envs.core import ANY_GPU_MODEL

    memo: dict[tuple, np.ndarray] = {}

    def act(obs: np.ndarray, mask: np.ndarray) -> int:
        s = strand.scores(obs)
        pod = env._pods[env._t]  # noqa: SLF001
        if beta and pod.num_gpu > 0 and pod.gpu_spec_mask == ANY_GPU_MODEL:
            key = (env._trace_name, env._workload_seed)  # noqa: SLF001
            if key not in memo:
                memo.clear()
                memo[key] = model_scarcity(env)
            r = memo[key]
            real = np.asarray(mask, dtype=bool)
            nodes = env._cand.nodes[real]  # noqa: SLF001
            pen = np.zeros(s.shape)
            pen[real] = r[env.state.model_id[nodes]] * pod.gpu_request / 1000.0
            s = s - beta * pen
        s = np.where(np.asarray(mask, dtype=bool), s, -np.inf)
        return int(np.argmax(s))

    return act


def _job(job: tuple[str, float | None, str, int]) -> tuple[str, str, int, float]:
    from fleetmind.rl.ppo import greedy_rollout
    from fleetmind.rl.teacher import StrandPenaltyScorer

    name, beta, trace, seed = job
    env = whole_episode_env(trace)
    if beta is None:
        act = lambda obs, mask: 0  # noqa: E731 - candidate 0 is FGD's choice
    elif os.environ.get("FLEETMIND_PROBE_OWN_SCARCITY") == "1":  # the probe's first copy
        act = scarcity_actor(StrandPenaltyScorer.load(TEACHER).bind(env), beta, env)
    else:
        t = StrandPenaltyScorer.load(TEACHER)
        act = StrandPenaltyScorer(t.base, t.alpha, beta).bind(env)
    info = greedy_rollout(env, act, trace, seed)
    return name, trace, seed, float(info["unallocated_gpu_pct_at_100"])


def main(argv: list[str] | None = None) -> None:
    probe_main(
        argv,
        module=__spec__.name,
        description=__doc__.split("\n\n")[0],
        param="beta",
        defaults=[0.0, 1.0, 2.0, 4.0, 8.0],
        job=_job,
        teacher=str(TEACHER.relative_to(ROOT)),
        paired=False,
    )


if __name__ == "__main__":
    raise SystemExit(
        run_main(
            main,
            prog="benchmarks.experiments.2026-11-30-host-stranding-probes.placement_scarcity_probe",
        )
    )
