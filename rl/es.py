"""Evolution strategies with common random numbers over a residual head of the dynamic-mode clone.

The learner is the clone with a residual added to its logit head: the logit of candidate ``c`` is
``(W0 + theta) . h_c + b``, where ``h_c`` (``hidden`` = 64 values) is the clone's own last hidden
layer for the candidate, ``W0`` its head weights and ``theta`` (``(hidden,)``, zero at the start)
what is learned. So the learner *is* the clone at ``theta = 0``, keeps its network, export and
inference cost, and searches a 64-dimensional space of re-weightings of the features the clone
already computes.

One generation of :func:`es_generation` (the recipe is ``training/recipes/es.py``,
``fleetmind sched train --mode dynamic --algo es``; ``docs/ppo-dynamic.md``, section "Evolution
strategies"):

1. ``P`` antithetic pairs ``theta +- sigma * eps_p`` (``eps_p`` standard normal), all scored on the
   same fresh workloads (a trace and a stream seed: the same arrivals and node priority for every
   candidate: common random numbers), plus the clone and the current ``theta`` on each.
2. On each workload the ``2P`` candidates are ranked by mean slowdown (centred ranks, lower is
   better); a candidate's utility is its mean rank over the workloads, so every workload weighs
   the same whatever its load, and one chaotic workload (a single changed decision can swing a
   queue's mean slowdown by 15 %) cannot outvote the others.
3. The antithetic gradient estimate ``sum_p (u+_p - u-_p) eps_p / (2 P sigma)`` and one step on
   ``theta``: plain gradient ascent (``sgd``, the default: a noisy estimate gives a small step)
   or Adam (``adam``: every coordinate moves about ``lr`` per step, noise included), with an
   optional L2 pull toward 0 (the clone).

Every episode is an independent job (:func:`episode_job`, a pure function of its arguments) run by
:func:`fleetmind.rl.scaleout.run_tasks`: in this process, in forked processes or as Ray tasks, with
identical results in the same order.

Shapes: ``theta`` ``(H,)`` float64 (``H`` = the head's input width); slowdowns are dimensionless.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from fleetmind.rl.dynamic_eval import Workload, cached
from fleetmind.rl.export import PlacementActor
from fleetmind.rl.paired import greedy_metrics, load_clone

Runner = Callable[[Callable[[Any], Any], Sequence[Any]], list[Any]]
"""``run(fn, items) -> [fn(x) for x in items]`` (e.g. :func:`fleetmind.rl.scaleout.run_tasks`
with its keywords bound)."""


@dataclass
class EsHyperparams:
    """Settings of one ES generation (``fleetmind sched train --algo es`` flags)."""

    pairs: int = 8
    """antithetic pairs per generation (``2 x pairs`` perturbed candidates)"""
    sigma: float = 0.15
    """perturbation standard deviation (head-weight units; on a ``default`` variant 0.3 changed
    ~7 % of the clone's decisions that had two or more feasible candidates)"""
    learning_rate: float = 0.02
    """step size on ``theta`` (per unit of the rank-utility gradient with ``sgd``)"""
    optimizer: str = "sgd"
    """``sgd`` (plain ascent) or ``adam``"""
    l2: float = 0.0
    """weight of ``||theta||^2`` in the ascent (a pull toward the clone)"""


def head_weights(actor: PlacementActor) -> np.ndarray:
    """``(H,)`` float64 copy of the actor's logit-head weights."""
    return actor.scorer.logit_head.weight.detach().double().numpy().reshape(-1).copy()


def with_residual(actor: PlacementActor, base: np.ndarray, theta: np.ndarray) -> PlacementActor:
    """Set ``actor``'s logit-head weights to ``base + theta`` (both ``(H,)``; added in float32,
    the same way in every process) and return it."""
    w = torch.as_tensor(np.asarray(base, dtype=np.float32)) + torch.as_tensor(
        np.asarray(theta, dtype=np.float32)
    )
    with torch.no_grad():
        actor.scorer.logit_head.weight.copy_(w.reshape(actor.scorer.logit_head.weight.shape))
    return actor


def episode_job(job: tuple[str, Workload, tuple[float, ...] | None]) -> dict[str, float]:
    """The final metrics of one greedy episode: ``(init, workload, theta)`` -> the simulator's
    metrics (``mean_slowdown``, ``p99_queue_delay_s``, ...). ``init`` is the model folder whose
    clone is the base (absolute path); ``theta`` ``None`` runs the clone itself. The clone and the
    env are built once per process."""
    init, wl, theta = job
    torch.set_num_threads(1)
    clone, actor, w0 = cached(("es-model", init), lambda: _base_models(init))
    env = wl.env()
    if theta is None:
        return greedy_metrics(env, wl.stream_seed, clone)
    return greedy_metrics(env, wl.stream_seed, with_residual(actor, w0, np.asarray(theta)))


def _base_models(init: str) -> tuple[PlacementActor, PlacementActor, np.ndarray]:
    """``(clone, a copy whose head is rewritten per job, the clone's head weights)``."""
    clone = load_clone(init)
    return clone, copy.deepcopy(clone).eval(), head_weights(clone)


def _local(fn: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
    return [fn(x) for x in items]


OPTIMIZERS = ("sgd", "adam")


class Sgd:
    """Plain gradient ascent: the step is ``lr x grad``."""

    def __init__(self, dim: int, learning_rate: float) -> None:
        self.dim, self.learning_rate = dim, learning_rate

    def step(self, grad: np.ndarray) -> np.ndarray:
        """The ascent step for ``grad`` ``(dim,)``."""
        return self.learning_rate * np.asarray(grad, dtype=float)


def make_optimizer(hp: EsHyperparams, dim: int) -> Sgd | Adam:
    """The optimizer ``hp.optimizer`` names, over ``dim`` values."""
    if hp.optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {hp.optimizer!r}")
    return Adam(dim, hp.learning_rate) if hp.optimizer == "adam" else Sgd(dim, hp.learning_rate)


@dataclass
class Adam:
    """Adam ascent on a numpy vector (the step is ``+ lr x m_hat / (sqrt(v_hat) + eps)``)."""

    dim: int
    learning_rate: float
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    t: int = 0
    m: np.ndarray = field(init=False)
    v: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.m = np.zeros(self.dim)
        self.v = np.zeros(self.dim)

    def step(self, grad: np.ndarray) -> np.ndarray:
        """The ascent step for ``grad`` ``(dim,)``."""
        self.t += 1
        self.m = self.beta1 * self.m + (1 - self.beta1) * grad
        self.v = self.beta2 * self.v + (1 - self.beta2) * grad**2
        m_hat = self.m / (1 - self.beta1**self.t)
        v_hat = self.v / (1 - self.beta2**self.t)
        return self.learning_rate * m_hat / (np.sqrt(v_hat) + self.eps)


def centred_ranks(x: np.ndarray) -> np.ndarray:
    """Utilities in ``[-0.5, 0.5]`` from ``x`` (``(n,)``, lower is better): the lowest gets 0.5,
    the highest -0.5; ties share their mean rank."""
    n = len(x)
    if n < 2:
        return np.zeros(n)
    order = np.argsort(x, kind="stable")
    ranks = np.empty(n)
    ranks[order] = np.arange(n, dtype=float)
    for v in np.unique(x):  # ties: mean rank
        same = x == v
        ranks[same] = ranks[same].mean()
    return 0.5 - ranks / (n - 1)


@dataclass
class Generation:
    """What one generation measured and did."""

    theta: np.ndarray
    """``(H,)`` after the step"""
    center_gap_pct: float
    """the pre-step ``theta``'s mean paired slowdown ratio to the clone, minus 1, in %"""
    center_p99_ratio: float
    """its mean p99 queueing delay over the clone's on the same workloads"""
    pop_gap_pct: float
    """the same for the mean of the ``2P`` perturbed candidates"""
    best_gap_pct: float
    """the best perturbed candidate's"""
    step_norm: float
    """``||theta_after - theta_before||``"""
    episodes: int
    clone_slowdown: list[float]
    """the clone's mean slowdown per workload"""


def es_generation(
    theta: np.ndarray,
    workloads: Sequence[Workload],
    init: str,
    hp: EsHyperparams,
    opt: Sgd | Adam,
    rng: np.random.Generator,
    run: Runner | None = None,
    episode: Callable[[Any], dict[str, float]] | None = None,
) -> Generation:
    """One generation (module docstring): score the clone, ``theta`` and ``2 x hp.pairs``
    perturbations on every workload, then one step of ``opt``. ``run`` runs the episode jobs (default:
    in this process); ``episode`` is the job (default :func:`episode_job`: ``theta`` a residual on
    the clone's head; :func:`fleetmind.rl.order_es.order_episode_job`: ``theta`` a queue order)."""
    dim = len(theta)
    eps = rng.standard_normal((hp.pairs, dim))
    cands = [None, tuple(map(float, theta))]
    for e in eps:
        cands.append(tuple(map(float, theta + hp.sigma * e)))
        cands.append(tuple(map(float, theta - hp.sigma * e)))
    jobs = [(init, wl, c) for c in cands for wl in workloads]
    got = (run or _local)(episode or episode_job, jobs)
    n_w = len(workloads)
    ms = np.array([g["mean_slowdown"] for g in got]).reshape(len(cands), n_w)
    p99 = np.array([g["p99_queue_delay_s"] for g in got]).reshape(len(cands), n_w)
    ratio = (ms / ms[0]).mean(axis=1)  # (2 + 2P,)
    pert = ratio[2:]
    u = np.mean([centred_ranks(ms[2:, w]) for w in range(n_w)], axis=0)  # (2P,)
    grad = ((u[0::2] - u[1::2])[:, None] * eps).sum(axis=0) / (2 * hp.pairs * hp.sigma)
    grad = grad - 2.0 * hp.l2 * theta
    step = opt.step(grad)
    return Generation(
        theta=theta + step,
        center_gap_pct=float(100 * (ratio[1] - 1)),
        center_p99_ratio=float(p99[1].mean() / max(float(p99[0].mean()), 1e-9)),
        pop_gap_pct=float(100 * (pert.mean() - 1)),
        best_gap_pct=float(100 * (pert.min() - 1)),
        step_norm=float(np.linalg.norm(step)),
        episodes=len(jobs),
        clone_slowdown=[float(x) for x in ms[0]],
    )
