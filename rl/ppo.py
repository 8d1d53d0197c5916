"""MaskablePPO for placement: vectorised envs, imitation warm start, greedy evaluation.

The pieces the recipes of ``training/recipes/`` compose (SB3 split: the algorithm is sb3-contrib's
``MaskablePPO``; the network is :class:`fleetmind.rl.policy.CandidateScorerPolicy`):

* :func:`make_vec_env`: ``SubprocVecEnv`` (``DummyVecEnv`` for one env) of seeded placement envs
  wrapped in ``VecMonitor`` (episode return, length and the fgd-mode metric in ``info``).
* :func:`collect_teacher` + :func:`behaviour_clone`: imitation warm start. The teacher is FGD
  (candidate 0 of every observation) or any ``act(obs, mask)``, e.g. the CEM-searched linear scorer
  of :mod:`fleetmind.rl.teacher`. Cloning its decisions (cross-entropy on the masked logits) and regressing
  the critic on the teacher's discounted returns starts PPO at the teacher's level instead of at a
  random policy, which a 30-minute budget on two shared cores could never climb out of.
* :func:`make_model`: ``MaskablePPO`` with the documented hyperparameters.
* :func:`greedy_rollout`: deterministic episodes of an actor, returning the fgd-mode metric.

Observation normalisation is done inside the env (fixed scales documented in
``envs/candidates.py``), not by ``VecNormalize``: the statistics would otherwise have to travel with
the exported model, and per-slot running statistics would break the candidate permutation symmetry.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fleetmind.data.errors import ConfigError, FleetMindError
from fleetmind.envs.gpu_placement_env import GpuPlacementEnv
from fleetmind.rl.vec_workers import subproc_vec_env, worker_exit

EPISODE_INFO_KEYS = (
    "unallocated_gpu_pct_at_100",
    "unallocated_gpu_pct_at_130",
    "n_failed",
    "n_decisions",
)


@dataclass
class PPOHyperparams:
    """MaskablePPO settings (see ``docs/ppo.md`` for why these values)."""

    learning_rate: float = 1e-4
    """Adam step size (lower than SB3's 3e-4 because PPO starts from the cloned FGD policy)"""
    n_steps: int = 512
    """rollout length per env before each update"""
    batch_size: int = 128
    """minibatch size"""
    n_epochs: int = 4
    """passes over each rollout"""
    gamma: float = 0.995
    """discount (a placement affects fragmentation for hundreds of later pods)"""
    gae_lambda: float = 0.95
    """GAE lambda"""
    clip_range: float = 0.15
    """PPO clip"""
    target_kl: float | None = 0.02
    """stop the epoch loop early when the approximate KL passes this"""
    ent_coef: float = 0.001
    """entropy bonus"""
    vf_coef: float = 0.5
    """value loss weight"""
    max_grad_norm: float = 0.5
    """gradient clipping"""
    hidden: int = 64
    """hidden width of the candidate scorer (tanh)"""


def env_factory(
    rank: int,
    seed: int,
    env_kwargs: dict[str, Any],
    env_cls: type | None = None,
    error_dir: str | None = None,
) -> Callable[[], Any]:
    """A picklable thunk that builds env ``rank`` (``env_cls``, default :class:`GpuPlacementEnv`)
    seeded with ``seed + rank``; in a ``SubprocVecEnv`` worker (``error_dir``), a FleetMind error
    while building it is left for the parent (:func:`fleetmind.rl.vec_workers.worker_exit`)."""

    def _make() -> Any:
        try:
            env = (env_cls or GpuPlacementEnv)(**env_kwargs)
            env.reset(seed=seed + rank)
        except FleetMindError as err:
            worker_exit(error_dir, rank, err)
        env.action_space.seed(seed + rank)
        return env

    return _make


def make_vec_env(
    n_envs: int,
    seed: int,
    env_kwargs: dict[str, Any],
    env_cls: type | None = None,
    info_keywords: tuple[str, ...] = EPISODE_INFO_KEYS,
) -> Any:
    """``VecMonitor(SubprocVecEnv | DummyVecEnv)`` of ``n_envs`` placement envs (any env class that
    follows the candidate convention of ``envs/candidates.py``); the ``SubprocVecEnv`` is
    :func:`fleetmind.rl.vec_workers.subproc_vec_env` (no wait without end on a worker that ended;
    a FleetMind error building an env raised here as itself)."""
    from stable_baselines3.common.vec_env import DummyVecEnv, VecMonitor

    if n_envs > 1:
        err_dir = tempfile.TemporaryDirectory(prefix="fleetmind-workers-")
        fns = [env_factory(i, seed, env_kwargs, env_cls, err_dir.name) for i in range(n_envs)]
        venv = subproc_vec_env(fns, err_dir)
    else:
        venv = DummyVecEnv([env_factory(0, seed, env_kwargs, env_cls)])
    venv.seed(seed)
    return VecMonitor(venv, info_keywords=info_keywords)


def make_model(venv: Any, hp: PPOHyperparams, seed: int, device: str = "cpu") -> Any:
    """A ``MaskablePPO`` with :class:`fleetmind.rl.policy.CandidateScorerPolicy` on ``venv``."""
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.logger import Logger

    from fleetmind.rl.policy import CandidateScorerPolicy

    k, f, g = venv.get_attr("n_candidates")[0], venv.get_attr("n_cand_features")[0], None
    g = venv.get_attr("n_global_features")[0]
    model = MaskablePPO(
        CandidateScorerPolicy,
        venv,
        learning_rate=hp.learning_rate,
        n_steps=hp.n_steps,
        batch_size=hp.batch_size,
        n_epochs=hp.n_epochs,
        gamma=hp.gamma,
        gae_lambda=hp.gae_lambda,
        clip_range=hp.clip_range,
        target_kl=hp.target_kl,
        ent_coef=hp.ent_coef,
        vf_coef=hp.vf_coef,
        max_grad_norm=hp.max_grad_norm,
        policy_kwargs={
            "n_candidates": k,
            "n_cand_features": f,
            "n_global_features": g,
            "hidden": hp.hidden,
        },
        seed=seed,
        device=device,
        verbose=0,
    )
    # SB3's default logger (``configure(None, [""])``) creates an empty ``$TMPDIR/SB3-<time>``
    # folder at every ``learn()`` and never removes it; a logger without outputs keeps the
    # values the callbacks read (``name_to_value``) and writes nothing
    model.set_logger(Logger(folder=None, output_formats=[]))
    return model


@dataclass
class TeacherData:
    """Teacher transitions: ``obs (T, D)``, ``masks (T, K)``, ``actions (T,)``, ``returns (T,)``."""

    obs: np.ndarray
    masks: np.ndarray
    actions: np.ndarray
    returns: np.ndarray


def collect_teacher(
    env: Any,
    episodes: int,
    seed: int,
    gamma: float,
    teacher: Callable[[np.ndarray, np.ndarray], int] | None = None,
    progress: Callable[[int], None] | None = None,
) -> TeacherData:
    """Roll out ``teacher`` (default FGD = candidate 0) for ``episodes`` episodes of ``env``.

    An episode that ends at its reset (no decision left after the FGD prefix: the reset's info
    is the final one, with ``n_decisions``) gives no samples.

    Raises:
        ConfigError: no episode reached a decision (nothing to clone).
    """
    obs_l, mask_l, act_l, ret_l = [], [], [], []
    for ep in range(episodes):
        obs, info = env.reset(seed=seed + ep)
        rewards = []
        done = "n_decisions" in info
        while not done:
            mask = env.action_masks()
            a = 0 if teacher is None else int(teacher(obs, mask))
            obs_l.append(obs)
            mask_l.append(mask)
            act_l.append(a)
            obs, r, term, trunc, _ = env.step(a)
            rewards.append(r)
            done = term or trunc
            if progress is not None:
                progress(1)
        g = 0.0
        rets = np.empty(len(rewards))
        for i in range(len(rewards) - 1, -1, -1):
            g = rewards[i] + gamma * g
            rets[i] = g
        ret_l.append(rets)
    if not act_l:
        raise ConfigError(
            f"none of {episodes} teacher episodes reached a placement decision (every pod was "
            "placed by the FGD prefix or fits nowhere): lower fgd_until_pct or use another trace"
        )
    return TeacherData(
        np.asarray(obs_l, dtype=np.float32),
        np.asarray(mask_l, dtype=bool),
        np.asarray(act_l, dtype=np.int64),
        np.concatenate(ret_l).astype(np.float32),
    )


def behaviour_clone(
    policy: Any,
    data: TeacherData,
    epochs: int = 30,
    batch_size: int = 256,
    lr: float = 3e-3,
    seed: int = 0,
    value_coef: float = 0.5,
    target_ce: float = 0.2,
) -> dict[str, float]:
    """Fit the policy's actor to the teacher's actions and its critic to the teacher's returns.

    Stops early once the epoch's mean cross-entropy is below ``target_ce`` (the teacher's action
    then has probability about ``exp(-target_ce)``, 0.82 by default: confident enough that PPO's
    sampled rollouts stay near the teacher, stochastic enough to explore).

    Returns:
        ``{"bc/ce", "bc/value_mse", "bc/accuracy", "bc/epochs"}`` of the last epoch.
    """
    from fleetmind.rl.policy import MASKED_LOGIT

    gen = torch.Generator().manual_seed(seed)
    obs = torch.as_tensor(data.obs)
    masks = torch.as_tensor(data.masks)
    acts = torch.as_tensor(data.actions)
    rets = torch.as_tensor(data.returns)
    opt = torch.optim.Adam(policy.parameters(), lr=lr)
    policy.set_training_mode(True)
    n = len(acts)
    stats: dict[str, float] = {}
    for epoch in range(epochs):
        perm = torch.randperm(n, generator=gen)
        ce_sum, mse_sum, correct = 0.0, 0.0, 0
        for i in range(0, n, batch_size):
            b = perm[i : i + batch_size]
            logits, latent_vf = policy.mlp_extractor(obs[b])
            logits = torch.where(masks[b], logits, torch.full_like(logits, MASKED_LOGIT))
            value = policy.value_net(latent_vf).squeeze(-1)
            ce = torch.nn.functional.cross_entropy(logits, acts[b])
            mse = torch.nn.functional.mse_loss(value, rets[b])
            loss = ce + value_coef * mse
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
            opt.step()
            ce_sum += float(ce.detach()) * len(b)
            mse_sum += float(mse.detach()) * len(b)
            correct += int((logits.detach().argmax(-1) == acts[b]).sum())
        stats = {
            "bc/ce": ce_sum / n,
            "bc/value_mse": mse_sum / n,
            "bc/accuracy": correct / n,
            "bc/epochs": float(epoch + 1),
        }
        if stats["bc/ce"] < target_ce:
            break
    policy.set_training_mode(False)
    return stats


def greedy_rollout(
    env: GpuPlacementEnv,
    act: Callable[[np.ndarray, np.ndarray], int],
    trace: str,
    workload_seed: int,
) -> dict[str, Any]:
    """One deterministic episode on ``trace`` / ``workload_seed``; returns the final ``info``."""
    obs, info = env.reset(options={"trace": trace, "workload_seed": workload_seed})
    done = "n_decisions" in info  # a workload without any decision ends at reset
    while not done:
        obs, _, term, trunc, info = env.step(int(act(obs, env.action_masks())))
        done = term or trunc
    return info


def evaluate_greedy(
    env: GpuPlacementEnv,
    act: Callable[[np.ndarray, np.ndarray], int],
    traces: Sequence[str],
    seeds: Sequence[int],
    key: str = "unallocated_gpu_pct_at_100",
) -> dict[str, dict[int, float]]:
    """``{trace: {seed: metric}}`` of greedy episodes."""
    return {t: {s: float(greedy_rollout(env, act, t, s)[key]) for s in seeds} for t in traces}


def model_actor(model: Any) -> Callable[[np.ndarray, np.ndarray], int]:
    """Greedy ``act(obs, mask)`` of a ``MaskablePPO`` model (its ``predict``)."""

    def act(obs: np.ndarray, mask: np.ndarray) -> int:
        a, _ = model.predict(obs, action_masks=mask, deterministic=True)
        return int(a)

    return act
