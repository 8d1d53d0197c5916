"""Service benchmark: a real uvicorn process, load from this (second) process over loopback.

Phases (each against the same server, SQLite WAL with synchronous=FULL, the ~1,000-node
``benchmark_graph``):

1. **ingestion**: ``--ingest-alerts`` unique alerts as Alertmanager webhooks of ``--ingest-batch``
   alerts over ``--ingest-conns`` keep-alive connections; alerts/s = alerts acknowledged / wall time;
   zero loss = every acknowledged alert is in the database afterwards (read with sqlite3).
2. **rca**: ``POST /api/v1/rca`` with 200-alert storms (20 distinct storms, each from one faulty node
   and its dependents plus noise), ``--rca-clients`` concurrent clients in a closed loop.
3. **placement**: ``POST /api/v1/placements`` (random job shapes, no reservation) on the sim fleet of
   the graph (80 hosts x 8 GPUs), 1 and ``--place-clients`` concurrent clients.

Targets (issue 7): ingestion >= 1,000 alerts/s with zero loss; RCA p99 <= 100 ms at 20 clients;
placement p99 <= 20 ms.

    .venv/bin/python benchmarks/bench_serving.py [--quick] [--out benchmarks/results/serving.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import sqlite3
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from serving.defaults.example import benchmark_graph  # noqa: E402


# ----------------------------------------------------------------------------------------- raw client
class Conn:
    """A minimal HTTP/1.1 keep-alive client (far cheaper per request than httpx)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> Conn:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        return self

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        assert self.reader is not None and self.writer is not None
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        self.writer.write(head + body)
        await self.writer.drain()
        status = int((await self.reader.readline()).split()[1])
        length = 0
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b""):
                break
            k, _, v = line.decode().partition(":")
            if k.lower() == "content-length":
                length = int(v)
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


# ----------------------------------------------------------------------------------------- workloads
def storms(graph: Any, n_storms: int, size: int, seed: int) -> list[bytes]:
    """``n_storms`` request bodies of ``size`` alerts: a fault's dependents alert, plus 20 % noise."""
    rng = random.Random(seed)
    rev: dict[str, list[str]] = {}
    for e in graph.edges:
        rev.setdefault(e.dst, []).append(e.src)
    alertable = [
        n for n in graph.nodes if n.match and n.kind in ("gpu", "host", "pod", "service", "link")
    ]
    out = []
    for s in range(n_storms):
        root = rng.choice(alertable)
        near, frontier = [root.id], [root.id]
        for _ in range(3):
            frontier = [d for f in frontier for d in rev.get(f, [])]
            near += frontier
        alerts = []
        for i in range(size):
            nid = rng.choice(near) if rng.random() < 0.8 else rng.choice(alertable).id
            node = graph.node(nid)
            labels = (
                {"alertname": f"A{rng.randrange(6)}", **node.match}
                if node.match
                else {"alertname": "X"}
            )
            alerts.append(
                {
                    "status": "firing",
                    "labels": labels,
                    "annotations": {},
                    "startsAt": f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}Z",
                    "fingerprint": f"s{s}-{i}",
                }
            )
        out.append(json.dumps({"alerts": alerts, "top_k": 5}).encode())
    return out


async def ingest(port: int, total: int, batch: int, conns: int) -> dict[str, Any]:
    acked: list[str] = []
    lat: list[float] = []
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
                    "alerts": [
                        {
                            "status": "firing",
                            "labels": {
                                "alertname": "GpuXid",
                                "cluster": f"c{i % 4}",
                                "node": f"c{i % 4}-h{b % 20}",
                                "gpu": str(i % 8),
                            },
                            "annotations": {"summary": "bench"},
                            "startsAt": "2026-01-01T00:00:00Z",
                            "endsAt": "0001-01-01T00:00:00Z",
                            "fingerprint": fp,
                        }
                        for i, fp in enumerate(fps)
                    ],
                }
            ).encode()
            t = time.perf_counter()
            status, _ = await c.request("POST", "/api/v1/alerts", body)
            lat.append(time.perf_counter() - t)
            if status == 200:
                acked.extend(fps)
            else:
                failures += 1
        c.close()

    t0 = time.perf_counter()
    await asyncio.gather(*[worker() for _ in range(conns)])
    wall = time.perf_counter() - t0
    return {"acked": acked, "wall_s": wall, "lat": lat, "failures": failures}


