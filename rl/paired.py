"""Paired, critic-free PPO over a behaviour clone (dynamic mode): the learner sees its own consequences.

One iteration of :func:`paired_iteration` (the recipe is ``training/recipes/paired.py``,
``fleetmind sched train --mode dynamic --algo paired``; ``docs/ppo-dynamic.md``):

1. For each workload (a trace and a stream seed: the same arrivals, the same node priority), the
   greedy clone runs once (the paired reference) and the learner samples ``G`` episodes from the
   empty fleet, so every rollout starts from a state the clone itself visits.
2. The return is the episode metric with ``gamma = 1``. With ``baseline="time"`` (the default)
   the cost is charged as waiting accrues: job ``j`` costs ``1 / ideal_j`` per second from its
   arrival to its end, so the cost of a whole episode is ``N x mean slowdown``; the cost-to-go
   from a decision at time ``t`` is what accrues after ``t``. The advantage of a step is minus
   (its rollout's cost-to-go minus the group's mean cost-to-go at the same time ``t``), per job
   (Decima's input-driven, time-aligned baseline). With ``baseline="episode"`` every step of a
   rollout gets minus (its mean slowdown minus the group's mean): group-relative, as in POMO.
3. The clipped PPO objective on the actions taken, plus ``kl_coef x KL(learner || clone)`` on the
   visited states instead of an entropy bonus. No value head enters the loss (the network's
   critic layers stay as they are, unused, so the export format does not change).

Shapes: observations ``(T, K*F + G)`` float32, masks ``(T, K)`` bool, actions ``(T,)`` int64; costs
are in mean-slowdown units (dimensionless).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fleetmind.data.errors import ModelLoadError
from fleetmind.envs.multicluster_env import N_GLOBAL_FEATURES
from fleetmind.rl.dynamic_eval import Workload, cached
from fleetmind.rl.export import PlacementActor, load_torch
from fleetmind.rl.policy import MASKED_LOGIT

BASELINES = ("time", "episode")


@dataclass
class PairedHyperparams:
    """Settings of paired PPO (``fleetmind sched train --algo paired`` flags)."""

    group_size: int = 6
    """``G``, sampled learner episodes per workload"""
    learning_rate: float = 3e-5
    """Adam step size"""
    clip_range: float = 0.2
    """PPO ratio clip"""
    kl_coef: float = 0.05
    """weight of ``KL(learner || clone)`` in the loss (replaces the entropy bonus)"""
    n_epochs: int = 2
    """passes over an iteration's steps"""
    batch_size: int = 2048
    """minibatch (steps)"""
    max_grad_norm: float = 0.5
    """gradient clipping"""
    baseline: str = "time"
    """``time`` (cost-to-go minus the group's at the same time) or ``episode`` (return minus
    the group's mean return)"""


@dataclass
class Episode:
    """One episode on one workload: the steps (sampled or greedy) and what they cost."""

    obs: np.ndarray
    """``(T, D)`` float32"""
    masks: np.ndarray
    """``(T, K)`` bool"""
    actions: np.ndarray
    """``(T,)`` int64"""
    logp: np.ndarray
    """``(T,)`` log-probability of each action under the acting policy"""
    times: np.ndarray
    """``(T,)`` simulated time of each decision (s)"""
    metrics: dict[str, float]
    """the simulator's final metrics (``mean_slowdown``, ``p99_queue_delay_s``...)"""
    arrival: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))
    end: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))
    ideal: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))

    def cost_to_go(self, t: np.ndarray) -> np.ndarray:
        """``(len(t),)`` slowdown cost accruing after each time ``t`` (s), divided by the number of
        started jobs; at ``t <= 0`` it is the episode's mean slowdown."""
        n = max(len(self.end), 1)
        out = np.empty(len(t))
        for i in range(0, len(t), 256):  # (256, N) at a time
            tt = np.asarray(t[i : i + 256])[:, None]
            left = np.clip(self.end[None, :] - np.maximum(tt, self.arrival[None, :]), 0.0, None)
            out[i : i + 256] = (left / self.ideal[None, :]).sum(axis=1) / n
        return out


