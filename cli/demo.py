"""``fleetmind demo``: FleetMind end to end on the embedded defaults, in a few minutes on a laptop CPU.

Steps (each prints what it did and how long it took):

1. **Data**: generate simulated multi-cluster incidents (:mod:`fleetmind.data.rca_gen`) into ``OUT/rca``.
2. **RCA model**: load the released GAT from ``models/rca`` (or train a small one if it is missing),
   evaluate it against the baselines on the generated test incidents, and log the run to MLflow
   (``sqlite:///mlflow.db`` unless ``MLFLOW_TRACKING_URI`` is set).
3. **Placement**: evaluate the placement policies (heuristics, and the released PPO agent when present)
   on the openb trace in FGD mode for one seed. Without the openb data (and always in ``--quick``
   mode) it runs on the synthetic openb-schema trace (:mod:`fleetmind.data.openb_synthetic`) and says so.
4. **Service**: start ``fleetmind serve`` (uvicorn, a fresh SQLite database in ``OUT``) on one test graph.
5. **Alert storm**: replay one test incident's alerts through the Alertmanager webhook in the groups
   Alertmanager would send, then read the incident back with its ranked root causes and paths.
6. **Placement decision**: ask the service to place a 4-GPU job and a GPU-sharing job, each reserved
   (``"reserve": true``) so that the second one sees the first one's GPUs as taken.

Finally the service is stopped, and the demo prints where its outputs are (``OUT/rca``,
``OUT/demo_summary.json``, ``OUT/service.log``, the MLflow store) and what to run next.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import socket
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetmind import argtypes
from fleetmind.children import die_with_parent
from fleetmind.data.errors import ConfigError, FleetMindError, NotAvailableError
from fleetmind.data.paths import REPO_ROOT
from fleetmind.http_client import client as proxied_client


@dataclass
class DemoConfig:
    """Settings of the demo run.

    Attributes:
        out: working folder for generated data, the service database and logs.
        quick: smaller everything (used by the test suite): fewer incidents, placement evaluated with
            two heuristics on the synthetic trace.
        incidents: simulated incidents to generate (train/val/test).
        seed: master seed of the whole demo.
        port: service port (0 = pick a free one).
        tracking_uri: MLflow tracking URI (default: ``MLFLOW_TRACKING_URI`` or ``sqlite:///mlflow.db``).
    """

    out: Path = Path("out/demo")
    quick: bool = False
    incidents: int = 300
    seed: int = 7
    port: int = 0
    tracking_uri: str | None = None


MIN_INCIDENTS = 4
"""The fewest ``--incidents`` with a test split: the generator gives test ``round(0.15 * n)``
incidents (:mod:`fleetmind.data.rca_gen.generate`), none for 3; the demo evaluates on the test
split and replays its largest incident."""


def _say(msg: str) -> None:
    print(msg, flush=True)


@contextmanager
def _step(n: int, total: int, title: str) -> Iterator[None]:
    _say(f"\n[{n}/{total}] {title}")
    t0 = time.perf_counter()
    yield
    _say(f"      done in {time.perf_counter() - t0:.1f} s")


def _tracking_uri(cfg: DemoConfig) -> str:
    return cfg.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or "sqlite:///mlflow.db"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ------------------------------------------------------------------------------------------ steps
def generate_data(cfg: DemoConfig) -> Path:
    """Step 1: simulated incidents; returns the dataset folder."""
    from fleetmind.data.rca_gen.alerts import AlertSimConfig
    from fleetmind.data.rca_gen.generate import DatasetSpec, generate_dataset
    from fleetmind.data.rca_gen.graphs import GraphGenConfig

    out = cfg.out / "rca"
    n = 60 if cfg.quick else cfg.incidents
    graphs = GraphGenConfig(max_clusters=3) if cfg.quick else GraphGenConfig()
    spec = DatasetSpec(
        n_incidents=n,
        seed=cfg.seed,
        sim=AlertSimConfig(),
        graphs=graphs,
        n_graphs=(2, 1, 1) if cfg.quick else None,
        large_fraction=0.0,
        workers=1 if cfg.quick else None,
    )
    meta = generate_dataset(out, spec)
    counts = meta.get("counts", {})
    _say(
        f"      {sum(counts.values())} incidents {counts} on {len(meta['graph_stats'])} topologies"
    )
    _say(f"      written to {out}")
    return out


def rca_model(cfg: DemoConfig, data_dir: Path) -> dict[str, Any]:
    """Step 2: load (or train) the GAT, evaluate it and the baselines, log the run to MLflow."""
    import mlflow

    from fleetmind.data.rca_dataset import load_dataset
    from fleetmind.rca.baselines import BASELINES
    from fleetmind.rca.gat_analyzer import GATAnalyzer
    from fleetmind.rca.metrics import evaluate_methods, make_analyzers
    from fleetmind.training.tracking import ready_store

    try:
        gat = GATAnalyzer.load(None)
        _say(f"      released GAT loaded: {gat.version}")
    except FleetMindError as err:
        _say(f"      no released GAT ({err}); training a small one")
        from fleetmind.training.rca_train import Args, run

        result = run(
            Args(
                data=str(data_dir),
                epochs=3,
                seed=cfg.seed,
                out=str(cfg.out / "runs"),
                register=False,
                tracking_uri=_tracking_uri(cfg),
            )
        )
        gat = GATAnalyzer.load(result["artifact"])
    ds = load_dataset(data_dir, splits=["test"])
    analyzers = make_analyzers(list(BASELINES), seed=cfg.seed)
    analyzers["gat"] = gat
    report = evaluate_methods(ds.splits["test"], analyzers, ds.graphs)
    _print_rca_table(report)
    uri = _tracking_uri(cfg)
    ready_store(uri, flag=None)
    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment("fleetmind-demo")
    with mlflow.start_run(run_name=f"demo__rca__{cfg.seed}__{int(time.time())}") as run:
        mlflow.log_params({"incidents": report["n_incidents"], "gat_version": gat.version})
        for method, m in report["methods"].items():
            mlflow.log_metrics(
                {
                    f"eval/{method}/{k.replace('@', '_at_')}": v
                    for k, v in m.items()
                    if isinstance(v, int | float)  # by_root is a nested dict
                }
            )
    _say(f"      MLflow run {run.info.run_id} logged to {uri}")
    return report


def _print_rca_table(report: dict[str, Any]) -> None:
    _say(f"      {report['n_incidents']} test incidents on topologies never seen in training")
    _say(f"      {'method':<22}{'AC@1':>7}{'AC@3':>7}{'MRR':>7}{'ms/inc':>9}")
    rows = sorted(report["methods"].items(), key=lambda kv: -kv[1]["ac@1"])
    for name, m in rows:
        _say(
            f"      {name:<22}{m['ac@1']:>7.3f}{m['ac@3']:>7.3f}{m['mrr']:>7.3f}"
            f"{m['ms_per_incident']:>9.2f}"
        )


OPENB_LABEL = "openb (Alibaba cluster-trace-gpu-v2023)"
"""How the demo names the real openb trace (the synthetic one: ``SYNTHETIC_LABEL``)."""


def _placement_title(cfg: DemoConfig) -> str:
    """Step 3's title, naming the trace :func:`placement_eval` will use: the synthetic openb-schema
    one in ``quick`` mode or without the openb data, else the real openb trace."""
    from fleetmind.data.paths import allow_synthetic_openb

    synthetic = cfg.quick or allow_synthetic_openb() is not None
    trace = (
        "the synthetic openb-schema trace"
        if synthetic
        else "the openb trace (Alibaba cluster-trace-gpu-v2023)"
    )
    return f"Placement: policies on {trace} (FGD mode, one seed)"


def placement_eval(cfg: DemoConfig) -> dict[str, Any]:
    """Step 3: one-seed FGD-mode evaluation of the placement policies on openb ``default``.

    Uses the synthetic openb-schema trace when the openb data is missing, and always in ``quick``
    mode (heuristics only there); the result's ``data`` says which trace it was.
    """
    from fleetmind.data.openb import load_openb_nodes, load_openb_trace
    from fleetmind.data.openb_synthetic import SYNTHETIC_LABEL, synthetic_openb_dir
    from fleetmind.data.paths import allow_synthetic_openb
    from fleetmind.envs.fgd_mode import evaluate_policies
    from fleetmind.rl.policy_adapter import load_ppo_policy

    if cfg.quick:
        csv_dir = synthetic_openb_dir()
        synthetic = True
    else:
        synthetic = allow_synthetic_openb() is not None
        csv_dir = None
    if csv_dir is not None:
        trace = load_openb_trace(csv_dir / "openb_pod_list_default.csv")
        nodes = load_openb_nodes(csv_dir / "openb_node_list_gpu_node.csv")
    else:
        trace, nodes = load_openb_trace("default"), load_openb_nodes()
    data = SYNTHETIC_LABEL if synthetic else OPENB_LABEL
    if synthetic:
        _say(f"      data: {SYNTHETIC_LABEL};")
        _say("      `fleetmind data fetch openb` downloads the real trace")
    policies: list[Any] = ["BestFit", "FGD"]
    if not cfg.quick:
        try:
            policies.append(load_ppo_policy(None))
        except FleetMindError as err:
            _say(f"      PPO agent not available ({err}); heuristics only")
    _say(
        f"      trace default ({len(trace):,} pods on {len(nodes)} nodes), seed 42: "
        f"{len(policies)} policies"
    )
    from fleetmind.progress import show_bar

    res = evaluate_policies(
        trace, policies, seeds=[42], nodes=nodes, progress=show_bar(not cfg.quick)
    )
    for name, m in res["policies"].items():
        _say(
            f"      {name:<10} unallocated GPU at 100 % arrived: {m['unallocated_gpu_pct_at_100']:.2f} %"
        )
    res["data"] = data
    return res


class _Service:
    """A ``fleetmind serve`` subprocess on a free loopback port."""

    def __init__(self, cfg: DemoConfig, graph_path: Path) -> None:
        self.port = cfg.port or _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.graph = str(json.loads(graph_path.read_text()).get("name"))
        db = (cfg.out / "fleetmind.db").resolve()
        for suffix in ("", "-wal", "-shm"):
            Path(str(db) + suffix).unlink(missing_ok=True)
        self.log_path = cfg.out / "service.log"
        env = dict(os.environ, FLEETMIND_TELEMETRY="sim")
        env.pop("FLEETMIND_API_TOKEN", None)
        cmd = [
            sys.executable,
            "-m",
            "fleetmind.cli",
            "serve",
            "--port",
            str(self.port),
            "--graph",
            str(graph_path),
            "--database-url",
            f"sqlite:///{db}",
            "--log-level",
            "warning",
        ]
        self._log = self.log_path.open("w")
        parent = os.getpid()
        self.proc = subprocess.Popen(  # the service ends with the demo, even one SIGTERM ended
            cmd,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            preexec_fn=lambda: die_with_parent(parent),
        )

    def _check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise NotAvailableError(
                f"the service exited with status {self.proc.returncode}; see {self.log_path}"
            )

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        """Wait until the demo's own service answers ``/readyz``: its process still running and
        the graph it serves the demo's (a 200 from another service on the port is not it)."""
        import httpx

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                # a loopback address: no proxy (trust_env=False: httpx raised on NO_PROXY=fd00::/8)
                r = httpx.get(self.url + "/readyz", timeout=2, trust_env=False)
                body = r.json() if r.status_code == 200 else None
            except (httpx.HTTPError, ValueError):
                body = None
            if body is not None:
                self._check_alive()
                served = body.get("graph") if isinstance(body, dict) else None
                if served == self.graph:
                    return
                raise NotAvailableError(
                    f"another service answers on port {self.port} (serving graph {served!r}, "
                    f"not the demo's {self.graph!r}); pick a free --port or leave it out"
                )
            time.sleep(0.5)
        raise NotAvailableError(
            f"the service was not ready after {timeout_s:.0f} s; see {self.log_path}"
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self._log.close()


def _webhook_batches(alerts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Group alerts as Alertmanager would (by alertname and cluster) into webhook v4 payloads."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for a in sorted(alerts, key=lambda a: a.get("startsAt", "")):
        labels = a.get("labels", {})
        groups[(labels.get("alertname", ""), labels.get("cluster", ""))].append(a)
    payloads = []
    for (name, cluster), items in groups.items():
        payloads.append(
            {
                "version": "4",
                "groupKey": f'{{}}:{{alertname="{name}", cluster="{cluster}"}}',
                "truncatedAlerts": 0,
                "status": "firing",
                "receiver": "fleetmind",
                "groupLabels": {"alertname": name, "cluster": cluster},
                "commonLabels": {"alertname": name},
                "commonAnnotations": {},
                "externalURL": "http://alertmanager.example:9093",
                "alerts": items,
            }
        )
    return payloads


def alert_storm(svc: _Service, incident: dict[str, Any]) -> dict[str, Any]:
    """Step 5: replay one incident through the webhook and read back its ranked root causes.

    Waits (up to 60 s) until every incident has been ranked and none changed for longer than the
    service's re-rank interval (:func:`fleetmind.cli.replay.wait_settled`). A storm can form several
    incidents (grouping joins alerts within ``incident_hops`` of each other and does not cross
    ``cluster`` nodes or infrastructure several clusters depend on), some of them resolved already (all their alerts arrived resolved): all are
    counted, open and resolved, and the largest one is shown.
    """
    from fleetmind.cli.replay import DEFAULT_RANK_INTERVAL_S, SETTLE_MARGIN_S, wait_settled

    payloads = _webhook_batches(incident["alerts"])
    with proxied_client(base_url=svc.url, timeout=30) as client:
        for p in payloads:
            r = client.post("/api/v1/alerts", json=p)
            r.raise_for_status()
        _say(f"      posted {len(incident['alerts'])} alerts in {len(payloads)} webhook calls")

        def read() -> list[dict[str, Any]]:
            # every status: an incident whose alerts all arrived resolved is resolved at once; a
            # merged one's alerts moved to the incident it joined
            got = client.get("/api/v1/incidents", params={"status": "all"}).json()
            return [i for i in got if i.get("alert_count") and i.get("status") != "merged"]

        # Repeated alerts (same fingerprint and start) are stored once, so the posted count need
        # not be reached: done when the counts and the rankings stop moving.
        result = wait_settled(read, 60.0, DEFAULT_RANK_INTERVAL_S + SETTLE_MARGIN_S)
    items = result[0] if result is not None else []
    with_causes = [i for i in items if i.get("causes")]
    if not with_causes:
        raise NotAvailableError("the service opened no incident with ranked causes within 60 s")
    best = max(with_causes, key=lambda i: i["alert_count"])
    if len(items) > 1:
        _say(f"      the storm formed {_incident_counts(items)}; the largest:")
    truth = incident["root_cause"]
    _say(
        f"      incident #{best['id']}: {best['alert_count']} alerts on {len(best['nodes'])} nodes, "
        f"ranked by {best['method']} ({best['model_version']})"
    )
    _say(f"      ground truth: {truth} ({incident['fault_type']})")
    for rank, c in enumerate(best["causes"][:5], 1):
        mark = "  <== root cause" if c["node"] == truth else ""
        _say(f"      #{rank} {c['node']}  score={c['score']:.3f}  fault={c['fault_type']}{mark}")
        if c.get("path"):
            _say(f"           path: {' -> '.join(c['path'])}")
    if all(c["node"] != truth for c in best["causes"][:5]):
        silent = all(truth not in i["nodes"] for i in items)
        _say(
            "      the true root cause is not in this top 5"
            + (" (it raised no alert itself: a silent root, the hardest case)" if silent else "")
        )
    return best


def _incident_counts(items: list[dict[str, Any]]) -> str:
    """``5 incidents (42, 2, 1, 1, 1 alerts; 4 open, 1 resolved)``: their sizes, largest first,
    and how many are in each status."""
    sizes = ", ".join(str(i["alert_count"]) for i in sorted(items, key=lambda i: -i["alert_count"]))
    by_status: dict[str, int] = {}
    for i in items:
        by_status[str(i.get("status"))] = by_status.get(str(i.get("status")), 0) + 1
    statuses = ", ".join(f"{n} {status}" for status, n in sorted(by_status.items()))
    return f"{len(items)} incidents ({sizes} alerts; {statuses})"


def placement_decisions(svc: _Service) -> list[dict[str, Any]]:
    """Step 6: two placement requests against the live (simulated) fleet.

    Both are reserved (``"reserve": true``): the service books their GPUs until the scheduler binds
    the pods or the hold expires, so the second request does not land on a GPU the first one holds.
    """
    jobs = [
        {
            "job_id": "train-llama-4gpu",
            "num_gpu": 4,
            "gpu_milli": 1000,
            "cpu_milli": 16000,
            "memory_mib": 65536,
            "reserve": True,
        },
        {
            "job_id": "notebook-shared",
            "num_gpu": 1,
            "gpu_milli": 300,
            "cpu_milli": 4000,
            "memory_mib": 8192,
            "reserve": True,
        },
    ]
    out = []
    with proxied_client(base_url=svc.url, timeout=30) as client:
        for job in jobs:
            r = client.post("/api/v1/placements", json=job)
            if r.status_code != 200:
                _say(f"      {job['job_id']}: {r.status_code} {r.text[:200]}")
                continue
            d = r.json()
            _say(
                f"      {job['job_id']}: cluster={d['cluster']} node={d['node']} gpus={d['gpus']} "
                f"policy={d['policy']} model={d['model_version']}"
                + (" reserved" if d.get("reserved") else "")
                + (f" (fallback: {d['fallback_reason']})" if d.get("fallback_reason") else "")
            )
            out.append(d)
    return out


def _check_config(cfg: DemoConfig) -> None:
    """Refuse, before any step runs, what would only fail later: too few incidents for a test
    split, a port another program holds, an MLflow store that cannot be used."""
    from fleetmind.cli.serve import bind_error
    from fleetmind.data.rca_gen.generate import MAX_INCIDENTS
    from fleetmind.training.tracking import ready_store

    if not cfg.quick and not MIN_INCIDENTS <= cfg.incidents <= MAX_INCIDENTS:
        raise ConfigError(
            f"--incidents must lie in [{MIN_INCIDENTS}, {MAX_INCIDENTS:,}] (fewer than "
            f"{MIN_INCIDENTS} leave no test incident to evaluate and replay), got {cfg.incidents}"
        )
    if not 0 <= cfg.port <= 65535:
        raise ConfigError(f"--port must be within 0..65535 (0: a free one), got {cfg.port}")
    err = bind_error("127.0.0.1", cfg.port) if cfg.port else None  # where the service listens
    if err is not None and err.errno == errno.EADDRINUSE:
        raise ConfigError(f"port {cfg.port} is in use (pick another --port, or leave it out)")
    if err is not None:
        raise ConfigError(f"cannot listen on port {cfg.port}: {err.strerror or err}")
    ready_store(_tracking_uri(cfg), flag=None)  # the demo has no --tracking-uri


def run_demo(cfg: DemoConfig) -> dict[str, Any]:
    """Run all steps; returns a summary dict (also written to ``OUT/demo_summary.json``)."""
    from fleetmind.data.rca_dataset import load_dataset

    _check_config(cfg)
    cfg.out.mkdir(parents=True, exist_ok=True)
    total = 6
    summary: dict[str, Any] = {}
    _say("FleetMind demo: simulated alert storms -> GAT root causes; openb trace -> placement")
    with _step(1, total, "Generating simulated multi-cluster incidents"):
        data_dir = generate_data(cfg)
    with _step(2, total, "RCA: GAT against the baselines, logged to MLflow"):
        summary["rca"] = rca_model(cfg, data_dir)
    with _step(3, total, _placement_title(cfg)):
        summary["placement_eval"] = placement_eval(cfg)
    ds = load_dataset(data_dir, splits=["test"])
    incident = max(ds.splits["test"], key=lambda i: len(i["alerts"]))
    graph_path = data_dir / "graphs" / f"{incident['graph']}.json"
    svc = _Service(cfg, graph_path)
    try:
        with _step(4, total, f"Starting the service on {svc.url} (graph {incident['graph']})"):
            svc.wait_ready()
        with _step(5, total, "Alert storm through the Alertmanager webhook"):
            summary["incident"] = alert_storm(svc, incident)
            summary["ground_truth"] = incident["root_cause"]
        with _step(6, total, "Placement decisions from the service"):
            summary["placements"] = placement_decisions(svc)
    finally:
        svc.stop()
    summary_path = cfg.out / "demo_summary.json"
    from fleetmind.training.io import write_text_whole  # whole or not at all, as README says

    write_text_whole(summary_path, json.dumps(summary, indent=2, default=str))
    _print_outputs(cfg, data_dir, summary_path, svc.log_path)
    return summary


def _print_outputs(cfg: DemoConfig, data_dir: Path, summary_path: Path, log_path: Path) -> None:
    """Where the demo's outputs are, and what to run next."""
    uri = _tracking_uri(cfg)
    _say("\nDone. Outputs:")
    rows = [
        ("simulated incidents", f"{data_dir}/ (train/val/test JSONL, graphs/)"),
        ("summary (RCA, incident, placements)", str(summary_path)),
        ("service log", str(log_path)),
        ("MLflow runs (fleetmind-demo)", uri),
    ]
    for what, where in rows:
        _say(f"  {what + ':':<38}{where}")
    _say("Next:")
    for cmd, what in (
        (f"mlflow ui --backend-store-uri {uri}", "browse the tracked runs"),
        ("fleetmind serve", "the service on http://127.0.0.1:8000 (embedded graph)"),
        (f"fleetmind replay {_example_storm()}", "an alert storm into it, then open /ui/"),
    ):
        _say(f"  {cmd:<48}  {what}")
    if not (REPO_ROOT / EXAMPLE_STORM).is_file():
        _say(
            f"  ({EXAMPLE_STORM} is in the FleetMind source checkout; the package does not ship it)"
        )


EXAMPLE_STORM = "examples/storm-gpu-xid.json"
"""The storm the demo suggests replaying next, relative to a FleetMind checkout (the wheel does not
ship ``examples/``)."""


def _example_storm() -> str:
    """:data:`EXAMPLE_STORM` as the user can type it: relative when run from the checkout, else the
    checkout's absolute path (an editable install), else as it is in a checkout."""
    if Path(EXAMPLE_STORM).resolve() == (REPO_ROOT / EXAMPLE_STORM).resolve():
        return EXAMPLE_STORM
    if (REPO_ROOT / EXAMPLE_STORM).is_file():
        return str(REPO_ROOT / EXAMPLE_STORM)
    return EXAMPLE_STORM


def register(subparsers: argparse._SubParsersAction, name: str, help_text: str) -> None:
    """Add ``fleetmind demo`` (the contract of a group module: :mod:`fleetmind.cli`)."""
    p = subparsers.add_parser(name, help=help_text, description=help_text)
    p.add_argument("--out", default="out/demo", help="working folder (default: out/demo)")
    p.add_argument(
        "--quick",
        action="store_true",
        help="small sizes; placement scored with two heuristics on the synthetic openb-schema trace",
    )
    p.add_argument(
        "--incidents",
        type=int,
        default=300,
        help=f"simulated incidents, at least {MIN_INCIDENTS} (default: 300)",
    )
    p.add_argument("--seed", type=argtypes.seed, default=7, help="master seed (default: 7)")
    p.add_argument("--port", type=int, default=0, help="service port (default: a free one)")
    p.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    """``fleetmind demo``: :func:`run_demo` with the parsed flags; exit status 0."""
    run_demo(
        DemoConfig(
            out=Path(args.out),
            quick=args.quick,
            incidents=args.incidents,
            seed=args.seed,
            port=args.port,
        )
    )
    return 0
