"""Episodes without a decision, and workloads that must not depend on the CSV's row order.

* ``GpuPlacement-v0``: gymnasium cannot return an episode that is already over from ``reset``
  (``gymnasium/core.py``, ``Env.reset`` returns an observation to act on), and SB3's vector envs
  step right after ``reset`` (``stable_baselines3/common/vec_env/dummy_vec_env.py``,
  ``subproc_vec_env.py``), so a drawn workload without any decision is redrawn; a workload seed
  given in ``options`` is kept (evaluation reads the final ``info`` at reset).
* ``MultiClusterPlacement-v0``: a stream of which no job fits the fleet is redrawn the same way,
  a trace of which no job fits is refused up front, evaluation (``job_stream``) gets the redrawn
  stream too, and a FleetMind error in any ``SubprocVecEnv`` worker, at any call, is raised in the
  parent as that error (not a pipe error, not a hang).
* fgd training whose workload seeds never give a decision is one ``DataError`` up front, whatever
  ``--n-envs``.
* fgd mode (docs/placement.md, "fgd mode" step 1: the pods are sorted by name, so the workload
  depends on the pods) and dynamic mode draw from the trace in name order.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pytest
from dynamic_helpers import small_trace, two_cluster_fleet

from fleetmind.data.errors import DataError
from fleetmind.data.openb import TraceWarning, load_openb_nodes, load_openb_trace
from fleetmind.envs.dynamic.jobs import build_jobs
from fleetmind.envs.fgd_mode import build_workload
from fleetmind.envs.gpu_placement_env import GpuPlacementEnv
from fleetmind.envs.multicluster_env import MultiClusterPlacementEnv

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
    "deletion_time,scheduled_time\n"
)
NODES = """sn,cpu_milli,memory_mib,gpu,model
n0,32000,131072,8,V100M32
n1,32000,131072,8,V100M32
"""
"""Two 8-GPU nodes: 16,000 milli-GPU of capacity."""


def _nodes(tmp_path: Path):
    (tmp_path / "nodes.csv").write_text(NODES)
    return load_openb_nodes(tmp_path / "nodes.csv")


def _rare_trace(tmp_path: Path) -> Path:
    """One small pod that fits both nodes and 20 8-GPU pods that fit none (CPU too large): the
    workload keeps about 3 of the 21 pods, so most workloads leave the agent nothing to decide."""
    rows = ["a-small,1000,1024,1,500,,LS,Running,0,100,0"]
    rows += [f"b-big-{i:02d},200000,1024,8,1000,,LS,Running,{i},{i + 100},{i}" for i in range(20)]
    path = tmp_path / "rare.csv"
    path.write_text(HEADER + "\n".join(rows) + "\n")
    return path


def _placement_env(tmp_path: Path, **kw: object) -> GpuPlacementEnv:
    return GpuPlacementEnv(
        traces=load_openb_trace(_rare_trace(tmp_path)), nodes=_nodes(tmp_path), **kw
    )


# ------------------------------------------------------------------ GpuPlacement-v0 (F1)
def test_a_drawn_workload_without_a_decision_is_redrawn(tmp_path: Path) -> None:
    env = _placement_env(tmp_path)
    first_draw_degenerate = 0
    for seed in range(12):
        # the first draw of reset(seed=seed) is workload_seed = default_rng(seed).integers(2**31-1)
        ws = int(np.random.default_rng(seed).integers(2**31 - 1))
        _, given = env.reset(options={"workload_seed": ws})
        first_draw_degenerate += "n_decisions" in given
        obs, info = env.reset(seed=seed)
        assert "n_decisions" not in info, info  # the episode is not over at reset
        assert env.action_masks().sum() >= 1
        env.step(0)  # raised "call reset() before step()" when reset returned a finished episode
    assert first_draw_degenerate >= 3  # the case the redraw is for happens here


def test_a_given_workload_seed_without_a_decision_ends_at_reset(tmp_path: Path) -> None:
    env = _placement_env(tmp_path)
    for ws in range(50):
        obs, info = env.reset(options={"workload_seed": ws})
        if "n_decisions" in info:
            break
    else:
        pytest.fail("no degenerate workload seed among 0..49")
    assert info["workload_seed"] == ws and info["n_decisions"] == 0
    assert not obs.any()
    with pytest.raises(RuntimeError):
        env.step(0)


def test_a_trace_that_never_gives_a_decision_is_a_data_error(tmp_path: Path) -> None:
    # a pool of workload seeds that all leave the agent no decision, then a trace with no
    # placeable pod at all (it passes reset only by drawing 100 workloads)
    env = _placement_env(tmp_path)
    bad = []
    for ws in range(60):
        _, info = env.reset(options={"workload_seed": ws})
        if "n_decisions" in info:
            bad.append(ws)
    assert len(bad) >= 2
    pooled = _placement_env(tmp_path, workload_seeds=bad[:2])
    with pytest.raises(DataError, match=f"none of the workload seeds {bad[0]}, {bad[1]}"):
        pooled.reset(seed=0)
    rows = [f"b-big-{i:02d},200000,1024,8,1000,,LS,Running,{i},{i + 100},{i}" for i in range(20)]
    (tmp_path / "none.csv").write_text(HEADER + "\n".join(rows) + "\n")
    env = GpuPlacementEnv(traces=load_openb_trace(tmp_path / "none.csv"), nodes=_nodes(tmp_path))
    with pytest.raises(DataError, match="100 workloads drawn in a row gave the agent no decision"):
        env.reset(seed=0)


@pytest.mark.timeout(120)
def test_fgd_training_on_workload_seeds_without_a_decision_is_one_data_error(
    tmp_path: Path,
) -> None:
    # --n-envs 2 (the default): each SubprocVecEnv worker used to print the DataError's
    # traceback and this process got a pipe error; now the recipe resets one env of the run's
    # settings here first, before the run folder and the MLflow run
    from fleetmind.training.recipes.fgd import FgdArgs, run

    pods = _rare_trace(tmp_path)
    (tmp_path / "nodes.csv").write_text(NODES)
    env_kw = {"fgd_until_pct": 0.0, "stop_arrived_pct": 101.0}
    env = _placement_env(tmp_path, **env_kw)
    bad = [ws for ws in range(60) if "n_decisions" in env.reset(options={"workload_seed": ws})[1]]
    assert len(bad) >= 2
    args = FgdArgs(
        traces=[str(pods)],
        nodes=str(tmp_path / "nodes.csv"),
        n_envs=2,
        n_candidates=8,
        workload_seeds=bad[:2],
        eval_traces=[str(pods)],
        out=str(tmp_path / "runs"),
        tracking_uri=f"sqlite:///{tmp_path}/mlflow.db",
        progress=False,
        **env_kw,
    )
    with pytest.raises(DataError, match=f"none of the workload seeds {bad[0]}, {bad[1]}"):
        run(args)
    assert not (tmp_path / "runs").exists()  # nothing written


# ------------------------------------------------------------------ dynamic mode (F2)
def _dyn_trace(n_unfit: int = 40):
    """:func:`small_trace` with all but its first pod made too large for any node (CPU)."""
    tr = small_trace(n_unfit + 1)
    cpu = tr.cpu_milli.copy()
    cpu[1:] = 10**9
    return replace(tr, cpu_milli=cpu)


def _dyn_kwargs(trace, **kw: object) -> dict[str, object]:
    out: dict[str, object] = dict(
        trace=trace, fleet=two_cluster_fleet(), node_fraction=1.0, n_jobs=4, n_candidates=4
    )
    out.update(kw)
    return out


def _first_stream(env: MultiClusterPlacementEnv, seed: int):
    """The first stream drawn from ``default_rng(seed)`` (before any redraw)."""
    rng = np.random.default_rng(seed)
    return build_jobs(
        env.trace,
        env.fleet,
        rng,
        target_util=env.target_util,
        n_jobs=env.n_jobs,
        max_work_s=env.max_work_s,
    )


def test_a_dynamic_stream_without_a_fitting_job_is_redrawn() -> None:
    env = MultiClusterPlacementEnv(**_dyn_kwargs(_dyn_trace()))
    first_draw_empty = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TraceWarning)  # 4 jobs cannot reach the load
        for seed in range(8):
            first_draw_empty += not np.isfinite(_first_stream(env, seed).ideal_s).any()
            obs, info = env.reset(seed=seed)  # raised ConfigError at the first empty stream
            assert env.action_masks().any()
    assert first_draw_empty >= 3


def test_evaluation_gets_the_stream_reset_plays_when_the_first_has_no_fitting_job() -> None:
    # rl.dynamic_eval.job_stream scored the first draw (no decision) while reset redrew it
    from fleetmind.rl.dynamic_eval import job_stream

    env = MultiClusterPlacementEnv(**_dyn_kwargs(_dyn_trace()))
    redrawn = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TraceWarning)
        for seed in range(8):
            first = _first_stream(env, seed)
            jobs, priority = job_stream(env, seed)
            env.reset(seed=seed)
            for key, val in asdict(jobs).items():
                np.testing.assert_array_equal(
                    np.asarray(val), np.asarray(asdict(env.jobs)[key]), key
                )
            np.testing.assert_array_equal(priority, env.sim.state.priority)
            if np.isfinite(first.ideal_s).any():  # a first draw with a decision is kept
                assert first.names.tolist() == jobs.names.tolist()
            else:
                redrawn += 1
                assert np.isfinite(jobs.ideal_s).any()
    assert redrawn >= 3


def test_a_dynamic_trace_with_no_fitting_job_is_refused_up_front() -> None:
    tr = _dyn_trace()
    cpu = tr.cpu_milli.copy()
    cpu[:] = 10**9
    env = MultiClusterPlacementEnv(**_dyn_kwargs(replace(tr, cpu_milli=cpu)))
    with pytest.raises(DataError, match="no job of the trace .* fits any node"):
        env.check_jobs_fit()
    MultiClusterPlacementEnv(**_dyn_kwargs(tr)).check_jobs_fit()  # one job fits: no error


def test_a_data_error_in_a_subprocess_worker_is_raised_as_itself() -> None:
    from fleetmind.training.recipes.dynamic import make_dyn_vec_env

    tr = _dyn_trace()
    cpu = tr.cpu_milli.copy()
    cpu[:] = 10**9
    kw = _dyn_kwargs(None)
    kw.pop("trace")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TraceWarning)
        # each worker's first reset draws 100 streams without a fitting job, then DataError;
        # it used to end the worker with a traceback and this process with EOFError
        with pytest.raises(DataError, match="100 streams of 4 jobs drawn in a row"):
            make_dyn_vec_env([replace(tr, cpu_milli=cpu)], kw, n_envs=2, seed=0)


@pytest.mark.timeout(120)  # the regression was a wait without end: fail, not hang
def test_a_data_error_in_a_later_subprocess_worker_mid_run_is_raised(monkeypatch) -> None:
    # SB3 forks the workers one after another (stable_baselines3/common/vec_env/
    # subproc_vec_env.py, SubprocVecEnv.__init__), so worker 0 holds a copy of worker 1's pipe
    # end: when worker 1 alone ended, this process never saw EOF and waited in step_wait forever
    from fleetmind.training.recipes import dynamic as dyn

    step = dyn.MultiTraceDynEnv.step

    def failing_step(self, action):  # noqa: ANN001, ANN202 - only rank 1 fails (fork copies it)
        if self._rank == 1:
            dyn.worker_exit(self._error_dir, self._rank, DataError("rank 1 failed mid-run"))
        return step(self, action)

    monkeypatch.setattr(dyn.MultiTraceDynEnv, "step", failing_step)
    kw = _dyn_kwargs(None, n_jobs=8)
    kw.pop("trace")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TraceWarning)
        venv = dyn.make_dyn_vec_env([small_trace(20)], kw, n_envs=2, seed=0)
    procs = list(venv.venv.processes)
    venv.reset()
    assert len(venv.env_method("action_masks")) == 2
    with pytest.raises(DataError, match="rank 1 failed mid-run"):
        venv.step(np.zeros(2, dtype=np.int64))
    assert venv.venv.closed and not any(p.is_alive() for p in procs)  # worker 0 ended too


# ------------------------------------------------------------------ row order (F7)
def _order_trace(tmp_path: Path, reverse: bool) -> Path:
    """12 pods with distinct requests (names p-1 .. p-12) and tied creation times."""
    rows = [
        f"p-{i},{1000 + i},1024,1,{100 * (i % 9 + 1)},,LS,Running,{i // 3},{i // 3 + 50},{i // 3}"
        for i in range(1, 13)
    ]
    if reverse:
        rows = rows[::-1]
    path = tmp_path / ("rev.csv" if reverse else "fwd.csv")
    path.write_text(HEADER + "\n".join(rows) + "\n")
    return path


def test_the_fgd_workload_does_not_depend_on_the_row_order(tmp_path: Path) -> None:
    a = load_openb_trace(_order_trace(tmp_path, False))
    b = load_openb_trace(_order_trace(tmp_path, True))
    for seed in range(5):
        # 12 pods ask for ~5,900 milli; 1.3 x 20,000 needs ~40 resampled copies
        wa = build_workload(a, 3, 20_000, seed)
        wb = build_workload(b, 3, 20_000, seed)
        assert len(wa.trace) > wa.n_original  # resampled
        assert wa.trace.pod_names.tolist() == wb.trace.pod_names.tolist()
        assert (wa.priority == wb.priority).all()


def test_the_dynamic_stream_does_not_depend_on_the_row_order(tmp_path: Path) -> None:
    a = load_openb_trace(_order_trace(tmp_path, False))
    b = load_openb_trace(_order_trace(tmp_path, True))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TraceWarning)
        for seed in range(5):
            ja = build_jobs(a, two_cluster_fleet(), np.random.default_rng(seed), n_jobs=8)
            jb = build_jobs(b, two_cluster_fleet(), np.random.default_rng(seed), n_jobs=8)
            for key, va in asdict(ja).items():
                np.testing.assert_array_equal(np.asarray(va), np.asarray(asdict(jb)[key]), key)


def test_canonical_order_is_natural_and_the_openb_row_order() -> None:
    from fleetmind.envs.fgd_mode import canonical_pod_order

    names = np.array(["openb-pod-10000", "openb-pod-9999", "openb-pod-0001", "a", "openb-pod-9999"])
    assert canonical_pod_order(names).tolist() == [3, 2, 1, 4, 0]
    # the openb CSVs are in this order (cpu300 has names past openb-pod-9999), so their
    # workloads and streams are those of file order
    try:
        traces = [load_openb_trace(n) for n in ("default", "cpu300")]
    except Exception:  # noqa: BLE001 - the shared data folder is optional
        pytest.skip("openb traces not available")
    for tr in traces:
        assert (canonical_pod_order(tr.pod_names) == np.arange(len(tr))).all()