def masked_logits(actor: PlacementActor, obs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``(B, K)`` logits of ``actor``'s scorer with masked candidates at ``MASKED_LOGIT``."""
    logits = actor.scorer.forward_actor(obs)
    return torch.where(mask, logits, torch.full_like(logits, MASKED_LOGIT))


def run_episode(
    env: Any,
    seed: int,
    actor: PlacementActor,
    rng: np.random.Generator | None = None,
) -> Episode:
    """One episode of ``env`` (a :class:`fleetmind.envs.multicluster_env.MultiClusterPlacementEnv`) on the
    stream of ``reset(seed=seed)``: greedy when ``rng`` is None, else actions sampled from the
    actor's masked softmax with ``rng`` (Gumbel-max, so the draws are reproducible)."""
    obs, info = env.reset(seed=int(seed))
    obs_l, mask_l, act_l, logp_l, time_l = [], [], [], [], []
    done = False
    with torch.no_grad():
        while not done:
            mask = env.action_masks()
            lg = masked_logits(actor, torch.as_tensor(obs[None]), torch.as_tensor(mask[None]))[0]
            logp = torch.log_softmax(lg, dim=-1).numpy()
            if rng is None:
                a = int(np.argmax(logp))
            else:
                a = int(np.argmax(np.where(mask, logp + rng.gumbel(size=logp.size), -np.inf)))
            obs_l.append(obs)
            mask_l.append(mask)
            act_l.append(a)
            logp_l.append(float(logp[a]))
            time_l.append(float(info["time_s"]))
            obs, _, term, trunc, info = env.step(a)
            done = term or trunc
    sim = env.sim
    started = np.isfinite(sim.start_s)
    return Episode(
        obs=np.asarray(obs_l, dtype=np.float32),
        masks=np.asarray(mask_l, dtype=bool),
        actions=np.asarray(act_l, dtype=np.int64),
        logp=np.asarray(logp_l, dtype=np.float32),
        times=np.asarray(time_l),
        metrics=dict(info["metrics"]),
        arrival=np.asarray(sim.jobs.arrival_s[started], dtype=float),
        end=np.asarray(sim.end_s[started], dtype=float),
        ideal=np.asarray(sim.jobs.ideal_s[started], dtype=float),
    )


def group_advantages(group: Sequence[Episode], baseline: str = "time") -> list[np.ndarray]:
    """Per episode of one workload, ``(T_i,)`` advantages (minus cost, mean-slowdown units).

    ``time``: minus (the episode's cost-to-go at each of its decision times minus the group's
    mean cost-to-go at those times). ``episode``: minus (its mean slowdown minus the group's
    mean), on every step. Both are 0 everywhere when the group has one episode or all its
    episodes took the same actions.
    """
    if baseline not in BASELINES:
        raise ValueError(f"baseline must be one of {BASELINES}, got {baseline!r}")
    if baseline == "episode":
        ms = np.array([e.metrics["mean_slowdown"] for e in group])
        return [np.full(len(e.actions), -(m - ms.mean())) for e, m in zip(group, ms, strict=True)]
    out = []
    for e in group:
        costs = np.stack([g.cost_to_go(e.times) for g in group])  # (G, T_e)
        own = next(i for i, g in enumerate(group) if g is e)
        out.append(-(costs[own] - costs.mean(axis=0)))
    return out


def ppo_update(
    actor: PlacementActor,
    clone: PlacementActor,
    opt: torch.optim.Optimizer,
    episodes: Sequence[Episode],
    advantages: Sequence[np.ndarray],
    hp: PairedHyperparams,
    gen: torch.Generator,
) -> dict[str, float]:
    """The clipped PPO objective on every step of ``episodes`` (advantages divided by their
    standard deviation over the batch) plus ``hp.kl_coef x KL(actor || clone)``.

    Returns:
        ``{"loss", "pg_loss", "kl_clone", "clip_frac", "approx_kl"}`` means over the minibatches.
    """
    obs = torch.as_tensor(np.concatenate([e.obs for e in episodes]))
    masks = torch.as_tensor(np.concatenate([e.masks for e in episodes]))
    acts = torch.as_tensor(np.concatenate([e.actions for e in episodes]))
    old = torch.as_tensor(np.concatenate([e.logp for e in episodes]))
    adv_np = np.concatenate(advantages)
    sd = float(adv_np.std())
    adv = torch.as_tensor(adv_np / (sd if sd > 1e-12 else 1.0), dtype=torch.float32)
    with torch.no_grad():
        clone_logp = torch.log_softmax(masked_logits(clone, obs, masks), dim=-1)
    n = len(acts)
    sums = {"loss": 0.0, "pg_loss": 0.0, "kl_clone": 0.0, "clip_frac": 0.0, "approx_kl": 0.0}
    n_batches = 0
    actor.train()
    for _ in range(hp.n_epochs):
        perm = torch.randperm(n, generator=gen)
        for i in range(0, n, hp.batch_size):
            b = perm[i : i + hp.batch_size]
            logp_all = torch.log_softmax(masked_logits(actor, obs[b], masks[b]), dim=-1)
            logp = logp_all.gather(1, acts[b, None]).squeeze(1)
            ratio = torch.exp(logp - old[b])
            a = adv[b]
            pg = -torch.min(
                ratio * a, torch.clamp(ratio, 1 - hp.clip_range, 1 + hp.clip_range) * a
            ).mean()
            p = logp_all.exp()
            valid = masks[b]
            kl_terms = torch.where(valid, p * (logp_all - clone_logp[b]), torch.zeros_like(p))
            kl = kl_terms.sum(-1).mean()
            loss = pg + hp.kl_coef * kl
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(actor.parameters(), hp.max_grad_norm)
            opt.step()
            with torch.no_grad():
                sums["loss"] += float(loss)
                sums["pg_loss"] += float(pg)
                sums["kl_clone"] += float(kl)
                sums["clip_frac"] += float(((ratio - 1).abs() > hp.clip_range).float().mean())
                sums["approx_kl"] += float(((ratio - 1) - torch.log(ratio)).mean())
            n_batches += 1
    actor.eval()
    return {k: v / max(n_batches, 1) for k, v in sums.items()}


@dataclass
class IterationResult:
    """What one iteration measured, per workload, before its update."""

    clone: list[float]
    """greedy clone's mean slowdown per workload"""
    sampled: list[float]
    """mean over the ``G`` sampled episodes' mean slowdowns, per workload"""
    update: dict[str, float]
    """:func:`ppo_update`'s statistics"""

    @property
    def sample_gap_pct(self) -> float:
        """Mean over workloads of the sampled episodes' mean slowdown relative to the clone's (%)."""
        return float(
            np.mean([100 * (s / c - 1) for s, c in zip(self.sampled, self.clone, strict=True)])
        )


def paired_iteration(
    workloads: Sequence[tuple[Any, int]],
    actor: PlacementActor,
    clone: PlacementActor,
    opt: torch.optim.Optimizer,
    hp: PairedHyperparams,
    rng: np.random.Generator,
    gen: torch.Generator,
    clone_cache: dict[tuple[int, int], float] | None = None,
    progress: Callable[[int], None] | None = None,
) -> IterationResult:
    """One iteration over ``workloads`` (``(env, stream seed)`` pairs): the greedy clone once and
    ``hp.group_size`` sampled learner episodes on each, then one :func:`ppo_update`."""
    clone_ms, groups = [], []
    for env, seed in workloads:
        key = (id(env), int(seed))
        if clone_cache is not None and key in clone_cache:
            c = clone_cache[key]
        else:
            c = run_episode(env, seed, clone).metrics["mean_slowdown"]
            if clone_cache is not None:
                clone_cache[key] = c
        if progress is not None:
            progress(1)
        group = []
        for s in episode_seeds(rng, hp.group_size):
            group.append(run_episode(env, seed, actor, np.random.default_rng(s)))
            if progress is not None:
                progress(1)
        clone_ms.append(float(c))
        groups.append(group)
    return _update(actor, clone, opt, hp, gen, clone_ms, groups)


def episode_seeds(rng: np.random.Generator, n: int) -> list[int]:
    """``n`` seeds of sampled episodes drawn from ``rng`` (each episode samples from its own
    generator, so that it is the same wherever it runs)."""
    return [int(x) for x in rng.integers(0, 2**63 - 1, size=n)]


def _update(
    actor: PlacementActor,
    clone: PlacementActor,
    opt: torch.optim.Optimizer,
    hp: PairedHyperparams,
    gen: torch.Generator,
    clone_ms: list[float],
    groups: list[list[Episode]],
) -> IterationResult:
    """Group advantages of every workload's episodes, then one :func:`ppo_update`."""
    eps = [e for g in groups for e in g]
    advs = [a for g in groups for a in group_advantages(g, hp.baseline)]
    sampled_ms = [float(np.mean([e.metrics["mean_slowdown"] for e in g])) for g in groups]
    stats = ppo_update(actor, clone, opt, eps, advs, hp, gen)
    return IterationResult(clone_ms, sampled_ms, stats)


EpisodeJob = tuple[str, dict[str, np.ndarray] | None, Workload, int | None]
"""``(init, actor weights or None for the clone's, workload, sampling seed or None for greedy)``."""


def episode_job(job: EpisodeJob) -> Episode:
    """One :func:`run_episode` as an independent job (for :func:`fleetmind.rl.scaleout.run_tasks`:
    local processes or Ray tasks); ``init`` is the model folder whose clone gives the network
    (absolute path). The same episode as in this process."""
    init, state, wl, sample_seed = job
    torch.set_num_threads(1)
    clone = cached(("paired-clone", init), lambda: load_clone(init))
    if state is None:
        actor = clone
    else:
        actor = cached(("paired-actor", init), lambda: copy.deepcopy(clone).eval())
        actor.load_state_dict({k: torch.as_tensor(v) for k, v in state.items()})
    rng = None if sample_seed is None else np.random.default_rng(sample_seed)
    return run_episode(wl.env(), wl.stream_seed, actor, rng)


def greedy_metrics_job(job: EpisodeJob) -> dict[str, float]:
    """:func:`episode_job`'s final metrics only (validation: nothing else travels back)."""
    return dict(episode_job(job).metrics)


def paired_iteration_as_jobs(
    workloads: Sequence[Workload],
    init: str,
    actor: PlacementActor,
    clone: PlacementActor,
    opt: torch.optim.Optimizer,
    hp: PairedHyperparams,
    rng: np.random.Generator,
    gen: torch.Generator,
    run: Callable[[Callable[[Any], Any], Sequence[Any]], list[Any]],
) -> IterationResult:
    """:func:`paired_iteration` with every episode an :func:`episode_job` run by ``run`` (e.g.
    :func:`fleetmind.rl.scaleout.run_tasks` with workers or a Ray address bound); the update is
    the same as in this process for the same ``rng`` and ``gen``."""
    state = {k: v.detach().numpy().copy() for k, v in actor.state_dict().items()}
    jobs: list[EpisodeJob] = []
    for wl in workloads:
        jobs.append((init, None, wl, None))
        jobs.extend((init, state, wl, s) for s in episode_seeds(rng, hp.group_size))
    got = run(episode_job, jobs)
    n = 1 + hp.group_size
    clone_ms = [float(got[i * n].metrics["mean_slowdown"]) for i in range(len(workloads))]
    groups = [got[i * n + 1 : (i + 1) * n] for i in range(len(workloads))]
    return _update(actor, clone, opt, hp, gen, clone_ms, groups)


def greedy_metrics(env: Any, seed: int, actor: PlacementActor) -> dict[str, float]:
    """The final metrics of ``actor``'s greedy episode on ``env``'s stream ``seed``."""
    return run_episode(env, seed, actor).metrics


def load_clone(model_dir: str | Path) -> PlacementActor:
    """The clone of a dynamic-mode model folder as a trainable :class:`PlacementActor`.

    Reads ``clone.pt`` when present, else ``policy.pt`` when ``clone.onnx`` is a byte copy of
    ``policy.onnx`` (the released model, whose run kept its clone), else the weights of
    ``clone.onnx`` (its three matrix products and biases), checked against onnxruntime.

    Raises:
        ModelLoadError: no clone in the folder, or its weights do not reproduce its logits.
    """
    d = Path(model_dir)
    if (d / "clone.pt").is_file():
        return load_torch(d / "clone.pt")
    c_onnx, p_onnx = d / "clone.onnx", d / "policy.onnx"
    if not c_onnx.is_file():
        raise ModelLoadError(f"{d} has no clone.onnx or clone.pt (a dynamic-mode model folder?)")
    if (
        p_onnx.is_file()
        and (d / "policy.pt").is_file()
        and c_onnx.read_bytes() == p_onnx.read_bytes()
    ):
        return load_torch(d / "policy.pt")
    return _actor_from_onnx(
        c_onnx, load_torch(d / "policy.pt") if (d / "policy.pt").is_file() else None
    )


def _actor_from_onnx(path: Path, like: PlacementActor | None) -> PlacementActor:
    import onnx
    from onnx import numpy_helper

    from fleetmind.rl.export import OnnxActor

    try:
        m = onnx.load(str(path))
    except Exception as exc:  # protobuf's DecodeError and kin: a truncated or foreign file
        detail = " ".join(f"{type(exc).__name__}: {exc}".split())[:200]
        raise ModelLoadError(
            f"cannot load clone ONNX model {path}: not a valid ONNX file ({detail})"
        ) from None
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    mats = [
        inits[n.input[1]] for n in m.graph.node if n.op_type == "MatMul" and n.input[1] in inits
    ]
    if len(mats) != 3:
        raise ModelLoadError(f"{path}: expected 3 weight matrices, found {len(mats)}")
    d_in, hidden = mats[0].shape
    if like is not None:
        cfg = dict(like.config)
    else:
        runner = OnnxActor(path)
        k = runner.n_candidates
        dim = int(runner.obs_dim or 0)
        g = N_GLOBAL_FEATURES
        f = (dim - g) // k if dim > g and (dim - g) % k == 0 else None
        if f is None or f + g != d_in:
            raise ModelLoadError(f"{path}: cannot infer K, F, G from its graph")
        cfg = {"n_candidates": k, "n_cand_features": f, "n_global_features": g, "hidden": hidden}
    actor = PlacementActor(**cfg)
    sd = actor.state_dict()
    for key, w in zip(
        ("scorer.row_net.0.weight", "scorer.row_net.2.weight", "scorer.logit_head.weight"),
        mats,
        strict=True,
    ):
        sd[key] = torch.as_tensor(w.T.copy())
    for key in ("scorer.row_net.0.bias", "scorer.row_net.2.bias", "scorer.logit_head.bias"):
        if key not in inits:
            raise ModelLoadError(f"{path}: no initializer {key}")
        sd[key] = torch.as_tensor(inits[key].copy())
    actor.load_state_dict(sd)
    actor.eval()
    _check_same(actor, path)
    return actor


def _check_same(actor: PlacementActor, path: Path) -> None:
    from fleetmind.rl.export import OnnxActor

    cfg = actor.config
    k = cfg["n_candidates"]
    dim = k * cfg["n_cand_features"] + cfg["n_global_features"]
    x = np.random.default_rng(0).uniform(0, 1, (32, dim)).astype(np.float32)
    m = np.ones((32, k), dtype=bool)
    ref = OnnxActor(path).session.run(["logits"], {"obs": x, "mask": m})[0]
    with torch.no_grad():
        got = masked_logits(actor, torch.as_tensor(x), torch.as_tensor(m)).numpy()
    if not np.allclose(ref, got, atol=1e-4):
        raise ModelLoadError(f"{path}: weights read from the graph do not reproduce its logits")


def trainable_copy(actor: PlacementActor) -> PlacementActor:
    """A deep copy of ``actor`` (the learner; the original stays the frozen clone)."""
    out = copy.deepcopy(actor)
    for p in out.parameters():
        p.requires_grad_(True)
    return out
