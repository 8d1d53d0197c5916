"""A real two-node Ray cluster on this machine (a head and one more node process, loopback only):
an evaluation sweep, a CMA-ES teacher search and the jobs of the three dynamic-mode learners (ES,
paired PPO, distillation) give exactly the single-process results."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from functools import partial

import numpy as np
import pytest

from fleetmind import cli
from fleetmind.data.paths import MODELS_DIR
from fleetmind.rl.distill import DistillHyperparams, label_job
from fleetmind.rl.dynamic_eval import model_config
from fleetmind.rl.es import Adam, EsHyperparams, Workload, es_generation
from fleetmind.rl.paired import episode_job as paired_episode_job
from fleetmind.rl.paired import load_clone
from fleetmind.rl.scaleout import run_tasks
from fleetmind.rl.teacher_search import cmaes_search

ray = pytest.importorskip("ray")

# `ray start` with this interpreter, so that the cluster's workers import this checkout's fleetmind
RAY = [sys.executable, "-c", "import sys; from ray.scripts.scripts import main; sys.exit(main())"]
NODES = "sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
    f"n{i},{[32000, 64000, 96000][i % 3]},{[65536, 262144][i % 2]},{[1, 2, 4, 8][i % 4]},"
    f"{['T4', 'P100', 'V100M32'][i % 3]}\n"
    for i in range(12)
)
PODS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n" + "".join(
    f"p{i:03d},{1000 + 500 * (i % 5)},{2048 * (1 + i % 3)},{[0, 1, 1, 2, 1][i % 5]},"
    f"{[0, 300, 1000, 1000, 650][i % 5]}\n"
    for i in range(50)
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    # --block keeps `ray start` in the foreground as the leader of its own process group, so the
    # finaliser ends exactly this cluster's processes (never `ray stop`, which ends every Ray on
    # the machine)
    return subprocess.Popen(
        [*RAY, "start", "--block", *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _stop(p: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            return
        try:
            p.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _wait_port(port: int, seconds: float) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.3)


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    port = _free_port()
    tmp = tempfile.mkdtemp(prefix="rt", dir="/tmp")
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
    common = ["--num-cpus", "1", "--node-ip-address", "127.0.0.1", "--disable-usage-stats"]
    head = ["--head", "--port", str(port), "--include-dashboard", "false", "--temp-dir", tmp]
    procs = []
    try:
        procs.append(_start([*head, *common], env))
        _wait_port(port, 60)  # the head's GCS, before the second node joins
        address = f"127.0.0.1:{port}"
        procs.append(_start(["--address", address, *common], env))
        ray.init(address=address, log_to_driver=False)
        deadline = time.time() + 60
        while len([n for n in ray.nodes() if n["Alive"]]) < 2 and time.time() < deadline:
            time.sleep(0.3)
        yield address
    finally:
        if ray.is_initialized():
            ray.shutdown()
        for p in reversed(procs):
            _stop(p)
        shutil.rmtree(tmp, ignore_errors=True)


def _node_id() -> str:
    time.sleep(0.5)
    return ray.get_runtime_context().get_node_id()


def test_cluster_has_two_nodes_and_sweeps_match_single_process(cluster, tmp_path) -> None:
    assert len([n for n in ray.nodes() if n["Alive"]]) == 2
    (tmp_path / "nodes.csv").write_text(NODES)
    (tmp_path / "pods.csv").write_text(PODS)
    base = ["sched", "evaluate", "--trace", str(tmp_path / "pods.csv"), "--nodes"]
    base += [str(tmp_path / "nodes.csv"), "--seeds", "1-2", "--policies", "FGD", "BestFit"]
    base += ["teacher", "clone", "--model", str(MODELS_DIR / "placement")]
    assert cli.main([*base, "--json", str(tmp_path / "local.json")]) == 0
    assert cli.main([*base, "--ray-address", cluster, "--json", str(tmp_path / "ray.json")]) == 0
    local = json.loads((tmp_path / "local.json").read_text())["policies"]
    remote = json.loads((tmp_path / "ray.json").read_text())["policies"]
    assert set(local) == set(remote) == {"FGD", "BestFit", "teacher", "clone"}
    for name in local:
        assert remote[name]["per_seed"] == local[name]["per_seed"], name

    # teacher search: the same CMA-ES proposals and episode metrics on the cluster as in-process
    cfg = {
        "traces": [str(tmp_path / "pods.csv")],
        "nodes_path": str(tmp_path / "nodes.csv"),
        "fgd_until_pct": 0.0,
    }
    eps = [(str(tmp_path / "pods.csv"), 3), (str(tmp_path / "pods.csv"), 4)]
    kw = {"generations": 2, "population": 3, "init_sd": 0.8, "seed": 5}
    a = cmaes_search(cfg, eps, **kw)
    b = cmaes_search(cfg, eps, ray_address=cluster, **kw)
    assert a.best_score == b.best_score and a.history == b.history
    assert a.weights.tolist() == b.weights.tolist()
    assert a.best_score <= a.fgd_score

    # both nodes take tasks (SPREAD: otherwise Ray may keep short tasks on the head while the
    # second node's worker process is still starting)
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import this file
    node_of = ray.remote(num_cpus=1, scheduling_strategy="SPREAD")(_node_id)
    assert len(set(ray.get([node_of.remote() for _ in range(6)]))) == 2


@pytest.mark.filterwarnings("ignore:offered load:UserWarning")
def test_learners_jobs_on_the_cluster_match_single_process(cluster, shared_data) -> None:
    """The dynamic-mode learners' jobs as Ray tasks: an ES generation (``rl/es.py``), paired
    PPO's episodes (``rl/paired.py``) and distillation's labels (``rl/distill.py``) give the same
    results, in the same order, as in this process."""
    init = MODELS_DIR / "placement-dynamic"
    cfg = replace(model_config(init), n_jobs=32, node_fraction=0.03)
    wl = [Workload.of("multigpu20", 11, cfg), Workload.of("gpushare40", 12, cfg)]
    on_cluster = partial(run_tasks, ray_address=cluster)
    hp = EsHyperparams(pairs=2, sigma=0.3, learning_rate=0.1)

    def once(run: object = None) -> object:
        return es_generation(
            np.zeros(64), wl, str(init), hp, Adam(64, 0.1), np.random.default_rng(3), run=run
        )

    here, there = once(), once(on_cluster)
    assert there.theta.tolist() == here.theta.tolist()
    assert (there.pop_gap_pct, there.clone_slowdown) == (here.pop_gap_pct, here.clone_slowdown)

    state = {k: v.numpy().copy() for k, v in load_clone(init).state_dict().items()}
    ep_jobs = [(str(init), None, wl[0], None), (str(init), state, wl[1], 7)]
    ep_here = [paired_episode_job(j) for j in ep_jobs]
    ep_there = on_cluster(paired_episode_job, ep_jobs)
    for a, b in zip(ep_here, ep_there, strict=True):
        assert a.actions.tolist() == b.actions.tolist() and a.metrics == b.metrics

    dhp = DistillHyperparams(window=(0, 8), every=4, anchor_per_workload=8)
    lab_jobs = [(str(init), None, w, dhp, 1) for w in wl]
    lab_here = [label_job(j) for j in lab_jobs]
    lab_there = on_cluster(label_job, lab_jobs)
    for a, b in zip(lab_here, lab_there, strict=True):
        assert a.labels.tolist() == b.labels.tolist() and a.gain.tolist() == b.gain.tolist()


def test_unreachable_cluster_is_a_one_line_error(tmp_path, capsys) -> None:
    (tmp_path / "pods.csv").write_text(PODS)
    (tmp_path / "nodes.csv").write_text(NODES)
    argv = ["sched", "evaluate", "--trace", str(tmp_path / "pods.csv"), "--nodes"]
    argv += [str(tmp_path / "nodes.csv"), "--seeds", "1", "--policies", "FGD"]
    assert cli.main([*argv, "--ray-address", f"127.0.0.1:{_free_port()}"]) == 2
    err = capsys.readouterr().err
    assert "no Ray cluster at" in err and err.count("\n") == 1
    assert cli.main([*argv, "--ray-address", "nohostport"]) == 2
    assert "expected auto, local or HOST:PORT" in capsys.readouterr().err
