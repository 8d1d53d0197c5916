"""Settings of the placement training recipes, one dataclass per recipe.

:class:`PPOArgs` holds what both PPO recipes share, :class:`FgdArgs` and :class:`DynamicArgs` add
each mode's own; :class:`PairedArgs` is the paired-PPO recipe's (``--algo paired``). Each field is defined here once, with its default and its docstring; the
``fleetmind sched train`` flags are generated from these fields
(:mod:`fleetmind.training.recipes.flags`). The module imports nothing heavy, so that building the
CLI's parser does not load torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal

from fleetmind.data.openb_variants import VARIANT_KINDS
from fleetmind.data.paths import MODELS_DIR, refuse_write_into_installed_package

DYNAMIC_RELEASE_DIR = MODELS_DIR / "placement-dynamic"
"""The released dynamic-mode model: where ``--release`` copies a dynamic-mode artifact, and the
clone that paired PPO starts from by default."""


@dataclass
class PPOArgs:
    """Settings shared by the placement training recipes (``fleetmind sched train`` flags).

    Each recipe has its own subclass: :class:`fleetmind.training.recipes.fgd.FgdArgs` and
    :class:`fleetmind.training.recipes.dynamic.DynamicArgs`.
    """

    mode: ClassVar[str] = ""
    """the recipe's simulation mode (``--mode``)"""

    traces: list[str] = field(default_factory=lambda: ["default"])
    """training traces (openb names or CSV paths); one drawn per episode"""
    timesteps: int = 100_000
    """PPO environment steps (decisions) after the warm start, rounded up to whole rollouts of
    n_steps (512) x --n-envs steps (MLflow param timesteps_effective)"""
    seed: int = 0
    """seed of weights, envs and workloads"""
    n_envs: int = 2
    """parallel envs (SubprocVecEnv when > 1)"""
    n_candidates: int = 16
    """K, candidate placements per decision"""
    bc_episodes: int = 2
    """teacher episodes for the imitation warm start (0: none)"""
    bc_epochs: int = 30
    """maximum epochs of behaviour cloning (stops at cross-entropy ``bc_target_ce``)"""
    bc_target_ce: float = 0.2
    """behaviour cloning stops once the epoch's cross-entropy is below this"""
    bc_value_coef: float = 0.5
    """weight of the critic's return regression in the cloning loss. The critic pools the actor's
    row embeddings, so with large returns (dynamic mode: value MSE ~1,000) this term's gradient
    swamps the actor's; 0 clones the actor alone (the critic then starts untrained)"""
    teacher: str = "fgd"
    """warm-start teacher: ``fgd`` (candidate 0), ``cem`` (search a linear scorer first, see
    :mod:`fleetmind.rl.teacher`) or the path of a saved scorer JSON (``rl.teacher.load_teacher``: a linear
    scorer, or a linear scorer with a host-stranding penalty)"""
    cem_generations: int = 8
    """teacher=cem: CEM generations"""
    cem_population: int = 14
    """teacher=cem: weight vectors scored per generation"""
    cem_seeds: list[int] = field(default_factory=lambda: [1000])
    """teacher=cem: workload seeds of the search episodes (one episode per training trace and
    seed; when that makes a single episode, the same trace with the next seed is added)"""
    learning_rate: float = 1e-4
    """PPO Adam step size"""
    n_steps: int = 512
    """rollout steps per env per update"""
    batch_size: int = 128
    """PPO minibatch"""
    clip_range: float = 0.15
    """PPO clip"""
    target_kl: float = 0.02
    """PPO early stop on approximate KL"""
    gamma: float = 0.995
    """discount"""
    ent_coef: float = 0.001
    """entropy bonus"""
    vf_coef: float = 0.5
    """PPO value-loss weight. The critic pools the actor's row embeddings, so with large returns
    (dynamic mode) a big weight lets the value loss dominate the shared trunk's clipped gradient"""
    hidden: int = 64
    """hidden width (tanh)"""
    eval_seeds: list[int] = field(default_factory=lambda: [42])
    """workload seeds of the periodic evaluation"""
    eval_freq: int = 20_000
    """evaluate every this many PPO steps"""
    max_minutes: float | None = None
    """stop PPO after this much wall time (minutes, > 0; omit for no limit: all timesteps)"""
    out: str = "runs/ppo"
    """folder for checkpoints and the artifact (``<out>/<run name>/``)"""
    release: bool = False
    """also copy the artifact to the recipe's released model folder (``models/placement/``,
    ``models/placement-dynamic/``; a source checkout only: a pip install refuses it up front)"""
    tracking_uri: str | None = None
    """MLflow tracking URI (default: MLFLOW_TRACKING_URI or sqlite:///mlflow.db)"""
    experiment: str = "fleetmind-placement"
    """MLflow experiment name"""
    threads: int = 1
    """torch threads"""
    progress: bool = True
    """progress bars"""


