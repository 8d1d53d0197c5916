"""Kubernetes-path speed: the scheduler extender on 1,000 nodes, and the Prometheus telemetry refresh.

* ``extender``: the first 1,000 openb GPU nodes, filled by a seeded FGD run, served as telemetry;
  openb ``default`` pods posted as ``ExtenderArgs`` to ``/api/v1/scheduler/filter`` then
  ``/prioritize`` (in-process ASGI client: JSON encoding and routing included, no network). One
  sample = filter + prioritize for one pod with all 1,000 candidate nodes. Target: p99 <= 50 ms.
  ``cpu_ms_per_call``: CPU time of the process (client and server) per sample, which a busy
  shared machine inflates much less than wall time.
* ``telemetry``: 1,000 openb nodes (up to 8 GPUs each) as recorded-format dcgm-exporter and
  kube-state-metrics texts with ``--bound-pods`` pods bound, scraped by the real Prometheus (Debian
  binary); one sample = one ``PrometheusApiSource.collect()`` (two ``/api/v1/query`` calls, JSON
  decoding, building the snapshot). Target: <= 2 s.
* ``live_vs_sim``: ``tests/test_serving_live_sim.py`` on every ``--live-step``-th openb node: the
  unallocated GPU % through Prometheus + extender vs the fgd-mode simulator (same policy, trace
  and seed), and the share of pods placed on the same node.

Usage (from the checkout root)::

    .venv/bin/python -m benchmarks.serving.k8s            # writes benchmarks/results/serving/k8s.json
    .venv/bin/python -m benchmarks.serving.k8s --only extender --pods 200

Each section keeps its own provenance (a rerun of one section keeps the others); the top-level
provenance is the latest run's.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.provenance import REPO_ROOT, RESULTS, load_now, provenance
from fleetmind import argtypes
from fleetmind.cli.runner import run_main


def _test_helpers() -> Any:
    """``tests/k8s_helpers.py`` (recorded exporters, a real Prometheus, the live-vs-simulated run),
    loaded from its file with the helper module it imports: the test suite's helpers are no
    package."""
    for name in ("serving_helpers", "k8s_helpers"):
        if name not in sys.modules:
            spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "tests" / f"{name}.py")
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
    return sys.modules["k8s_helpers"]


OUT = RESULTS / "serving" / "k8s.json"


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q))


def bench_extender(n_nodes: int, n_pods: int, seed: int) -> dict:
    from fastapi.testclient import TestClient

    h = _test_helpers()
    extender_args, filled_state, pod_json, state_nodes = (
        h.extender_args,
        h.filled_state,
        h.pod_json,
        h.state_nodes,
    )

    from fleetmind.data.openb import load_openb_nodes, load_openb_trace
    from fleetmind.envs.core import ClusterState
    from fleetmind.envs.policies import FGD
    from fleetmind.envs.policies.fgd import typical_from_json
    from fleetmind.rl.policy_adapter import RELEASED_DIR
    from fleetmind.serving.app import create_app
    from fleetmind.serving.settings import Settings
    from fleetmind.serving.telemetry.sim import SimSource

    nodes = load_openb_nodes()
    idx = np.arange(min(n_nodes, len(nodes)))
    state = ClusterState(
        nodes.cpu_milli[idx],
        nodes.memory_mib[idx],
        nodes.num_gpu[idx],
        nodes.model_id[idx],
        names=nodes.names[idx],
    )
    trace = load_openb_trace("default")
    meta = json.loads((RELEASED_DIR / "metadata.json").read_text())
    filled_state(state, trace, FGD(typical=typical_from_json(meta["typical_pods"])), 3000, seed)
    fleet = state_nodes(state)
    rng = np.random.default_rng(seed + 1)
    pods = [pod_json(trace, int(i)) for i in rng.choice(len(trace), n_pods, replace=False)]
    out: dict = {"nodes": len(fleet), "pods": n_pods, "seed": seed}
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(
            database_url=f"sqlite:///{tmp}/fm.db",
            rca_model="baseline:upstream-coverage",
            incident_worker=False,
        )
        with TestClient(create_app(settings)) as client:
            services = client.app.state.services
            services.telemetry = SimSource(fleet)
            out["policy"] = services.registry.current.placement.method
            for cache_capable in (True, False):
                times, filt, prio, cpu = [], [], [], []
                for k, pod in enumerate([pods[0], *pods]):
                    args = extender_args(pod, fleet, cache_capable)
                    c0 = time.process_time()
                    t0 = time.perf_counter()
                    r1 = client.post("/api/v1/scheduler/filter", json=args)
                    t1 = time.perf_counter()
                    r2 = client.post("/api/v1/scheduler/prioritize", json=args)
                    t2 = time.perf_counter()
                    c2 = time.process_time()
                    assert r1.status_code == 200 and r2.status_code == 200, r1.text + r2.text
                    if k == 0:
                        continue  # warm-up
                    times.append((t2 - t0) * 1e3)
                    filt.append((t1 - t0) * 1e3)
                    prio.append((t2 - t1) * 1e3)
                    cpu.append((c2 - c0) * 1e3)
                key = "node_cache_capable" if cache_capable else "node_list"
                out[key] = {
                    "filter_plus_prioritize_ms": {
                        "p50": pct(times, 50),
                        "p99": pct(times, 99),
                        "max": max(times),
                    },
                    "cpu_ms_per_call": {"p50": pct(cpu, 50), "p99": pct(cpu, 99)},
                    "filter_ms_p99": pct(filt, 99),
                    "prioritize_ms_p99": pct(prio, 99),
                    "target_p99_ms": 50.0,
                }
    return out


def bench_telemetry(n_nodes: int, n_pods: int, repeats: int, seed: int) -> dict:
    h = _test_helpers()
    ExporterServer, LiveFleet, Prometheus = h.ExporterServer, h.LiveFleet, h.Prometheus

    from fleetmind.data.openb import load_openb_nodes, load_openb_trace
    from fleetmind.serving.telemetry.prometheus import PrometheusApiSource

    nodes = load_openb_nodes()
    idx = np.arange(min(n_nodes, len(nodes)))
    names = [str(x) for x in nodes.names[idx]]
    fleet = LiveFleet(
        names,
        [str(m) for m in nodes.model[idx]],
        nodes.num_gpu[idx].tolist(),
        nodes.cpu_milli[idx].tolist(),
        nodes.memory_mib[idx].tolist(),
    )
    trace = load_openb_trace("default")
    rng = np.random.default_rng(seed)
    gpu_pods = np.flatnonzero(trace.num_gpu == 1)
    for k, i in enumerate(rng.choice(gpu_pods, n_pods, replace=False).tolist()):
        node = int(rng.integers(len(names)))
        gpu = int(rng.integers(max(1, int(nodes.num_gpu[node]))))
        fleet.bind("bench", f"p{k:05d}", names[node], [gpu], int(trace.gpu_milli[i]),
                   int(trace.cpu_milli[i]), int(trace.memory_mib[i]))  # fmt: skip
    texts = {"/dcgm": fleet.dcgm_text(), "/ksm": fleet.ksm_text()}
    exporter = ExporterServer(texts)
    with tempfile.TemporaryDirectory() as tmp:
        prom = Prometheus(Path(tmp), exporter, {"dcgm": "/dcgm", "ksm": "/ksm"})
        try:
            n_gpus = int(nodes.num_gpu[idx].sum())
            prom.wait_for("DCGM_FI_DEV_FB_FREE", n_gpus, timeout=120)
            prom.wait_for("kube_pod_info", n_pods, timeout=120)
            src = PrometheusApiSource(prom.url, timeout_s=30.0)
            times, build_s = [], []
            snap = None
            from fleetmind.serving.telemetry import prometheus as promsrc

            real_build = promsrc.build_nodes

            def timed_build(*a: object, **k: object) -> object:
                t = time.perf_counter()
                out = real_build(*a, **k)
                build_s.append(time.perf_counter() - t)
                return out

            promsrc.build_nodes = timed_build
            try:
                for _ in range(repeats + 1):
                    t0 = time.perf_counter()
                    snap = src.collect()
                    times.append(time.perf_counter() - t0)
            finally:
                promsrc.build_nodes = real_build
            series = {n: len(src.query(q)) for n, q in promsrc.FLEET_QUERIES.items()}
            src.close()
        finally:
            prom.stop()
            exporter.close()
    times, build_s = times[1:], build_s[1:]
    assert snap is not None and len(snap.nodes) == len(names)
    return {
        "nodes": len(names),
        "gpus": n_gpus,
        "bound_pods": n_pods,
        "series_per_query": series,
        "exposition_bytes": {k: len(v) for k, v in texts.items()},
        "refresh_s": {"p50": pct(times, 50), "max": max(times), "repeats": repeats},
        "build_nodes_s_p50": pct(build_s, 50),
        "queries": "four concurrent /api/v1/query calls (the DCGM entries of serving.telemetry.prometheus.FLEET_QUERIES and KSM_FLEET_QUERY)",
        "target_s": 2.0,
    }


def bench_live(step: int) -> dict:
    live_vs_sim = _test_helpers().live_vs_sim

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        out = live_vs_sim(Path(tmp), step=step)
        out["wall_s"] = time.perf_counter() - t0
    out["node_step"] = step
    out["max_abs_diff_points"] = max(
        abs(out["live_unallocated"][k] - out["sim_unallocated"][k]) for k in out["sim_unallocated"]
    )
    return out


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=argtypes.positive_int, default=1000)
    ap.add_argument("--pods", type=argtypes.positive_int, default=200)
    ap.add_argument("--seed", type=argtypes.seed, default=42)
    ap.add_argument("--bound-pods", type=argtypes.nonnegative_int, default=4000)
    ap.add_argument("--repeats", type=argtypes.positive_int, default=10)
    ap.add_argument("--live-step", type=argtypes.positive_int, default=10)
    ap.add_argument("--only", choices=["extender", "telemetry", "live"], nargs="*")
    ap.add_argument("--out", type=argtypes.output_path, default=OUT)
    a = ap.parse_args(argv)
    only = set(a.only or ["extender", "telemetry", "live"])
    result: dict = {}
    if a.out.exists():  # sections not run this time are kept (with their own provenance)
        result = json.loads(a.out.read_text())
    prov = provenance(
        __spec__.name, argv, load_start=load_now(), packages=["fastapi", "sqlalchemy"]
    )
    if "extender" in only:
        result["extender"] = {"provenance": prov, **bench_extender(a.nodes, a.pods, a.seed)}
        print(json.dumps(result["extender"], indent=1), flush=True)
    if "telemetry" in only:
        result["telemetry"] = {
            "provenance": prov,
            **bench_telemetry(a.nodes, a.bound_pods, a.repeats, a.seed),
        }
        print(json.dumps(result["telemetry"], indent=1), flush=True)
    if "live" in only:
        result["live_vs_sim"] = {"provenance": prov, **bench_live(a.live_step)}
        print(json.dumps(result["live_vs_sim"], indent=1, default=str), flush=True)
    result.update({k: v for k, v in prov.items()})  # top level: the latest run
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=1, default=str) + "\n")


if __name__ == "__main__":
    raise SystemExit(run_main(main, prog="benchmarks.serving.k8s"))
