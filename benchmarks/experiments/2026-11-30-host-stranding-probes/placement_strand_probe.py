"""Does a host-stranding signal help the released teacher? (fgd mode, 2026-11-30 probe)

``benchmarks/placement/failure_causes.py`` found that FGD, BestFit and the agent tie once CPU and
memory requests are dropped, so the agent's gain over FGD is in how it handles the host resources
beside the GPUs. This probe adds one hand-made signal to the released linear teacher R
(``models/placement/teacher.json``) and scores whole episodes:

    score_k = R(x_k) - alpha * (stranded_after_k - stranded_before_k) / 1000

``stranded`` of a node is the idle GPU milli its free CPU and memory cannot serve at the workload's
typical host demand per GPU: ``max(0, idle - min(cpu_free / c, mem_free / m))``, where ``c`` and
``m`` are the GPU pods' total CPU and memory divided by their total GPU request (per milli-GPU) in
the episode's workload (``fleetmind.envs.candidates.stranded_gpu_milli``,
``GpuPlacementEnv.host_stranding_deltas``). The signal is computed from the environment's state,
outside the observation, so the released network cannot see it: this tests the teacher
(``fleetmind.rl.teacher.StrandPenaltyScorer``), not a model. The choice and confirmation runs used the
script's own first copy of this computation; the library version reproduces them exactly.

    python -m benchmarks.experiments.2026-11-30-host-stranding-probes.placement_strand_probe \\
        --traces gpushare100 multigpu40 cpu037 \\
        cpu250 --seeds 80-83 --alphas 0 0.5 1 2 4 --workers 2 --out ...

``alpha = 0`` is R itself. Writes per-episode unallocated GPU % (FGD included as the reference),
each scorer's mean gap to FGD, and its paired difference to R with a standard error.
"""

from __future__ import annotations

from benchmarks.provenance import REPO_ROOT as ROOT
from fleetmind.cli.runner import run_main

from .probe_common import probe_main, whole_episode_env

TEACHER = ROOT / "models" / "placement" / "teacher.json"


def _job(job: tuple[str, float | None, str, int]) -> tuple[str, str, int, float]:
    from fleetmind.rl.ppo import greedy_rollout
    from fleetmind.rl.teacher import LinearScorer, StrandPenaltyScorer

    name, alpha, trace, seed = job
    env = whole_episode_env(trace)
    if alpha is None:
        act = lambda obs, mask: 0  # noqa: E731 - candidate 0 is FGD's choice
    else:
        act = StrandPenaltyScorer(LinearScorer.load(TEACHER), alpha).bind(env)
    info = greedy_rollout(env, act, trace, seed)
    return name, trace, seed, float(info["unallocated_gpu_pct_at_100"])


def main(argv: list[str] | None = None) -> None:
    probe_main(
        argv,
        module=__spec__.name,
        description=__doc__.split("\n\n")[0],
        param="alpha",
        defaults=[0.0, 0.5, 1.0, 2.0, 4.0],
        job=_job,
        teacher=str(TEACHER.relative_to(ROOT)),
        paired=True,
    )


if __name__ == "__main__":
    raise SystemExit(
        run_main(
            main,
            prog="benchmarks.experiments.2026-11-30-host-stranding-probes.placement_strand_probe",
        )
    )