@dataclass
class FgdArgs(PPOArgs):
    """Settings of an fgd-mode training run (``fleetmind sched train --mode fgd`` flags)."""

    mode: ClassVar[str] = "fgd"

    nodes: str | None = None
    """node list CSV or openb name (default: the openb GPU nodes)"""
    fgd_until_pct: float = 80.0
    """training episodes: FGD places pods until this % of capacity has arrived"""
    stop_arrived_pct: float = 101.0
    """training episodes end when arrivals pass this % of capacity (the metric is read at 100)"""
    workload_seeds: list[int] = field(default_factory=lambda: [1000, 1001])
    """pool of training workload seeds (disjoint from the evaluation seeds 42-51)"""
    bc_fgd_until_pct: float = 0.0
    """teacher demonstrations: FGD prefix (default 0, whole episodes, so that the clone also sees the
    early, lightly loaded states that the PPO episodes skip but evaluation does not)"""
    cem_init: str | None = None
    """teacher=cem: start the search at this saved scorer JSON (default: at FGD)"""
    cem_init_sd: float = 0.5
    """teacher=cem: initial standard deviation of the search distribution"""
    cem_multi_gpu_block: bool = False
    """teacher=cem: add the ``x * is_multi_gpu`` feature block (``rl.teacher.BLOCKS_4``)"""
    eval_traces: list[str] = field(default_factory=lambda: ["default"])
    """traces of the periodic evaluation (default: the first training trace)"""
    eval_fgd_until_pct: float = 80.0
    """periodic evaluation: FGD prefix (0 = the agent places everything; slower)"""
    reward: str = "shaped"
    """training reward: ``shaped`` (allocated GPU + fragmentation shaping) or ``metric`` (the
    evaluation metric's per-step decomposition; ``envs.gpu_placement_env``)"""
    penalty_features: bool = False
    """append the stranding and model-scarcity signals to every candidate row (``F = 20``;
    env option ``penalty_features``), so that the network observes what the teacher subtracts"""
    register: bool = True
    """register the model in MLflow and maybe move the champion alias (``--no-register``: skip
    the MLflow registry)"""


@dataclass
class DynamicArgs(PPOArgs):
    """Settings of a dynamic-mode training run (``fleetmind sched train --mode dynamic`` flags)."""

    mode: ClassVar[str] = "dynamic"

    cem_trace_seeds: dict[str, list[int]] = field(default_factory=dict)
    """teacher=cem: search seeds per trace, replacing ``cem_seeds`` for that trace (flag:
    ``TRACE=SEEDS``, e.g. ``multigpu20=1000-1003``, repeatable)"""
    cem_worst_weight: float = 0.0
    """teacher=cem: weight of the worst per-trace slowdown ratio in the objective"""
    cem_nonneg: list[str] = field(default_factory=list)
    """teacher=cem: candidate features whose effective weight is kept >= 0"""
    cem_max_minutes: float | None = None
    """teacher=cem: end the search after the generation in which this many minutes
    passed (None: no limit)"""
    dyn_jobs: int = 2048
    """jobs per episode of fleetmind/MultiClusterPlacement-v0 (2,048, the env's and
    the released dynamic model's setting)"""
    queue_features: bool = False
    """the 4 queue-aware candidate features (env option ``queue_features``)"""


