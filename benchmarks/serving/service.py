"""Service benchmark: a real uvicorn process, load from this (second) process over loopback.

Phases (each against the same server, SQLite WAL with synchronous=FULL, the ~1,000-node
``benchmark_graph``):

1. **ingestion**: ``--ingest-alerts`` unique alerts as Alertmanager webhooks of ``--ingest-batch``
   alerts over ``--ingest-conns`` keep-alive connections; alerts/s = alerts acknowledged / wall time,
   and per 5 s window of the run (a long ``--ingest-alerts`` shows whether the rate is sustained);
   zero loss = every acknowledged alert is in the database afterwards (read with sqlite3).
2. **rca**: ``POST /api/v1/rca`` with 200-alert incidents, ``--rca-clients`` concurrent clients in a
   closed loop. Every request of a run carries a different incident (a pool of ``--rca-pool``
   incidents from the project's alert simulator, ``fleetmind.data.rca_gen``, with background noise, 200 alerts
   drawn from each), so no cache of any kind can answer a request from an earlier one. The server's
   CPU time (its processes' user + system time) and this client's are recorded per request.
3. **placement**: ``POST /api/v1/placements`` (random job shapes, no reservation) on the sim fleet of
   the graph (80 hosts x 8 GPUs), 1 and ``--place-clients`` concurrent clients.

Targets: ingestion >= 1,000 alerts/s with zero loss; RCA p99 <= 100 ms at 20 clients;
placement p99 <= 20 ms.

    python -m benchmarks.serving.service [--quick] [--out benchmarks/results/serving/serving.json]
        [--rca-processes N] [--workers N] [--skip-ingest]

``--out`` defaults to the committed ``benchmarks/results/serving/serving.json`` only for the full
run on the released models: ``--quick`` writes ``runs/serving/serving_quick.json``,
``--breakdown-only`` ``runs/serving/serving_breakdown.json``, and a run with ``--skip-ingest``,
``--skip-breakdown``, ``--rca-model``, ``--placement-model`` or a size other than its default
(``--ingest-alerts``, ``--rca-requests``, ...) ``runs/serving/serving_partial.json`` unless
``--out`` is given. A ``--rca-model`` or
``--placement-model`` that the server does not load (it reports a ``fallback_reason``) stops the
run with one line, status 2, after the server is stopped.

``--rca-processes N`` starts the server with ``FLEETMIND_RCA_PROCESSES=N`` (RCA requests ranked in
N processes, request by request); ``--workers N`` is uvicorn's (connections split over N workers).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.provenance import REPO_ROOT as REPO
from benchmarks.provenance import RESULTS, load_now, provenance
from benchmarks.serving.ingest_alerts import ingest_alert
from benchmarks.serving.rca_workload import sim_incidents
from fleetmind import argtypes
from fleetmind.cli.runner import run_main
from fleetmind.errors import ConfigError
from fleetmind.serving.defaults.example import benchmark_graph
from fleetmind.serving.settings import Settings

PACKAGES = (
    "fastapi",
    "uvicorn",
    "starlette",
    "pydantic",
    "sqlalchemy",
    "httptools",
    "uvloop",
    "msgspec",
)


# ----------------------------------------------------------------------------------------- raw client
class Conn:
    """A minimal HTTP/1.1 keep-alive client (far cheaper per request than httpx).

    A request is its head and body handed to the transport together (no copy of the body into
    one buffer); a response is read as its head in one ``readuntil`` and then ``Content-Length``
    bytes (the server always sends one). Latency covers writing the request and reading the whole
    response, as before.
    """

    def __init__(self, port: int) -> None:
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self._heads: dict[tuple[str, str, int], bytes] = {}

    async def open(self) -> Conn:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        return self

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        assert self.reader is not None and self.writer is not None
        key = (method, path, len(body))
        head = self._heads.get(key)
        if head is None:
            head = self._heads[key] = (
                f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            ).encode()
        self.writer.writelines((head, body))
        await self.writer.drain()
        raw = await self.reader.readuntil(b"\r\n\r\n")
        status = int(raw[9:12])
        length = 0
        at = raw.lower().find(b"\r\ncontent-length:")
        if at >= 0:
            end = raw.index(b"\r\n", at + 2)
            length = int(raw[at + 17 : end])
        data = await self.reader.readexactly(length) if length else b""
        return status, data

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


def summary(lat_s: list[float]) -> dict[str, float]:
    ms = [x * 1000 for x in lat_s]
    return {
        "n": len(ms),
        "mean_ms": round(sum(ms) / len(ms), 3),
        "p50_ms": round(pct(ms, 50), 3),
        "p95_ms": round(pct(ms, 95), 3),
        "p99_ms": round(pct(ms, 99), 3),
        "max_ms": round(max(ms), 3),
    }


def burst_split(samples: list[tuple[float, float, int]]) -> dict[str, float | int]:
    """The clients' first burst apart from the rest of a closed-loop run.

    At the start every client sends at once into an idle server, so the last of those first
    requests waits for the whole burst: in a 300-request run the p99 is close to the slowest
    of them. ``samples`` are ``(start s, latency ms, client)``; a client's first request is its
    earliest start.

    Returns:
        ``first_burst_max_ms`` (slowest first request of a client), ``first_burst_n`` and
        ``p99_after_first_burst_ms`` (p99 over every other request; absent with none).
    """
    seen: set[int] = set()
    burst: list[float] = []
    rest: list[float] = []
    for _, ms, k in sorted(samples):  # by start: each client's first request comes first
        (rest if k in seen else burst).append(ms)
        seen.add(k)
    out: dict[str, float | int] = {"first_burst_n": len(burst)}
    if burst:
        out["first_burst_max_ms"] = round(max(burst), 3)
    if rest:
        out["p99_after_first_burst_ms"] = round(pct(rest, 99), 3)
    return out


# ------------------------------------------------------------------------- CPU accounting and load
def _is_keep_warm(q: Any) -> bool:
    """A ``FLEETMIND_KEEP_WARM_S`` busy loop (``fleetmind.serving.keepwarm``): its CPU is idle time it
    fills, not work for requests, so it is counted apart."""
    import psutil

    try:
        return "fleetmind.serving.keepwarm" in q.cmdline()
    except psutil.Error:
        return False


def cpu_by_process(pid: int, keep_warm: bool = False) -> dict[int, float]:
    """User + system CPU seconds of ``pid`` and of each of its children, by process id: the
    serving processes, or with ``keep_warm`` only the keep-warm busy loops."""
    import psutil

    p = psutil.Process(pid)
    out: dict[int, float] = {}
    for q in [p, *p.children(recursive=True)]:
        if _is_keep_warm(q) != keep_warm:
            continue
        try:
            t = q.cpu_times()
            out[q.pid] = t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return out


def steal_ms() -> float | None:
    """CPU time the hypervisor took from this virtual machine's vCPUs so far (``steal`` in
    ``/proc/stat``, summed over vCPUs, ms); ``None`` where there is no such counter."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
        return int(fields[8]) * 1000 / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def cpu_seconds(pid: int, keep_warm: bool = False) -> float:
    """User + system CPU seconds of process ``pid`` and its children (uvicorn workers, ranking
    processes), without the keep-warm busy loops (with ``keep_warm``: theirs only)."""
    return sum(cpu_by_process(pid, keep_warm).values())


