"""Evolution strategies over the queue order of the dynamic-mode clone.

The clone decides *where* a job runs; the queue decides *which* startable job it is asked to place
next. With FIFO and backfill (the simulator's default) that is the first job of the backfill
window that fits; a :class:`fleetmind.envs.dynamic.order.LinearOrder` starts the one with the
lowest ``phi(j) . theta`` instead, where ``phi`` holds the job's log ideal runtime, its log response
ratio, its GPU request and its queue position (:data:`fleetmind.envs.dynamic.order.ORDER_FEATURES`).
The learner is that weight vector ``theta`` (``(4,)``), started at FIFO's own choice
(:data:`fleetmind.envs.dynamic.order.FIFO_WEIGHTS`), so at step 0 the learner *is* the clone, and
searched by :func:`fleetmind.rl.es.es_generation` with the same antithetic pairs, common random
numbers and per-workload centred ranks as the head-residual ES; the placement network is never
changed. The recipe is ``training/recipes/order.py`` (``fleetmind sched train --mode dynamic
--algo order``); ``docs/ppo-dynamic.md``, section "Learned queue order".
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from fleetmind.envs.dynamic.order import FIFO_WEIGHTS, LinearOrder
from fleetmind.rl.dynamic_eval import Workload, cached
from fleetmind.rl.paired import greedy_metrics, load_clone


class OrderActor:
    """The learner as the validation code sees an actor: the queue-order weights ``theta``
    (``(4,)`` float64) behind ``state_dict`` / ``load_state_dict``."""

    def __init__(self, theta: np.ndarray | None = None) -> None:
        self.theta = np.array(FIFO_WEIGHTS if theta is None else theta, dtype=np.float64)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"theta": torch.as_tensor(self.theta.copy())}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.theta = np.asarray(state["theta"], dtype=np.float64).copy()


def order_episode_job(job: tuple[str, Workload, tuple[float, ...] | None]) -> dict[str, float]:
    """The final metrics of one greedy episode of the clone: ``(init, workload, theta)`` ->
    the simulator's metrics; ``theta`` ``None`` runs the clone with FIFO and backfill (the
    workload's own setting), else with the queue order ``theta``. ``init`` is the model folder
    whose clone places the jobs (absolute path); the clone and the env are built once per process
    and the env's order is set per job (jobs of one process run one after another)."""
    init, wl, theta = job
    torch.set_num_threads(1)
    clone = cached(("order-clone", init), lambda: load_clone(init))
    env = wl.env()
    saved = env.queue_order
    env.queue_order = None if theta is None else LinearOrder(tuple(theta))
    try:
        return greedy_metrics(env, wl.stream_seed, clone)
    finally:
        env.queue_order = saved