@dataclass
class PairedArgs:
    """Settings of a paired-PPO run (``fleetmind sched train --mode dynamic --algo paired`` flags;
    the recipe is :mod:`fleetmind.training.recipes.paired`)."""

    mode: ClassVar[str] = "dynamic"

    traces: list[str] = field(default_factory=lambda: ["default"])
    """source traces of the fresh variants (openb names or CSV paths)"""
    init: str = str(DYNAMIC_RELEASE_DIR)
    """dynamic-mode model folder whose clone starts (and anchors) the learner (default: the
    released ``models/placement-dynamic``)"""
    iterations: int = 40
    """training iterations"""
    workloads_per_iter: int = 2
    """fresh workloads (variant + job stream) per iteration"""
    group_size: int = 6
    """sampled learner episodes per workload (``G``)"""
    learning_rate: float = 3e-5
    """Adam step size"""
    clip_range: float = 0.2
    """PPO ratio clip"""
    kl_coef: float = 0.05
    """KL-to-clone penalty weight: KL(learner || clone)"""
    n_epochs: int = 2
    """passes over an iteration's steps"""
    batch_size: int = 2048
    """minibatch (steps)"""
    baseline: Literal["time", "episode"] = "time"
    """advantage baseline: ``time`` (time-aligned cost-to-go) or ``episode`` (the group's mean
    return)"""
    dyn_jobs: int | None = None
    """jobs per training episode (None: the model's own setting)"""
    kinds: list[str] = field(default_factory=lambda: list(VARIANT_KINDS))
    """variant kinds of training and validation workloads"""
    val_streams: int = 30
    """fresh validation workloads for the checkpoint choice"""
    val_every: int = 5
    """validate every this many iterations"""
    val_jobs: int | None = None
    """jobs per validation episode (None: the model's own setting)"""
    workers: int = 1
    """local processes for the episodes (``--workers`` without ``--seeds``)"""
    ray_address: str | None = None
    """run the episodes as Ray tasks on this cluster (``--ray-address`` without ``--seeds``)"""
    seed: int = 0
    """seed of the learner's sampling and of the training workloads"""
    max_minutes: float | None = None
    """stop after the iteration during which this much wall time passed"""
    out: str = "runs/paired"
    """run folder (``<out>/<run name>/``)"""
    release: bool = False
    """copy the artifact to ``models/placement-dynamic/``"""
    tracking_uri: str | None = None
    """MLflow tracking URI"""
    experiment: str = "fleetmind-placement"
    """MLflow experiment name"""
    threads: int = 1
    """torch threads"""
    progress: bool = True
    """progress bar"""


@dataclass
class DistillArgs:
    """Settings of a distillation run (``fleetmind sched train --mode dynamic --algo distill``
    flags; the recipe is :mod:`fleetmind.training.recipes.distill`)."""

    mode: ClassVar[str] = "dynamic"

    traces: list[str] = field(default_factory=lambda: ["default"])
    """source traces of the fresh variants (openb names or CSV paths)"""
    init: str | None = None
    """dynamic-mode model folder whose clone starts the learner and anchors it (default: the
    released models/placement-dynamic)"""
    iterations: int = 8
    """DAgger iterations (label, aggregate, fit, validate)"""
    workloads_per_iter: int = 4
    """fresh workloads (variant + job stream) labelled per iteration"""
    window: list[int] = field(default_factory=lambda: [0, 64])
    """decision indices LO HI where the improver is asked (the early decisions, where the
    rollout headroom of 2026-12-01 lay)"""
    every: int = 4
    """ask the improver at every n-th decision of the window"""
    k: int = 3
    """candidates the improver tries (the base policy's top k)"""
    samples: int = 2
    """sampled futures per improver call"""
    future: str = "sampled"
    """the improver's future: sampled (independent streams after the decision, what a deployed
    rollout policy could do) or known (the training workload's own arrivals: hindsight labels)"""
    base: str = "clone"
    """policy the improver rolls out: clone (DAgger on the rollout policy) or learner
    (approximate policy iteration)"""
    margin: float = 0.0
    """estimated mean-slowdown gain an improved action needs over the base's greedy one"""
    anchor_per_workload: int = 512
    """visited states per workload kept for the KL anchor to the clone"""
    learning_rate: float = 1e-3
    """Adam step size of each fit"""
    anchor_coef: float = 1.0
    """weight of KL(clone || learner) on the anchor states"""
    fit_steps: int = 300
    """Adam steps per fit"""
    batch_size: int = 256
    """minibatch of labelled and of anchor states per step"""
    restart: bool = True
    """fit each iteration from the clone's weights on the whole aggregate"""
    dyn_jobs: int | None = 1024
    """jobs per training episode (shorter than the model's 2,048 to halve the rollout cost;
    None: the model's own setting)"""
    kinds: list[str] = field(default_factory=lambda: ["cpu", "gpushare", "gpuspec", "multigpu"])
    """variant kinds of training and validation workloads"""
    val_streams: int = 30
    """paired fresh validation streams for the checkpoint choice"""
    val_every: int = 1
    """validate every this many iterations"""
    val_jobs: int | None = None
    """jobs per validation episode (None: the model's own setting)"""
    workers: int = 1
    """local processes that label the workloads of an iteration (ignored with --ray-address)"""
    ray_address: str | None = None
    """label the workloads as Ray tasks on this cluster ('auto', 'HOST:PORT', 'local')"""
    seed: int = 0
    """seed of the training workloads, the sampled futures and the fit"""
    max_minutes: float | None = None
    """stop after the iteration during which this much wall time passed"""
    out: str = "runs/distill"
    """run folder (<out>/<run name>/)"""
    release: bool = False
    """copy the artifact to models/placement-dynamic/"""
    tracking_uri: str | None = None
    """MLflow tracking URI"""
    experiment: str = "fleetmind-placement"
    """MLflow experiment name"""
    threads: int = 1
    """torch threads"""
    progress: bool = True
    """progress bar"""


