"""Distillation of rollout-improved decisions into the clone's network (dynamic mode): DAgger /
approximate policy iteration over the rollout policy of :mod:`fleetmind.rl.rollout`.

One iteration (the recipe is ``training/recipes/distill.py``, ``fleetmind sched train --mode
dynamic --algo distill``; ``docs/ppo-dynamic.md``, section "Distillation"):

1. On each fresh workload (a trace and a stream seed) the current learner runs greedily from the
   empty fleet (:func:`label_workload`). At the decisions of a window of decision indices
   (default 0-63, where the rollout headroom of 2026-12-01 lay; every ``every``-th one) the
   *improver* is asked for the best action: the rollout policy with sampled futures
   (:class:`fleetmind.rl.rollout.DynamicRolloutPolicy`) tries the base policy's top ``k`` candidates,
   finishes the episode greedily with the base policy on ``samples`` sampled futures (common
   random numbers) and keeps the candidate with the lowest mean slowdown. The base policy is the
   clone (``base="clone"``: DAgger with the fixed rollout policy as expert) or the current learner
   (``base="learner"``: approximate policy iteration). The learner's own action is then taken,
   so later states are the learner's (DAgger), not the improver's.
2. The pairs ``(state, improved action)`` join an aggregate over all iterations, with a sample of
   every visited state (the *anchor* states, all decisions of the episode).
3. The same network (the clone's :class:`fleetmind.rl.export.PlacementActor`, so export and inference
   cost are unchanged) is fitted (:func:`fit`) with the cross-entropy of the improved actions on
   the labelled states plus ``anchor_coef x KL(clone || learner)`` on the anchor states, so the
   decisions the improver did not touch stay the clone's. With ``restart`` (default) each
   iteration fits from the clone's weights on the whole aggregate.

Shapes: observations ``(N, K*F + G)`` float32, masks ``(N, K)`` bool, labels ``(N,)`` int64
(candidate indices); slowdown values are dimensionless.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fleetmind.envs.multicluster_env import MultiClusterPlacementEnv
from fleetmind.rl.dynamic_eval import Workload, cached, job_stream
from fleetmind.rl.export import OnnxActor, PlacementActor
from fleetmind.rl.paired import load_clone, masked_logits
from fleetmind.rl.rollout import DynamicRolloutPolicy, RolloutConfig, top_k

BASES = ("clone", "learner")


@dataclass
class DistillHyperparams:
    """Settings of one distillation iteration (labelling and fitting)."""

    window: tuple[int, int] = (0, 64)
    """decision indices ``[lo, hi)`` where the improver is asked (0 = the run's first placement)"""
    every: int = 2
    """ask at every ``every``-th decision of the window (with >= 2 feasible candidates)"""
    k: int = 3
    """candidates the improver tries (the base policy's top ``k`` by its logits)"""
    samples: int = 2
    """sampled futures per improver call (the same for every candidate)"""
    future: str = "sampled"
    """the improver's future: ``sampled`` (independent streams of the same trace and load after
    the decision: what a deployed rollout policy could do) or ``known`` (the training workload's
    own arrivals: hindsight labels, exact for the workload they came from)"""
    base: str = "clone"
    """policy the improver rolls out: ``clone`` (DAgger on the fixed rollout policy) or
    ``learner`` (approximate policy iteration)"""
    margin: float = 0.0
    """an improved action other than the base's greedy one is kept only when its estimated gain
    (mean slowdown) exceeds this; else the label is the base's greedy action"""
    anchor_per_workload: int = 512
    """visited states kept per workload for the anchor term (uniform sample)"""
    learning_rate: float = 1e-3
    """Adam step size of the fit"""
    anchor_coef: float = 1.0
    """weight of ``KL(clone || learner)`` on the anchor states"""
    steps: int = 300
    """Adam steps per fit"""
    batch_size: int = 256
    """minibatch of labelled states and of anchor states (each) per step"""
    max_grad_norm: float = 1.0
    """gradient clipping"""
    restart: bool = True
    """each fit starts from the clone's weights (else from the current learner)"""

    def rollout_config(self, sample_seed: int) -> RolloutConfig:
        """The improver's :class:`RolloutConfig` (this window and future)."""
        return RolloutConfig(
            k=self.k,
            band=(float(self.window[0]), float(self.window[1])),
            every=1,
            future=self.future,
            samples=self.samples,
            sample_seed=int(sample_seed),
        )


@dataclass
class Labels:
    """What one workload contributed: improved decisions and anchor states."""

    obs: np.ndarray
    """``(L, D)`` float32, the labelled states"""
    masks: np.ndarray
    """``(L, K)`` bool"""
    labels: np.ndarray
    """``(L,)`` int64, the improver's action (a candidate index)"""
    greedy: np.ndarray
    """``(L,)`` int64, the base policy's greedy action at the same states"""
    learner: np.ndarray
    """``(L,)`` int64, the learner's action at the same states (the one taken)"""
    gain: np.ndarray
    """``(L,)`` estimated mean-slowdown gain of the label over the base's greedy action (>= 0)"""
    index: np.ndarray
    """``(L,)`` decision index of each labelled state"""
    anchor_obs: np.ndarray
    """``(A, D)`` float32, a sample of the episode's visited states"""
    anchor_masks: np.ndarray
    """``(A, K)`` bool"""
    metrics: dict[str, float] = field(default_factory=dict)
    """the learner's episode metrics on this workload (``mean_slowdown``, ...)"""
    rollouts: int = 0
    """base-policy episodes run by the improver"""


def label_workload(
    env: MultiClusterPlacementEnv,
    seed: int,
    learner: Any,
    base: Any,
    hp: DistillHyperparams,
    make_env: Callable[[], MultiClusterPlacementEnv],
    sample_seed: int = 0,
) -> Labels:
    """Run ``learner`` greedily on ``env``'s stream ``seed`` and label the window's states with
    the improver (module docstring, step 1).

    Args:
        env: the workload's env (its observation builder follows the learner's run).
        learner: the acting policy (``predict(obs, mask)``; a :class:`PlacementActor` or an
            :class:`fleetmind.rl.export.OnnxActor`).
        base: the policy the improver rolls out (``predict`` and logits, as ``learner``).
        make_env: builds an env of the same setting for the improver's rollouts.
        sample_seed: seeds the sampled futures (with ``seed``).
    """
    jobs, priority = job_stream(env, int(seed))
    sim = env.new_sim(jobs, priority)
    improver = DynamicRolloutPolicy(base, make_env, int(seed), hp.rollout_config(sample_seed))
    improver.reset(sim)  # draws the sampled futures (a pure function of the seeds)
    env.attach(sim)
    lo, hi = hp.window
    rows: dict[str, list[Any]] = {k: [] for k in ("obs", "mask", "lab", "gr", "le", "gain", "i")}
    all_obs, all_mask = [], []
    in_window = 0
    while (j := sim.next_decision()) is not None:
        i = sim.n_decisions
        obs = env.observe(j)
        mask = env.action_masks()
        nodes, gpus = env.candidates()
        all_obs.append(obs)
        all_mask.append(mask)
        a = int(learner.predict(obs, mask))
        if lo <= i < hi and np.count_nonzero(mask) >= 2:
            ask = in_window % hp.every == 0
            in_window += 1
            if ask:
                cands = top_k(base, obs, mask, hp.k)
                vals = improver.step_values(sim, j, [(int(nodes[c]), gpus[c]) for c in cands])
                best = int(np.argmin(vals))
                gain = float(vals[0] - vals[best])
                if gain <= hp.margin:
                    best, gain = 0, 0.0
                rows["obs"].append(obs)
                rows["mask"].append(mask)
                rows["lab"].append(cands[best])
                rows["gr"].append(cands[0])
                rows["le"].append(a)
                rows["gain"].append(gain)
                rows["i"].append(i)
        sim.place(j, int(nodes[a]), gpus[a])
    n = len(all_obs)
    rng = np.random.default_rng([int(sample_seed), int(seed), 7])
    keep = np.sort(rng.choice(n, size=min(n, hp.anchor_per_workload), replace=False))
    d = all_obs[0].size if all_obs else 0
    k = all_mask[0].size if all_mask else 0
    return Labels(
        obs=np.asarray(rows["obs"], dtype=np.float32).reshape(-1, d),
        masks=np.asarray(rows["mask"], dtype=bool).reshape(-1, k),
        labels=np.asarray(rows["lab"], dtype=np.int64),
        greedy=np.asarray(rows["gr"], dtype=np.int64),
        learner=np.asarray(rows["le"], dtype=np.int64),
        gain=np.asarray(rows["gain"], dtype=float),
        index=np.asarray(rows["i"], dtype=np.int64),
        anchor_obs=np.asarray(all_obs, dtype=np.float32)[keep],
        anchor_masks=np.asarray(all_mask, dtype=bool)[keep],
        metrics=dict(sim.metrics()),
        rollouts=improver.log.rollouts,
    )


LabelJob = tuple[str, dict[str, np.ndarray] | None, Workload, DistillHyperparams, int]
"""``(init, learner weights, workload, hp, sample seed)``: the argument of :func:`label_job`."""


def label_job(job: LabelJob) -> Labels:
    """:func:`label_workload` as an independent job (for :func:`fleetmind.rl.scaleout.run_tasks`:
    local processes or Ray tasks). ``init`` is the model folder whose clone anchors the run
    (absolute path); the learner is that clone's network with the given weights (``None``: the
    clone's), as numpy arrays by parameter name. The improver's base is the folder's
    ``clone.onnx`` (``hp.base == "clone"``; the clone network when the folder has none) or the
    learner. Gives the same labels as :func:`label_workload` in this process."""
    init, state, wl, hp, sample_seed = job
    torch.set_num_threads(1)
    clone = cached(("distill-clone", init), lambda: load_clone(init))
    learner = cached(("distill-learner", init), lambda: copy.deepcopy(clone).eval())
    weights = clone.state_dict() if state is None else state
    learner.load_state_dict({k: torch.as_tensor(v) for k, v in weights.items()})
    onnx = Path(init) / "clone.onnx"
    if hp.base == "clone":
        base = cached(("distill-base", init), lambda: OnnxActor(onnx) if onnx.is_file() else clone)
    else:
        base = learner
    env = wl.env()
    return label_workload(
        env, wl.stream_seed, learner, base, hp, wl.make_env, sample_seed=sample_seed
    )


@dataclass
class Aggregate:
    """The DAgger aggregate: every iteration's :class:`Labels`, concatenated on demand."""

    parts: list[Labels] = field(default_factory=list)

    def add(self, labels: Labels) -> None:
        self.parts.append(labels)

    def arrays(self) -> dict[str, np.ndarray]:
        """``obs, masks, labels`` (labelled) and ``anchor_obs, anchor_masks``, concatenated."""
        keys = ("obs", "masks", "labels", "anchor_obs", "anchor_masks")
        return {k: np.concatenate([getattr(p, k) for p in self.parts]) for k in keys}

    @property
    def n_labels(self) -> int:
        return int(sum(len(p.labels) for p in self.parts))

    @property
    def n_changed(self) -> int:
        """Labelled states whose improved action differs from the base's greedy one."""
        return int(sum(int((p.labels != p.greedy).sum()) for p in self.parts))


def kl_to_clone(
    actor: PlacementActor, clone: PlacementActor, obs: np.ndarray, masks: np.ndarray
) -> dict[str, float]:
    """Mean ``KL(clone || actor)`` (nats per decision) and the share of states where the two
    argmaxes agree, over ``obs (N, D)`` / ``masks (N, K)``."""
    if len(obs) == 0:
        return {"kl_clone": 0.0, "agree_clone": 1.0}
    with torch.no_grad():
        o, m = torch.as_tensor(obs), torch.as_tensor(masks)
        la = torch.log_softmax(masked_logits(actor, o, m), dim=-1)
        lc = torch.log_softmax(masked_logits(clone, o, m), dim=-1)
        kl = torch.where(m, lc.exp() * (lc - la), torch.zeros_like(la)).sum(-1).mean()
        agree = (la.argmax(-1) == lc.argmax(-1)).float().mean()
    return {"kl_clone": float(kl), "agree_clone": float(agree)}


def fit(
    actor: PlacementActor,
    clone: PlacementActor,
    data: Aggregate,
    hp: DistillHyperparams,
    gen: torch.Generator,
) -> dict[str, float]:
    """Fit ``actor`` in place: cross-entropy of the labels plus ``hp.anchor_coef x
    KL(clone || actor)`` on the anchor states (module docstring, step 3).

    Returns:
        ``{"ce", "kl_clone", "agree_label", "agree_clone", "n_labels", "n_changed"}``: the
        cross-entropy and label agreement on the labelled states after the fit, KL and argmax
        agreement with the clone on the anchor states.
    """
    if hp.restart:
        actor.load_state_dict(clone.state_dict())
    arr = data.arrays()
    obs, masks = torch.as_tensor(arr["obs"]), torch.as_tensor(arr["masks"])
    labels = torch.as_tensor(arr["labels"])
    a_obs, a_masks = torch.as_tensor(arr["anchor_obs"]), torch.as_tensor(arr["anchor_masks"])
    with torch.no_grad():
        clone_p = torch.softmax(masked_logits(clone, a_obs, a_masks), dim=-1)
    opt = torch.optim.Adam(actor.parameters(), lr=hp.learning_rate)
    n_l, n_a = len(labels), len(a_obs)
    actor.train()
    for _ in range(hp.steps if n_l else 0):
        bl = torch.randint(0, n_l, (min(hp.batch_size, n_l),), generator=gen)
        ba = torch.randint(0, n_a, (min(hp.batch_size, n_a),), generator=gen)
        ce = torch.nn.functional.cross_entropy(masked_logits(actor, obs[bl], masks[bl]), labels[bl])
        la = torch.log_softmax(masked_logits(actor, a_obs[ba], a_masks[ba]), dim=-1)
        pc = clone_p[ba]
        kl = torch.where(a_masks[ba], pc * (torch.log(pc.clamp_min(1e-12)) - la), 0.0).sum(-1)
        loss = ce + hp.anchor_coef * kl.mean()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(actor.parameters(), hp.max_grad_norm)
        opt.step()
    actor.eval()
    with torch.no_grad():
        lg = masked_logits(actor, obs, masks) if n_l else torch.zeros(0, 1)
        ce_end = float(torch.nn.functional.cross_entropy(lg, labels)) if n_l else 0.0
        agree = float((lg.argmax(-1) == labels).float().mean()) if n_l else 1.0
    out = kl_to_clone(actor, clone, arr["anchor_obs"], arr["anchor_masks"])
    return {
        "ce": ce_end,
        "agree_label": agree,
        **out,
        "n_labels": float(n_l),
        "n_changed": float(data.n_changed),
    }


@dataclass
class IterationResult:
    """What one iteration gathered and fitted."""

    labels: list[Labels]
    """this iteration's per-workload labels (the learner's episode metrics in ``metrics``)"""
    fit: dict[str, float]
    """:func:`fit`'s statistics"""


def distill_iteration(
    workloads: Sequence[tuple[MultiClusterPlacementEnv, int, Callable[[], Any]]],
    actor: PlacementActor,
    clone: PlacementActor,
    data: Aggregate,
    hp: DistillHyperparams,
    gen: torch.Generator,
    sample_seed: int = 0,
    base: Any | None = None,
    label: Callable[..., Labels] | None = None,
    progress: Callable[[int], None] | None = None,
) -> IterationResult:
    """One iteration over ``workloads`` (``(env, stream seed, make_env)``): label each with the
    current ``actor`` acting, add the labels to ``data``, then :func:`fit`.

    Args:
        base: the improver's base policy; default ``clone`` (``hp.base == "clone"``) or ``actor``.
        label: replaces :func:`label_workload` (same arguments), e.g. to run it elsewhere.
    """
    if base is None:
        base = clone if hp.base == "clone" else actor
    fn = label or label_workload
    got = []
    for i, (env, seed, make_env) in enumerate(workloads):
        lab = fn(env, seed, actor, base, hp, make_env, sample_seed=sample_seed + i)
        data.add(lab)
        got.append(lab)
        if progress is not None:
            progress(1)
    return IterationResult(got, fit(actor, clone, data, hp, gen))