def window_rates(done: list[tuple[float, int]], window_s: float) -> list[float]:
    """Alerts acknowledged per second in consecutive ``window_s`` windows of a run.

    ``done``: ``(seconds since the start, alerts acknowledged by that response)`` per request.
    The last window ends at the last response and is divided by its own length; it is kept only
    if it is at least half a window long (a short tail would read as a dip or a spike), or if it is
    the only one (a run shorter than a window: its overall rate).
    """
    if not done:
        return []
    end = max(t for t, _ in done)
    n = max(1, int(end // window_s) + 1)
    counts = [0] * n
    for t, k in done:
        counts[min(int(t // window_s), n - 1)] += k
    tail = end - (n - 1) * window_s
    rates = [c / window_s for c in counts[:-1]]
    if n == 1 or tail >= window_s / 2:
        rates.append(counts[-1] / max(tail, 1e-9))
    return [round(r, 1) for r in rates]


async def ingest(port: int, total: int, batch: int, conns: int) -> dict[str, Any]:
    acked: list[str] = []
    lat: list[float] = []
    done: list[tuple[float, int]] = []  # (seconds since start, alerts acknowledged) per response
    failures = 0
    queue: asyncio.Queue[int] = asyncio.Queue()
    for b in range(total // batch):
        queue.put_nowait(b)

    async def worker() -> None:
        nonlocal failures
        c = await Conn(port).open()
        while not queue.empty():
            b = queue.get_nowait()
            fps = [f"ing-{b}-{i}" for i in range(batch)]
            body = json.dumps(
                {
                    "version": "4",
                    "status": "firing",
                    "receiver": "fleetmind",
                    "alerts": [ingest_alert(b, i, fp) for i, fp in enumerate(fps)],
                }
            ).encode()
            t = time.perf_counter()
            status, _ = await c.request("POST", "/api/v1/alerts", body)
            lat.append(time.perf_counter() - t)
            if status == 200:
                acked.extend(fps)
                done.append((time.perf_counter() - t0, len(fps)))
            else:
                failures += 1
        c.close()

    t0 = time.perf_counter()
    await asyncio.gather(*[worker() for _ in range(conns)])
    wall = time.perf_counter() - t0
    return {"acked": acked, "wall_s": wall, "lat": lat, "failures": failures, "done": done}


async def closed_loop(
    port: int,
    path: str,
    bodies: list[bytes],
    clients: int,
    per_client: int,
    server_pid: int | None = None,
    distinct: bool = False,
) -> dict[str, Any]:
    """``clients`` connections each sending ``per_client`` requests back to back.

    ``distinct``: request ``i`` of client ``k`` sends ``bodies[k * per_client + i]`` (no body twice
    while ``len(bodies) >= clients * per_client``); otherwise clients cycle through ``bodies``.
    """
    lat: list[float] = []
    samples: list[tuple[float, float, int]] = []  # (start s from t0, latency ms, client)
    errors = 0

    def body(k: int, i: int) -> bytes:
        j = k * per_client + i if distinct else k + i
        return bodies[j % len(bodies)]

    async def client(k: int) -> None:
        nonlocal errors
        c = await Conn(port).open()
        await c.request("GET", "/healthz")  # open the connection
        for i in range(per_client):
            t = time.perf_counter()
            status, _ = await c.request("POST", path, body(k, i))
            lat.append(time.perf_counter() - t)
            samples.append((round(t - t0, 4), round(lat[-1] * 1000, 2), k))
            errors += status != 200
        c.close()

    cpu0 = cpu_seconds(server_pid) if server_pid else 0.0
    warm0 = cpu_seconds(server_pid, keep_warm=True) if server_pid else 0.0
    per0 = cpu_by_process(server_pid) if server_pid else {}
    own0 = time.process_time()
    steal0 = steal_ms()
    t0 = time.perf_counter()
    await asyncio.gather(*[client(k) for k in range(clients)])
    wall = time.perf_counter() - t0
    steal1 = steal_ms()
    out = {
        **summary(lat),
        "clients": clients,
        "errors": errors,
        "throughput_rps": round(len(lat) / wall, 1),
        "wall_s": round(wall, 3),
        "client_cpu_ms_per_request": round((time.process_time() - own0) / len(lat) * 1000, 2),
        # vCPU time the hypervisor took during the run (all vCPUs): a host-side stall shows here
        "host_steal_ms": round(steal1 - steal0, 1)
        if steal0 is not None and steal1 is not None
        else None,
    }
    if server_pid:
        out["server_cpu_ms_per_request"] = round(
            (cpu_seconds(server_pid) - cpu0) / len(lat) * 1000, 2
        )
        # FLEETMIND_KEEP_WARM_S busy loops: idle time they filled, apart from the work above
        out["keep_warm_cpu_ms_per_request"] = round(
            (cpu_seconds(server_pid, keep_warm=True) - warm0) / len(lat) * 1000, 2
        )
        # how the work spread over the processes (uvicorn's supervisor and its workers): with
        # --workers, each keep-alive connection stays with the worker that accepted it
        per1 = cpu_by_process(server_pid)
        out["server_cpu_s_by_process"] = [
            round(per1[k] - per0.get(k, 0.0), 3) for k in sorted(per1) if k in per0
        ]
        # the process uvicorn runs in (with --workers: its supervisor) and its children (uvicorn
        # workers, or FLEETMIND_RCA_PROCESSES ranking processes), in ms of CPU per request
        out["server_cpu_ms_per_request_by_role"] = {
            "server_process": round((per1[server_pid] - per0[server_pid]) / len(lat) * 1000, 2),
            "child_processes": [
                round((per1[k] - per0[k]) / len(lat) * 1000, 2)
                for k in sorted(per1)
                if k in per0 and k != server_pid
            ],
        }
    if distinct:
        # every request's start (s after the clients started), latency (ms) and client, in the
        # order they finished: how the latency moves over a run (e.g. the clients' first burst)
        out["samples"] = samples
        out.update(burst_split(samples))
        out["distinct_bodies"] = len(
            {body(k, i) for k in range(clients) for i in range(per_client)}
        )
    return out


def cpu_facts() -> dict[str, Any]:
    """The CPU and the guest's idle driver, where Linux says (None elsewhere).

    Two hosts of this project's benchmark VM with the same core count ran the same code at
    3.8 and 6.7 ms of CPU per RCA request (two host builds, 2026-11-30); the kernel build in
    ``platform`` and these facts say which host a JSON came from.
    """
    facts: dict[str, Any] = {"cpu_model": None, "cpu_family_model": None, "cpuidle_driver": None}
    try:
        with open("/proc/cpuinfo") as fh:
            info = dict((k.strip(), v.strip()) for k, _, v in (ln.partition(":") for ln in fh) if v)
        facts["cpu_model"] = info.get("model name")
        facts["cpu_family_model"] = f"{info.get('cpu family')}/{info.get('model')}"
    except OSError:
        pass
    try:
        with open("/sys/devices/system/cpu/cpuidle/current_driver") as fh:
            facts["cpuidle_driver"] = fh.read().strip()
    except OSError:
        pass
    return facts


def request_breakdown(graph: Any, bodies: list[bytes], rca_model: dict[str, Any]) -> dict[str, Any]:
    """CPU milliseconds per request of each step of ``POST /api/v1/rca`` (GAT), in this process."""
    import torch

    from fleetmind.rca.features.columnar import incident_crop
    from fleetmind.rca.gat_analyzer import GATAnalyzer
    from fleetmind.serving.rca.request import parse_alerts, parse_for
    from fleetmind.serving.schemas import CauseOut, RCARequest, RCAResponse

    if rca_model.get("method") != "gat":
        return {"skipped": f"served RCA method is {rca_model.get('method')}, not gat"}
    torch.set_num_threads(1)
    src = str(rca_model.get("source") or "")
    gat = GATAnalyzer.load(src if "://" in src or src.startswith("models:/") else REPO / src)

    # As in the server: malloc keeps request-sized buffers (fleetmind.serving.tuning.tune_malloc), every
    # per-graph cache is built, and the label and annotation memos of the body parse have seen
    # the texts (a ranking process of the 20-client run misses ~10 % of them; the cold-memo cost
    # of the parse is reported separately). The analyzer gets what the server gives it: the
    # alert columns of fleetmind.serving.rca.parse.plain_columns.
    from fleetmind.rca.features.mapping import _static
    from fleetmind.serving.rca import parse as rca_parse
    from fleetmind.serving.tuning import tune_malloc

    tune_malloc(32)
    alerts = [parse_for(gat, graph, b)[1] for b in bodies]
    k = len(alerts) // 3
    set_a, set_c = alerts[:k], alerts[2 * k : 3 * k]
    hops = gat.model.config.crop_hops
    for a in alerts:
        gat.find_root_causes(graph, a, 5)

    def cpu_ms(fn: Any, items: list[Any]) -> float:
        t = time.process_time()
        for it in items:
            fn(it)
        return round((time.process_time() - t) / len(items) * 1000, 3)

    # the garbage collector as the server runs it (fleetmind.serving.tuning.tune_gc): objects alive now frozen,
    # generation 0 every 100,000 allocations
    import gc

    gc.collect()
    gc.freeze()
    old_threshold = gc.get_threshold()
    gc.set_threshold(100_000, *old_threshold[1:])

    def cold_parse(b: bytes) -> Any:
        st = _static(graph)
        st.label_info.clear()
        st.label_json.clear()
        st.label_json_dicts.clear()
        rca_parse._ANNOTATIONS_OK.clear()
        return parse_for(gat, graph, b)

    def inputs(ac: Any) -> Any:  # the model's inputs: the crop's rows, or with neighbour inputs
        a, c = ac
        return gat._inputs(graph, a, c.x, c.keep, c.edge_index)

    def forward(ci: Any) -> None:
        c, (x, ea) = ci
        with torch.inference_mode():
            gat.model.infer(
                torch.from_numpy(x),
                torch.from_numpy(c.edge_index),
                torch.from_numpy(c.edge_type),
                edge_attr=None if ea is None else torch.from_numpy(ea),
            )

    def respond(r: Any) -> bytes:
        return (
            RCAResponse(
                causes=[CauseOut(**c.to_json()) for c in r.causes],
                method="gat",
                model_version=gat.version,
                graph=graph.name,
                mapped_alerts=200,
            )
            .model_dump_json()
            .encode()
        )

    single = cpu_ms(lambda a: gat.find_root_causes(graph, a, 5), set_a)
    crop = cpu_ms(lambda a: incident_crop(graph, a, hops), set_a)
    crops = [incident_crop(graph, a, hops) for a in set_a]
    pairs = list(zip(set_a, crops, strict=True))
    nb = cpu_ms(inputs, pairs)
    fwd = cpu_ms(forward, [(ac[1], inputs(ac)) for ac in pairs])
    results = [gat.find_root_causes(graph, a, 5) for a in set_a]
    batch = 16
    chunks = [set_c[i : i + batch] for i in range(0, len(set_c), batch)]
    t = time.process_time()
    for ch in chunks:
        gat.find_root_causes_many([(graph, a, 5) for a in ch])
    batched = round((time.process_time() - t) / len(set_c) * 1000, 3)
    interleaved = interleaved_breakdown(graph, gat, bodies[k : 2 * k], respond)
    loops = {f"batch{b}": ranking_loop(graph, gat, bodies, b) for b in (1, 2, 4)}
    out = {
        "body_parse_to_alert_columns": cpu_ms(lambda b: parse_for(gat, graph, b), bodies),
        "body_parse_with_cold_memos": cpu_ms(cold_parse, bodies[:20]),
        "body_parse_alert_dicts_for_reference": cpu_ms(lambda b: parse_alerts(b, True), bodies),
        "body_parse_rcarequest_models_for_reference": cpu_ms(
            RCARequest.model_validate_json, bodies
        ),
        "gat_find_root_causes_single": single,
        "of_which_features_mapping_and_crop": crop,
        "of_which_neighbour_inputs": nb,
        "of_which_gat_forward_with_attention": fwd,
        "of_which_ranking_fault_types_paths": round(single - crop - nb - fwd, 3),
        f"gat_find_root_causes_many_batch{batch}_per_incident": batched,
        "response_build_and_json": cpu_ms(respond, results),
        "mean_candidate_subgraph_nodes": round(sum(c.keep.size for c in crops) / len(crops), 1),
        "incidents_per_step": k,
        "conditions": "as in the server: GC with startup objects frozen and a generation-0 "
        "threshold of 100,000, malloc tuned, label and annotation memos warm (all incidents "
        "parsed and ranked once before timing); each step on the same incidents",
        "interleaved_ms_per_request": interleaved,
        "ranking_process_loop_ms_per_request": loops,
    }
    gc.set_threshold(*old_threshold)
    gc.unfreeze()
    return out


def ranking_loop(graph: Any, gat: Any, bodies: list[bytes], batch: int, reps: int = 2) -> float:
    """CPU ms per request of what a ranking process does, looped in this process: batches of
    ``batch`` bodies parsed (``parse_for``), ranked together (``rank_group``) and answered
    (``response_json``), the best of ``reps`` passes over ``bodies`` (no HTTP, no IPC)."""
    from fleetmind.serving.rca.batcher import rank_group
    from fleetmind.serving.rca.request import parse_for, response_json
    from fleetmind.serving.registry import LoadedModel

    model = LoadedModel("rca", gat, "gat", gat.version, None, None, 0.0)
    best = float("inf")
    for _ in range(reps):
        t = time.process_time()
        for i in range(0, len(bodies), batch):
            parsed = [parse_for(gat, graph, b) for b in bodies[i : i + batch]]
            ranked = rank_group(gat, [(graph, a, req.top_k) for req, a in parsed])
            for (req, a), (result, _) in zip(parsed, ranked, strict=True):
                response_json(model, graph, a, req.top_k, result)
        best = min(best, (time.process_time() - t) / len(bodies) * 1000)
    return round(best, 3)


def interleaved_breakdown(
    graph: Any, gat: Any, bodies: list[bytes], respond: Any, reps: int = 3
) -> dict[str, Any]:
    """CPU ms per request of each step when the steps run one after the other per request.

    The per-step figures of :func:`request_breakdown` loop one step over many incidents, so that
    step's code and data stay in the caches; a server runs parse -> crop -> forward -> ranking ->
    response for one request, then the next. This runs the steps of
    ``GATAnalyzer.find_root_causes`` (``incident_crop`` and, for a ``neighbours`` model, its
    neighbour inputs, timed as ``crop``; ``GATRanker.infer``; ``_result``) in that order, ``reps``
    times over ``bodies``, timing each step with ``time.process_time``.
    """
    import torch

    from fleetmind.rca.features.columnar import incident_crop
    from fleetmind.serving.rca.request import parse_for

    hops = gat.model.config.crop_hops
    acc = dict.fromkeys(("parse", "crop", "forward", "ranking_paths", "response"), 0.0)
    clock = time.process_time
    with torch.inference_mode():
        for _ in range(reps):
            for b in bodies:
                t0 = clock()
                alerts = parse_for(gat, graph, b)[1]
                t1 = clock()
                c = incident_crop(graph, alerts, hops)
                x, ea = gat._inputs(graph, alerts, c.x, c.keep, c.edge_index)  # + neighbour inputs
                t2 = clock()
                logits, h, att = gat.model.infer(
                    torch.from_numpy(x),
                    torch.from_numpy(c.edge_index),
                    torch.from_numpy(c.edge_type),
                    edge_attr=None if ea is None else torch.from_numpy(ea),
                )
                t3 = clock()
                result = gat._result(graph, c, logits, h, att, 5)
                t4 = clock()
                respond(result)
                t5 = clock()
                for key, dt in zip(acc, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4), strict=True):
                    acc[key] += dt
    n = reps * len(bodies)
    out: dict[str, Any] = {key: round(v / n * 1000, 3) for key, v in acc.items()}
    out["total"] = round(sum(acc.values()) / n * 1000, 3)
    out["requests"] = n
    return out


# ----------------------------------------------------------------------------------------- server
def start_server(
    port: int, env: dict[str, str], log: Path, workers: int = 1
) -> subprocess.Popen[bytes]:
    import httpx

    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "fleetmind.serving.app:create_app",
            "--factory",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "warning",
            "--no-access-log",
            "--workers",
            str(workers),
        ],
        cwd=REPO,
        env={**os.environ, **env},
        stdout=open(log, "wb"),  # noqa: SIM115
        stderr=subprocess.STDOUT,
    )
    for _ in range(600):
        if proc.poll() is not None:
            raise ConfigError(f"server exited: see {log}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise ConfigError("server did not become ready")


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (a count of alerts, clients or requests)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


HEADLINE = RESULTS / "serving" / "serving.json"
"""The committed result of the full run, ``--out``'s default for it alone."""
SCRATCH = REPO / "runs" / "serving"
"""Where ``--quick`` and ``--breakdown-only`` write unless ``--out`` is given (``runs/`` is not
in git): a smoke run or a breakdown never replaces the committed headline result."""


SIZE_OPTIONS = (
    "ingest_alerts",
    "ingest_batch",
    "ingest_conns",
    "rca_clients",
    "rca_requests",
    "rca_pool",
    "place_clients",
    "place_requests",
)
"""The options that size a run: one that differs from its default makes the run partial."""


def default_out(args: argparse.Namespace, defaults: dict[str, Any] | None = None) -> Path:
    """``--out`` when it is not given: the committed headline result for the full run on the
    released models only, else a scratch file under ``runs/serving/`` (``serving_quick.json``,
    ``serving_breakdown.json``, ``serving_partial.json`` for a run that skips a phase, serves
    another model or has a size in :data:`SIZE_OPTIONS` other than ``defaults``, the parser's),
    so that no partial, resized or candidate run replaces the headline."""
    if args.breakdown_only:
        return SCRATCH / "serving_breakdown.json"
    if args.quick:
        return SCRATCH / "serving_quick.json"
    resized = any(getattr(args, k) != (defaults or {}).get(k) for k in SIZE_OPTIONS if defaults)
    if args.skip_ingest or args.skip_breakdown or args.rca_model or args.placement_model or resized:
        return SCRATCH / "serving_partial.json"
    return HEADLINE


def fallback_error(models: dict[str, Any], asked: dict[str, str | None]) -> str | None:
    """Why the run must stop: a model given on the command line (``asked``: kind -> reference,
    ``None`` when not given) that the server did not load, so it answers with a fallback
    (``fallback_reason`` in ``GET /api/v1/models``); ``None`` when every one given is served."""
    for kind, ref in asked.items():
        entry = models.get(kind) or {}
        reason = entry.get("fallback_reason") if isinstance(entry, dict) else None
        if ref and reason:
            return (
                f"--{kind}-model {ref}: the server fell back to {entry.get('method')} "
                f"({' '.join(str(reason).split())}); the figures would not be that model's"
            )
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--out",
        type=argtypes.output_file,
        default=None,
        help=f"output JSON (default: {HEADLINE.relative_to(REPO)} for a full run; "
        f"{SCRATCH.relative_to(REPO)}/serving_quick.json with --quick, "
        f"serving_breakdown.json there with --breakdown-only)",
    )
    ap.add_argument("--quick", action="store_true", help="small sizes (smoke run)")
    ap.add_argument("--ingest-alerts", type=positive_int, default=20000)
    ap.add_argument("--ingest-batch", type=positive_int, default=50)
    ap.add_argument("--ingest-conns", type=positive_int, default=4)
    ap.add_argument("--rca-clients", type=positive_int, default=20)
    ap.add_argument("--rca-requests", type=positive_int, default=15, help="requests per client")
    ap.add_argument(
        "--rca-pool",
        type=argtypes.nonnegative_int,
        default=0,
        help="distinct simulated incidents (default: one per request of the 20-client run)",
    )
    ap.add_argument("--skip-ingest", action="store_true", help="only the RCA and placement phases")
    ap.add_argument(
        "--skip-breakdown",
        action="store_true",
        help="no in-process CPU breakdown of an RCA request after the run (saves ~30 s)",
    )
    ap.add_argument("--place-clients", type=positive_int, default=8)
    ap.add_argument("--place-requests", type=positive_int, default=300, help="requests per client")
    ap.add_argument("--workers", type=positive_int, default=1, help="uvicorn worker processes")
    ap.add_argument(
        "--rca-processes",
        type=argtypes.nonnegative_int,
        default=0,
        help="FLEETMIND_RCA_PROCESSES: ranking processes fed request by request (0: in-process)",
    )
    ap.add_argument(
        "--rca-process-batch",
        type=argtypes.positive_int,
        default=None,
        help="FLEETMIND_RCA_PROCESS_MAX_BATCH (default: the service's)",
    )
    ap.add_argument(
        "--rca-nice",
        type=int,
        default=0,
        help="FLEETMIND_RCA_PROCESS_NICE: niceness of the ranking processes",
    )
    ap.add_argument(
        "--keep-warm",
        type=float,
        default=None,
        metavar="SECONDS",
        help="FLEETMIND_KEEP_WARM_S: idle-priority busy loops keep the CPUs from halting until "
        "SECONDS after the last request (default: the service's, off); their CPU is reported "
        "apart (keep_warm_cpu_ms_per_request)",
    )
    ap.add_argument(
        "--rca-model", default=None, help="FLEETMIND_RCA_MODEL (default: registry's choice)"
    )
    ap.add_argument("--placement-model", default=None)
    ap.add_argument(
        "--client-loop",
        choices=["asyncio", "uvloop"],
        default="asyncio",
        help="event loop of this load generator (uvloop: less client CPU per request)",
    )
    ap.add_argument(
        "--warmup-clients",
        type=argtypes.nonnegative_int,
        default=0,
        help="clients of the RCA warm-up (default 4 per worker or ranking process), each sending "
        "--warmup-requests requests on incidents outside the timed pool",
    )
    ap.add_argument("--warmup-requests", type=positive_int, default=3)
    ap.add_argument(
        "--breakdown-only",
        action="store_true",
        help="no server: only the in-process CPU breakdown of an RCA request (released GAT, "
        "the same simulated incidents), e.g. to compare code versions on a busy machine",
    )
    args = ap.parse_args()
    if args.out is None:
        args.out = str(default_out(args, {k: ap.get_default(k) for k in SIZE_OPTIONS}))
    if args.breakdown_only:
        breakdown_only(args)
        return
    if args.client_loop == "uvloop":
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    if args.quick:
        args.ingest_alerts, args.rca_requests, args.place_requests = 2000, 3, 30
    pool_size = args.rca_pool or args.rca_clients * args.rca_requests
    load_start = load_now()

    from socket import socket

    with socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tmp = Path(tempfile.mkdtemp(prefix="fleetmind-bench-"))
    graph = benchmark_graph()
    graph.save(tmp / "graph.json")
    env = {
        "FLEETMIND_DATABASE_URL": f"sqlite:///{tmp}/bench.db",
        "FLEETMIND_GRAPH": str(tmp / "graph.json"),
        "MLFLOW_DISABLE_TELEMETRY": "true",
    }
    env["FLEETMIND_RCA_PROCESSES"] = str(args.rca_processes)
    env["FLEETMIND_RCA_PROCESS_NICE"] = str(args.rca_nice)
    if args.rca_process_batch is not None:
        env["FLEETMIND_RCA_PROCESS_MAX_BATCH"] = str(args.rca_process_batch)
    if args.keep_warm is not None:
        env["FLEETMIND_KEEP_WARM_S"] = str(args.keep_warm)
    if args.rca_model:
        env["FLEETMIND_RCA_MODEL"] = args.rca_model
    if args.placement_model:
        env["FLEETMIND_PLACEMENT_MODEL"] = args.placement_model
    proc = start_server(port, env, tmp / "server.log", args.workers)
    try:
        import httpx

        models = httpx.get(f"http://127.0.0.1:{port}/api/v1/models").json()
        asked = {"rca": args.rca_model, "placement": args.placement_model}
        why = fallback_error(models, asked)
        if why:  # the server is stopped on the way out (finally)
            raise ConfigError(f"{why} (server log: {tmp / 'server.log'})")
        print(
            f"server on :{port}; rca={models['rca']['method']} placement={models['placement']['method']}"
        )

        ingestion: dict[str, Any] | None = None
        rate, lost = 0.0, -1
        if not args.skip_ingest:
            ing = asyncio.run(
                ingest(port, args.ingest_alerts, args.ingest_batch, args.ingest_conns)
            )
            with sqlite3.connect(tmp / "bench.db") as conn:
                stored = {
                    r[0]
                    for r in conn.execute(
                        "SELECT fingerprint FROM alerts WHERE fingerprint LIKE 'ing-%'"
                    )
                }
            lost = len(set(ing["acked"]) - stored)
            rate = len(ing["acked"]) / ing["wall_s"]
            ingestion = {
                "alerts_sent": args.ingest_alerts,
                "alerts_acknowledged": len(ing["acked"]),
                "batch_alerts": args.ingest_batch,
                "connections": args.ingest_conns,
                "wall_s": round(ing["wall_s"], 3),
                "alerts_per_s": round(rate, 1),
                "lost_acknowledged": lost,
                "failed_requests": ing["failures"],
                "request_latency": summary(ing["lat"]),
                "sqlite_synchronous": "FULL",
            }
            # sustained, not front-loaded: the rate in every 5 s window of the run
            by_window = window_rates(ing["done"], 5.0)
            ingestion["alerts_per_s_by_5s_window"] = by_window
            ingestion["min_5s_window_alerts_per_s"] = min(by_window) if by_window else None
            print(f"ingestion: {rate:.0f} alerts/s, lost {lost}")

            # Let the incident worker group the backlog before timing the synchronous endpoints.
            t0 = time.perf_counter()
            while True:
                with sqlite3.connect(tmp / "bench.db") as conn:
                    pending = conn.execute("SELECT count(*) FROM alerts WHERE pending").fetchone()[
                        0
                    ]
                if pending == 0 or time.perf_counter() - t0 > 600:
                    break
                time.sleep(0.5)
            ingestion["grouping_drain_s"] = round(time.perf_counter() - t0, 2)
            ingestion["grouping_alerts_per_s_after_ingest"] = round(
                len(stored) / max(ingestion["grouping_drain_s"], 1e-9), 1
            )
            incs = httpx.get(
                f"http://127.0.0.1:{port}/api/v1/incidents", params={"status": "all", "limit": 1000}
            ).json()
            ingestion["incidents_formed"] = len(incs)

        procs = max(args.workers, args.rca_processes)
        warm_clients = args.warmup_clients or 4 * procs
        n_warm = warm_clients * args.warmup_requests
        bodies = sim_incidents(graph, pool_size + n_warm, 200, seed=0)
        bodies, warm = bodies[:pool_size], bodies[pool_size:]
        # warm-up of every worker process (the first requests build the graph caches and compile
        # torch_geometric's message-passing code), on incidents not used below; not timed
        asyncio.run(
            closed_loop(
                port, "/api/v1/rca", warm, warm_clients, args.warmup_requests, distinct=True
            )
        )
        pid = proc.pid
        rca = asyncio.run(
            closed_loop(
                port, "/api/v1/rca", bodies, args.rca_clients, args.rca_requests, pid, distinct=True
            )
        )
        rca["single_client"] = asyncio.run(
            closed_loop(port, "/api/v1/rca", bodies, 1, max(3, args.rca_requests * 2), pid, True)
        )
        rca.update(
            client=(
                "this script's Conn: a minimal asyncio HTTP/1.1 keep-alive client, one connection "
                f"per simulated client, on the {args.client_loop} event loop, in a second process "
                "over 127.0.0.1; latency is from writing the request to reading the whole response"
            ),
            alerts_per_request=200,
            warmup=(
                f"{warm_clients} clients x {args.warmup_requests} requests on {n_warm} incidents "
                "outside the timed pool, before the timed run"
            ),
            graph_nodes=graph.num_nodes,
            method=models["rca"]["method"],
            payloads=(
                f"{pool_size} distinct simulated incidents (fleetmind.data.rca_gen alert simulator, "
                "noise_per_node=0.15, 200 alerts drawn from each); no request body repeats within "
                "the 20-client run, so the figures are real inference cost, not cache hits"
            ),
        )
        print(
            f"rca: p50 {rca['p50_ms']} ms p99 {rca['p99_ms']} ms at {args.rca_clients} clients "
            f"({rca['server_cpu_ms_per_request']} ms server CPU per request); 1 client p50 "
            f"{rca['single_client']['p50_ms']} p99 {rca['single_client']['p99_ms']} ms"
        )

        rng = random.Random(1)
        jobs = [
            json.dumps(
                rng.choice(
                    [
                        {"num_gpu": 1, "gpu_milli": rng.choice([250, 500, 1000])},
                        {"num_gpu": rng.choice([2, 4, 8])},
                        {"num_gpu": 0, "cpu_milli": 4000},
                    ]
                )
            ).encode()
            for _ in range(50)
        ]
        place1 = asyncio.run(closed_loop(port, "/api/v1/placements", jobs, 1, args.place_requests))
        placeN = asyncio.run(
            closed_loop(
                port,
                "/api/v1/placements",
                jobs,
                args.place_clients,
                max(1, args.place_requests // 2),
            )
        )
        for p in (place1, placeN):
            p.update(method=models["placement"]["method"], fleet_gpus=640)
        print(
            f"placement: p99 {place1['p99_ms']} ms (1 client), {placeN['p99_ms']} ms ({args.place_clients} clients)"
        )
    finally:
        proc.terminate()
        proc.wait(10)

    # Where one request's CPU goes, in this process on the same incidents (CPU time, so the other
    # users of the machine inflate it less than wall time).
    breakdown = (
        {"skipped": "--skip-breakdown"}
        if args.skip_breakdown
        else request_breakdown(graph, bodies[:97], models["rca"])
    )
    rca["cpu_breakdown_ms_per_request"] = breakdown
    print(f"per-request CPU breakdown (ms): {breakdown}")

    result = {
        **result_head("serving", load_start),
        "server": {
            "workers": args.workers,
            "rca_processes": args.rca_processes,
            "rca_process_nice": args.rca_nice,
            "rca_process_max_batch": args.rca_process_batch
            or Settings.model_fields["rca_process_max_batch"].default,
            "keep_warm_s": args.keep_warm
            if args.keep_warm is not None
            else Settings.model_fields["keep_warm_s"].default,
            "database": "sqlite (WAL, synchronous=FULL)",
            "models": models,
        },
        "ingestion": ingestion if ingestion is not None else "skipped (--skip-ingest)",
        "rca": rca,
        "placement": {"clients_1": place1, f"clients_{args.place_clients}": placeN},
        "targets": {
            "ingestion_ge_1000_alerts_per_s_zero_loss": (
                rate >= 1000 and lost == 0 if ingestion is not None else None
            ),
            "rca_p99_le_100ms_at_20_clients": rca["p99_ms"] <= 100 and args.rca_clients >= 20,
            "placement_p99_le_20ms_1_client": place1["p99_ms"] <= 20,
        },
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


def result_head(benchmark: str, load_start: list[float]) -> dict[str, Any]:
    """The keys every JSON of this script starts with: what ran, the command, machine and commit."""
    return {
        "benchmark": benchmark,
        **provenance(__spec__.name, load_start=load_start, packages=PACKAGES, **cpu_facts()),
    }


def breakdown_only(args: argparse.Namespace) -> None:
    """``--breakdown-only``: :func:`request_breakdown` on the benchmark's incidents, no server."""
    load_start = load_now()
    graph = benchmark_graph()
    n = args.rca_pool or args.rca_clients * args.rca_requests
    bodies = sim_incidents(graph, n, 200, seed=0)
    breakdown = request_breakdown(graph, bodies[:97], {"method": "gat", "source": "models/rca"})
    print(f"per-request CPU breakdown (ms): {breakdown}")
    result = {
        **result_head("serving (in-process CPU breakdown only)", load_start),
        "cpu_breakdown_ms_per_request": breakdown,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    raise SystemExit(run_main(main, prog="benchmarks.serving.service"))