@dataclass
class EsArgs:
    """Settings of an evolution-strategies run (``fleetmind sched train --mode dynamic --algo es``
    flags; the recipe is :mod:`fleetmind.training.recipes.es`)."""

    mode: ClassVar[str] = "dynamic"

    traces: list[str] = field(default_factory=lambda: ["default"])
    """source traces of the fresh variants (openb names or CSV paths)"""
    init: str | None = None
    """dynamic-mode model folder whose clone is the base of the residual head (default: the
    released models/placement-dynamic)"""
    iterations: int = 100
    """ES generations"""
    workloads_per_iter: int = 4
    """fresh workloads (variant + job stream) every candidate of a generation is scored on (4:
    one of each variant kind)"""
    pairs: int = 8
    """antithetic perturbation pairs per generation"""
    sigma: float = 0.15
    """perturbation standard deviation of the residual head (head-weight units)"""
    learning_rate: float = 0.02
    """step size on the residual head (per unit of the rank-utility gradient with sgd)"""
    optimizer: str = "sgd"
    """sgd (plain ascent: a noisy gradient gives a small step) or adam"""
    l2: float = 0.0
    """pull of the residual head toward 0 (the clone)"""
    dyn_jobs: int | None = None
    """jobs per training episode (None: the model's own setting, 2,048)"""
    kinds: list[str] = field(default_factory=lambda: ["cpu", "gpushare", "gpuspec", "multigpu"])
    """variant kinds of training and validation workloads"""
    val_streams: int = 30
    """paired fresh validation streams for the checkpoint choice"""
    val_every: int = 5
    """validate every this many generations"""
    val_jobs: int | None = None
    """jobs per validation episode (None: the model's own setting)"""
    workers: int = 2
    """local processes for the episodes (ignored with --ray-address)"""
    ray_address: str | None = None
    """run the episodes as Ray tasks on this cluster ('auto', 'HOST:PORT', 'local')"""
    seed: int = 0
    """seed of the training workloads and the perturbations"""
    max_minutes: float | None = None
    """stop after the generation during which this much wall time passed"""
    out: str = "runs/es"
    """run folder (<out>/<run name>/)"""
    release: bool = False
    """copy the artifact to models/placement-dynamic/"""
    tracking_uri: str | None = None
    """MLflow tracking URI"""
    experiment: str = "fleetmind-placement"
    """MLflow experiment name"""
    threads: int = 1
    """torch threads"""
    progress: bool = True
    """progress bar"""


@dataclass
class OrderArgs(EsArgs):
    """Settings of a learned-queue-order run (``fleetmind sched train --mode dynamic --algo
    order`` flags; the recipe is :mod:`fleetmind.training.recipes.order`). The fields are
    :class:`EsArgs`'; the defaults below differ (``theta`` has 4 values, not 64)."""

    iterations: int = 30
    """ES generations"""
    workloads_per_iter: int = 4
    """fresh workloads (variant + job stream) every candidate of a generation is scored on"""
    pairs: int = 4
    """antithetic perturbation pairs per generation"""
    sigma: float = 0.3
    """perturbation standard deviation of the order weights"""
    learning_rate: float = 0.05
    """step size on the order weights (Adam: about this much per weight and generation)"""
    optimizer: str = "adam"
    """sgd or adam"""
    out: str = "runs/order"
    """run folder (<out>/<run name>/)"""
    backfill_depth: int | None = None
    """jobs behind the queue head the order may start before it, in training, validation and the
    exported model (None: the start model's setting: 256 for the release since 2026-12-03, 8 for
    models before it); the window the
    order chooses from is 1 + this (``docs/ppo-dynamic.md``, "Learned queue order")"""


def check_release_target(folder: Path) -> None:
    """Refuse ``sched train --release`` into ``folder`` when it lies in an installed package.

    :func:`fleetmind.data.paths.refuse_write_into_installed_package`: in a pip install the released
    models are package data in site-packages, so the run's own model folder is the artifact to use.

    Raises:
        ConfigError: FleetMind is not a source checkout and ``folder`` is a packaged model folder.
    """
    refuse_write_into_installed_package(
        folder,
        "--release",
        "train without --release and pass the run's model folder (<--out>/<run name>/model, "
        "printed as 'artifact') with --model",
    )
