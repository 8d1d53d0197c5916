"""Run independent placement jobs locally or as Ray tasks.

Teacher searches, multi-seed training and evaluation sweeps are lists of independent jobs (one
episode, one training run, one (trace, policy, seed) evaluation). :func:`run_tasks` runs such a list

* with ``ray_address`` (``"auto"``, ``"HOST:PORT"`` or ``"local"``): as Ray tasks on that cluster
  (``ray.init(address=...)``; ``"local"`` starts a private single-node Ray in this process, with
  Ray's usage statistics off and its token in a temporary folder when ``~`` is read-only: see
  :func:`local_ray_environment`), one CPU per task unless told otherwise;
* without it: in this process (``workers`` = 1) or in ``workers`` forked processes, as before.

Each job is a pure function of its arguments (all seeds are in the arguments), so the three paths
return identical results in the same order (``tests/test_scaleout_ray.py`` checks it on a real
two-node Ray cluster). Job functions must be importable module-level functions (Ray pickles them
by reference): :func:`fgd_eval_job`, :func:`teacher_metrics_job`, :func:`train_job`.

To run on a cluster: ``ray start --head --port 6379`` on one machine, ``ray start --address
HEAD:6379`` on the others (same Python environment with fleetmind installed, same data paths), then
pass ``--ray-address auto`` (on a cluster machine) or ``--ray-address HEAD:6379``.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
from collections.abc import Callable, MutableMapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from fleetmind.children import die_with_parent
from fleetmind.data.errors import ConfigError, NotAvailableError
from fleetmind.data.openb import load_openb_nodes, load_openb_trace
from fleetmind.envs.fgd_mode import run_fgd
from fleetmind.envs.gpu_placement_env import GpuPlacementEnv
from fleetmind.folders import remove_at_exit
from fleetmind.rl.named_policies import clone_file, model_folder, run_teacher_fgd, teacher_file
from fleetmind.rl.policy_adapter import RELEASED_DIR, load_ppo_policy
from fleetmind.rl.ppo import greedy_rollout
from fleetmind.rl.teacher import LinearScorer

T = TypeVar("T")
R = TypeVar("R")


def _check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """A ``HOST:PORT`` address must accept a TCP connection (Ray itself retries for minutes)."""
    import socket

    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigError(f"--ray-address {address!r}: expected auto, local or HOST:PORT")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout_s):
            pass
    except OSError as exc:
        raise ConfigError(
            f"no Ray cluster at {address!r} ({exc.strerror or exc}); start one with "
            "`ray start --head` or pass --ray-address auto on a cluster machine"
        ) from None


RAY_TOKEN_VARS = ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
"""The variables that give Ray its authentication token instead of the file ``~/.ray/auth_token``."""


def _writable_ray_folder() -> bool:
    """Whether Ray can keep its token in ``~/.ray`` (made when missing, as Ray would make it)."""
    try:
        folder = Path.home() / ".ray"
        folder.mkdir(parents=True, exist_ok=True)
    except (OSError, RuntimeError):  # RuntimeError: no HOME and no passwd entry
        return False
    return os.access(folder, os.W_OK | os.X_OK)


def local_ray_environment(environ: MutableMapping[str, str] | None = None) -> None:
    """Set the variables a private single-node Ray (``--ray-address local``) reads at start.

    * ``RAY_USAGE_STATS_ENABLED=0`` unless set: Ray's usage statistics are on by default and
      would be sent to ``usage-stats.ray.io``.
    * ``RAY_AUTH_TOKEN_PATH``, to a new token (256 random bits, mode 0600, in a private folder
      made by ``tempfile.mkdtemp`` and removed at exit), when Ray 2.x would write its token to
      ``~/.ray/auth_token`` but ``~`` is not writable (``HOME=/`` on a read-only root, as in the
      image), and neither ``RAY_AUTH_TOKEN`` nor ``RAY_AUTH_TOKEN_PATH`` is set, nor
      ``RAY_AUTH_MODE`` to something else than ``token``.

    Args:
        environ: the environment to change (default ``os.environ``, which Ray's processes
            inherit).
    """
    import secrets
    import tempfile

    env = os.environ if environ is None else environ
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if env.get("RAY_AUTH_MODE", "token").strip().lower() != "token":
        return
    if any(env.get(name) for name in RAY_TOKEN_VARS):
        return
    try:
        if (Path.home() / ".ray" / "auth_token").is_file():
            return
    except (OSError, RuntimeError):
        pass
    if _writable_ray_folder():
        return
    folder = tempfile.mkdtemp(prefix="fleetmind-ray-")
    remove_at_exit(folder)
    token = Path(folder) / "auth_token"
    fd = os.open(token, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))
    env["RAY_AUTH_TOKEN_PATH"] = str(token)


def _ray_init(address: str) -> Any:
    try:
        import ray
    except ImportError:
        raise NotAvailableError("--ray-address needs the 'ray' package (pip install ray)") from None
    if address not in ("auto", "local"):
        _check_reachable(address)
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {"ignore_reinit_error": True, "log_to_driver": False}
        try:
            if address == "local":
                local_ray_environment()
                ray.init(**kwargs, include_dashboard=False)
            else:
                ray.init(address=address, **kwargs)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise ConfigError(
                f"cannot connect to the Ray cluster at {address!r}: {str(exc).splitlines()[0]}"
            ) from None
        except OSError as exc:  # e.g. Ray's temporary folder (/tmp/ray) on a read-only disk
            where = f" {exc.filename}" if exc.filename else ""
            raise ConfigError(
                f"cannot start Ray ({address!r}):{where} {exc.strerror or exc}; Ray writes its "
                "session files under /tmp/ray and its token to ~/.ray (HOME)"
            ) from None
    return ray


def run_tasks(
    fn: Callable[[T], R],
    items: Sequence[T],
    *,
    ray_address: str | None = None,
    workers: int = 1,
    num_cpus: float = 1.0,
    progress: Callable[[int], None] | None = None,
) -> list[R]:
    """``[fn(x) for x in items]``, in order, locally or as Ray tasks (see the module docstring).

    Args:
        fn: a module-level function of one argument.
        items: the job arguments (picklable).
        ray_address: Ray cluster address; ``None``: local.
        workers: local processes when ``ray_address`` is ``None`` (1: this process).
        num_cpus: CPUs Ray reserves per task.
        progress: called with 1 after each finished job.

    Raises:
        ConfigError: ``workers`` < 1 or the Ray cluster cannot be reached.
        NotAvailableError: ``ray_address`` given but Ray is not installed.
    """
    if workers < 1:
        raise ConfigError("workers must be at least 1")
    items = list(items)
    out: list[R] = []
    if ray_address:
        ray = _ray_init(ray_address)
        remote = ray.remote(num_cpus=num_cpus)(fn)
        refs = [remote.remote(x) for x in items]
        results: dict[Any, R] = {}
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            results[done[0]] = ray.get(done[0])
            if progress is not None:
                progress(1)
        return [results[r] for r in refs]
    if workers == 1 or len(items) <= 1:
        for x in items:
            out.append(fn(x))
            if progress is not None:
                progress(1)
        return out
    ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else None
    pool_args = {"initializer": die_with_parent, "initargs": (os.getpid(), signal.SIGKILL)}
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, **pool_args)
    try:
        for r in pool.map(fn, items):
            out.append(r)
            if progress is not None:
                progress(1)
    except BaseException:
        _stop_pool(pool)
        raise
    pool.shutdown()
    return out


def _stop_pool(pool: ProcessPoolExecutor) -> None:
    """End the workers of ``pool`` at once and drop its queued jobs. A Ctrl-C reaches the workers
    too (the terminal's process group), but a SIGTERM or an error reaches the parent only, and
    ``ProcessPoolExecutor``'s ``with`` exit (``shutdown(wait=True)``) waited for every running
    simulation to end (minutes): the stopped command did not exit. ``_processes`` is the pool's
    ``{pid: Process}`` (``concurrent/futures/process.py``)."""
    for proc in list((getattr(pool, "_processes", None) or {}).values()):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            proc.kill()
    # not waiting, nor cancelling: the manager thread fails the pending futures once it sees the
    # workers gone (a cancelled one raised InvalidStateError there), and joining it could wait on
    # a job still being written to the dead workers' pipe; the CLI bounds the exit that follows
    pool.shutdown(wait=False)


# --------------------------------------------------------------------------- job functions

_CACHE: dict[Any, Any] = {}


def _cached(key: Any, make: Callable[[], Any]) -> Any:
    if key not in _CACHE:
        _CACHE[key] = make()
    return _CACHE[key]


def fgd_eval_job(job: tuple[str, str, int, str | None, str | None]) -> Any:
    """One fgd-mode run ``(trace, policy, seed, nodes, model)`` -> :class:`fleetmind.envs.fgd_mode.FgdResult`
    without its per-pod arrays. ``policy`` is a heuristic name, a stage name (``ppo``, ``clone``,
    ``teacher``: ``model`` is the model folder or file, ``None`` for the release),
    ``teacher:PATH`` (a saved teacher JSON) or ``policy:PATH`` (an exported policy file)."""
    trace_ref, policy, seed, nodes_ref, model = job
    trace = _cached(("trace", trace_ref), lambda: load_openb_trace(trace_ref))
    nodes = _cached(("nodes", nodes_ref), lambda: load_openb_nodes(nodes_ref))
    if policy.startswith("teacher:"):  # a saved teacher file
        res = run_teacher_fgd(trace, policy.split(":", 1)[1], int(seed), nodes)
        res.policy = policy
    elif policy.startswith("policy:"):  # an exported policy file (policy.onnx, clone.onnx)
        ref = policy.split(":", 1)[1]
        pol = _cached(("policy", ref), lambda: load_ppo_policy(ref))
        res = run_fgd(trace, pol, int(seed), nodes)
        res.policy = policy
    elif policy == "teacher":
        res = run_teacher_fgd(
            trace, teacher_file(model_folder(model, RELEASED_DIR)), int(seed), nodes
        )
    elif policy in ("ppo", "clone"):
        ref = model if policy == "ppo" else str(clone_file(model_folder(model, RELEASED_DIR)))
        pol = _cached(("policy", policy, ref), lambda: load_ppo_policy(ref))
        res = run_fgd(trace, pol, int(seed), nodes)
        res.policy = policy
    else:
        res = run_fgd(trace, policy, int(seed), nodes)
    res.arrived_milli = res.arrived_milli[:0]
    res.allocated_milli = res.allocated_milli[:0]
    res.node_of = res.node_of[:0]
    res.workload = None
    return res


def teacher_metrics_job(job: tuple[dict[str, Any], list[float], str, int]) -> float:
    """The metric of one greedy episode of a linear scorer: ``(env_config, weights, trace,
    workload_seed)`` -> unallocated GPU % at 100 % arrived. ``env_config`` holds the keyword
    arguments of ``GpuPlacementEnv`` (traces, fgd_until_pct, stop_arrived_pct, n_candidates),
    ``nodes_path`` (a node list CSV; default the openb GPU nodes) and ``blocks`` (the scorer's
    feature blocks)."""
    cfg, weights, trace, wseed = job
    env_kw = {k: v for k, v in cfg.items() if k not in ("blocks", "nodes_path")}
    key = ("env", repr(sorted(cfg.items())))

    def make() -> Any:
        nodes = load_openb_nodes(cfg["nodes_path"]) if cfg.get("nodes_path") else None
        return GpuPlacementEnv(**env_kw, nodes=nodes)

    env = _cached(key, make)
    scorer = LinearScorer(
        np.asarray(weights, dtype=np.float64),
        env.n_candidates,
        env.n_cand_features,
        tuple(cfg.get("blocks", ("all", "sharing", "cpu_only"))),
    )
    return float(greedy_rollout(env, scorer, trace, int(wseed))["unallocated_gpu_pct_at_100"])


TRAIN_JOB_KEYS = ("run_id", "metrics", "artifact", "history", "registry", "eval_set")
"""The keys of a run's summary that :func:`train_job` returns (one run of ``sched train --seeds``)."""


def train_job(job: tuple[str, str, dict[str, Any]]) -> dict[str, Any]:
    """One training run of ``fleetmind sched train``: ``(recipe module, args class, fields)``
    (``training.recipes.fgd`` / ``FgdArgs`` or ``training.recipes.dynamic`` / ``DynamicArgs``;
    ``out`` made per seed by the caller); returns the run summary's id, metrics, artifact,
    history, ``registry`` (its version, champion note) and ``eval_set`` (the evaluation set's
    fingerprint), the keys ``sched train --json`` documents."""
    import importlib

    module, cls, fields = job
    recipe = importlib.import_module(module)
    out = recipe.run(getattr(recipe, cls)(**fields))
    return {k: v for k, v in out.items() if k in TRAIN_JOB_KEYS}


def job_path(p: str | Path | None) -> str | None:
    """A path argument as an absolute string (Ray workers may start in another folder)."""
    if p is None:
        return None
    s = str(p)
    if s.startswith(("models:/", "runs:/")) or not Path(s).exists():
        return s
    return str(Path(s).resolve())
