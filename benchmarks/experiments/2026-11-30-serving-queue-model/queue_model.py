"""A queueing model of ``POST /api/v1/rca`` under the benchmark's closed loop: what batching can do.

Not a measurement: a discrete-event simulation that asks whether any batch size of the ranking
processes could bring the p99 at 20 clients under 100 ms, given the batch cost measured on this
machine. Model:

* ``clients`` closed-loop clients; each sends its next request ``think_ms`` after an answer (HTTP,
  the load generator);
* ``processes`` ranking processes, each on its own core, take up to ``batch`` queued requests in
  arrival order whenever they are free (``fleetmind.serving.rca.pool.RankingPool``'s rule) and answer them
  all at the end of the batch;
* a batch of ``b`` requests takes ``a + s * b`` ms, times a uniform factor in ``1 +- jitter``.
  ``a`` and ``s`` are fitted to the measured server CPU per request with batches of 2 and 8 (the
  mean over the ``serving_2026-11-30_0009_batch{2,8}_run*.json`` runs). That CPU includes the server process's
  share (0.4-0.9 ms), so the model charges the two cores' whole load to the ranking processes,
  one core each: a batch's CPU is its wall time. ``jitter`` (default 0.15) is a guess, not a fit.

Nothing else competes for the CPU in the model: the server process (HTTP), the load generator and
the operating system's scheduling are left out, so the model's tail is a lower bound of the real
one. Run: ``python -m benchmarks.experiments.2026-11-30-serving-queue-model.queue_model`` ->
``benchmarks/results/serving/serving_queue_model.json``.
"""

from __future__ import annotations

import argparse
import glob
import heapq
import json
import random
from pathlib import Path

from benchmarks.provenance import RESULTS, load_now, provenance
from fleetmind.cli.runner import run_main
from fleetmind.errors import ConfigError


def simulate(
    batch: int,
    a_ms: float,
    s_ms: float,
    clients: int = 20,
    processes: int = 2,
    think_ms: float = 1.5,
    jitter: float = 0.15,
    requests: int = 20_000,
    warmup: int = 1_000,
    seed: int = 0,
    answer_each: bool = False,
) -> dict[str, float]:
    """Latency statistics (ms) and throughput (requests/s) of one closed-loop run of the model.

    ``answer_each``: the ``k``-th request of a batch is answered at ``a + s * k`` (times the
    batch's jitter factor) instead of all at the end of the batch: a ranking process that sends
    each answer as soon as it is ranked (not what ``fleetmind.serving.rca.pool`` does today).
    """
    rnd = random.Random(seed)
    queue: list[int] = []
    busy = [False] * processes
    sent: dict[int, float] = {}
    latencies: list[float] = []
    events: list[tuple[float, int, str, object]] = []
    order = 0  # tie-break for events at the same time
    for c in range(clients):
        events.append((0.01 * c, order, "arrive", c))
        order += 1
    heapq.heapify(events)

    def dispatch(now: float) -> None:
        nonlocal order
        for p in range(processes):
            if busy[p] or not queue:
                continue
            taken, queue[:] = queue[:batch], queue[batch:]
            factor = 1 + rnd.uniform(-jitter, jitter)
            busy[p] = True
            for k, c in enumerate(taken, 1):
                n_done = k if answer_each else len(taken)
                heapq.heappush(events, (now + (a_ms + s_ms * n_done) * factor, order, "answer", c))
                order += 1
            heapq.heappush(events, (now + (a_ms + s_ms * len(taken)) * factor, order, "free", p))
            order += 1

    while len(latencies) < requests + warmup:
        now, _, kind, item = heapq.heappop(events)
        if kind == "arrive":
            sent[item] = now  # type: ignore[index]
            queue.append(item)  # type: ignore[arg-type]
        elif kind == "answer":
            latencies.append(now - sent[item])  # type: ignore[index]
            heapq.heappush(events, (now + think_ms, order, "arrive", item))
            order += 1
        else:
            busy[item] = False  # type: ignore[index]
        dispatch(now)
    lat = sorted(latencies[warmup:])
    mean = sum(lat) / len(lat)
    return {
        "batch": batch,
        "answer": "each" if answer_each else "batch",
        "mean_ms": round(mean, 1),
        "p50_ms": round(lat[len(lat) // 2], 1),
        "p99_ms": round(lat[int(len(lat) * 0.99)], 1),
        "throughput_rps": round(clients / mean * 1000, 1),
    }


def fitted_cost() -> tuple[float, float, dict[str, float]]:
    """``a + s * b`` through the mean measured CPU per request at batches of 2 and 8."""
    per_req: dict[int, float] = {}
    for b in (2, 8):
        files = sorted(
            glob.glob(str(RESULTS / "serving" / f"serving_2026-11-30_0009_batch{b}_run*.json"))
        )
        if not files:
            raise ConfigError(
                f"no {RESULTS}/serving/serving_2026-11-30_0009_batch{b}_run*.json: run the benchmark first"
            )
        vals = [json.loads(Path(f).read_text())["rca"]["server_cpu_ms_per_request"] for f in files]
        per_req[b] = sum(vals) / len(vals)
    s = (8 * per_req[8] - 2 * per_req[2]) / 6
    a = 2 * per_req[2] - 2 * s
    return a, s, {f"batch{b}_cpu_ms_per_request": round(v, 2) for b, v in per_req.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", nargs="+", type=int, default=[1, 2, 4, 8, 16])
    ap.add_argument("--think-ms", type=float, default=1.5)
    ap.add_argument("--jitter", type=float, default=0.15)
    ap.add_argument(
        "--cost-scales",
        nargs="+",
        type=float,
        default=[0.8, 0.7, 0.6, 0.5],
        help="also run batches of 2, 4 and 8 with the fitted batch cost times each factor",
    )
    ap.add_argument("--out", default=str(RESULTS / "serving" / "serving_queue_model.json"))
    args = ap.parse_args()
    load0 = load_now()
    a, s, measured = fitted_cost()
    rows = [simulate(b, a, s, think_ms=args.think_ms, jitter=args.jitter) for b in args.batches]
    # what if each request were answered as soon as it is ranked (the idea left open by the batch-size series)
    answer_each = [
        simulate(b, a, s, think_ms=args.think_ms, jitter=args.jitter, answer_each=True)
        for b in args.batches
    ]
    # what cost per request the target needs: the batch cost scaled down, nothing else changed
    scaled = [
        {
            "cost_scale": f,
            **simulate(b, a * f, s * f, think_ms=args.think_ms, jitter=args.jitter),
        }
        for f in args.cost_scales
        for b in (2, 4, 8)
    ]
    out = {
        "benchmark": "serving_queue_model",
        **provenance(__spec__.name, load_start=load0),
        "model": {
            "batch_cost_ms": f"{a:.2f} + {s:.2f} * b",
            "fitted_from": measured,
            "clients": 20,
            "processes": 2,
            "think_ms": args.think_ms,
            "jitter": args.jitter,
            "note": "no CPU contention from the server process, the load generator or the OS: "
            "the model's tail is a lower bound",
        },
        "results": rows,
        "results_answer_each": answer_each,
        "results_cost_scaled": scaled,
    }
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(out["model"]["batch_cost_ms"], measured)
    for r in [*rows, *answer_each, *scaled]:
        print(r)


if __name__ == "__main__":
    raise SystemExit(
        run_main(main, prog="benchmarks.experiments.2026-11-30-serving-queue-model.queue_model")
    )