async def closed_loop(
    port: int, path: str, bodies: list[bytes], clients: int, per_client: int
) -> dict[str, Any]:
    lat: list[float] = []
    errors = 0

    async def client(k: int) -> None:
        nonlocal errors
        c = await Conn(port).open()
        await c.request("POST", path, bodies[k % len(bodies)])  # warm the connection
        for i in range(per_client):
            t = time.perf_counter()
            status, _ = await c.request("POST", path, bodies[(k + i) % len(bodies)])
            lat.append(time.perf_counter() - t)
            errors += status != 200
        c.close()

    t0 = time.perf_counter()
    await asyncio.gather(*[client(k) for k in range(clients)])
    wall = time.perf_counter() - t0
    return {
        **summary(lat),
        "clients": clients,
        "errors": errors,
        "throughput_rps": round(len(lat) / wall, 1),
    }


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
            "serving.app:create_app",
            "--factory",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "warning",
            "--no-access-log",
        ],
        cwd=REPO,
        env={**os.environ, **env},
        stdout=open(log, "wb"),  # noqa: SIM115
        stderr=subprocess.STDOUT,
    )
    for _ in range(600):
        if proc.poll() is not None:
            raise SystemExit(f"server exited: see {log}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise SystemExit("server did not become ready")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(REPO / "benchmarks/results/serving.json"))
    ap.add_argument("--quick", action="store_true", help="small sizes (smoke run)")
    ap.add_argument("--ingest-alerts", type=int, default=20000)
    ap.add_argument("--ingest-batch", type=int, default=50)
    ap.add_argument("--ingest-conns", type=int, default=4)
    ap.add_argument("--rca-clients", type=int, default=20)
    ap.add_argument("--rca-requests", type=int, default=15, help="requests per client")
    ap.add_argument("--place-clients", type=int, default=8)
    ap.add_argument("--place-requests", type=int, default=300, help="requests per client")
    ap.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    ap.add_argument(
        "--rca-model", default=None, help="FLEETMIND_RCA_MODEL (default: registry's choice)"
    )
    ap.add_argument("--placement-model", default=None)
    args = ap.parse_args()
    if args.quick:
        args.ingest_alerts, args.rca_requests, args.place_requests = 2000, 3, 30

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
    if args.rca_model:
        env["FLEETMIND_RCA_MODEL"] = args.rca_model
    if args.placement_model:
        env["FLEETMIND_PLACEMENT_MODEL"] = args.placement_model
    proc = start_server(port, env, tmp / "server.log", args.workers)
    try:
        import httpx

        models = httpx.get(f"http://127.0.0.1:{port}/api/v1/models").json()
        print(
            f"server on :{port}; rca={models['rca']['method']} placement={models['placement']['method']}"
        )

        ing = asyncio.run(ingest(port, args.ingest_alerts, args.ingest_batch, args.ingest_conns))
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
        print(f"ingestion: {rate:.0f} alerts/s, lost {lost}")

        # Let the incident worker group the backlog before timing the synchronous endpoints.
        t0 = time.perf_counter()
        while True:
            with sqlite3.connect(tmp / "bench.db") as conn:
                pending = conn.execute("SELECT count(*) FROM alerts WHERE pending").fetchone()[0]
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

        bodies = storms(graph, 20, 200, seed=0)
        rca = asyncio.run(
            closed_loop(port, "/api/v1/rca", bodies, args.rca_clients, args.rca_requests)
        )
        rca["single_client"] = asyncio.run(
            closed_loop(port, "/api/v1/rca", bodies, 1, max(3, args.rca_requests))
        )
        rca.update(
            alerts_per_request=200, graph_nodes=graph.num_nodes, method=models["rca"]["method"]
        )
        print(f"rca: p50 {rca['p50_ms']} ms p99 {rca['p99_ms']} ms at {args.rca_clients} clients")

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
                port, "/api/v1/placements", jobs, args.place_clients, args.place_requests // 2
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

    # The analyzers alone, in this process, on the same storms: the CPU cost behind each RCA
    # request (a single-process server at 20 clients needs p99 ~ 20 x this / cores).
    from serving.registry import make_rca_baseline

    analyzer_ms: dict[str, float] = {}
    for name in ("pagerank", "deepest", "most_alerts", "upstream-coverage"):
        try:
            an = make_rca_baseline(name)
        except Exception:
            continue
        storms_json = [json.loads(b)["alerts"] for b in bodies]
        an.find_root_causes(graph, storms_json[0], 5)
        t0 = time.perf_counter()
        for st in storms_json:
            an.find_root_causes(graph, st, 5)
        analyzer_ms[name] = round((time.perf_counter() - t0) / len(storms_json) * 1000, 2)
    rca["analyzer_only_ms_per_storm"] = analyzer_ms
    print(f"analyzer alone (ms per 200-alert storm): {analyzer_ms}")

    result = {
        "benchmark": "serving",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpu_count": os.cpu_count(),
            "loadavg_1m_at_end": round(os.getloadavg()[0], 2),
        },
        "versions": {
            p: version(p) for p in ("fastapi", "uvicorn", "starlette", "pydantic", "sqlalchemy")
        },
        "server": {
            "workers": args.workers,
            "database": "sqlite (WAL, synchronous=FULL)",
            "models": models,
        },
        "ingestion": ingestion,
        "rca": rca,
        "placement": {"clients_1": place1, f"clients_{args.place_clients}": placeN},
        "targets": {
            "ingestion_ge_1000_alerts_per_s_zero_loss": rate >= 1000 and lost == 0,
            "rca_p99_le_100ms_at_20_clients": rca["p99_ms"] <= 100 and args.rca_clients >= 20,
            "placement_p99_le_20ms_1_client": place1["p99_ms"] <= 20,
        },
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
