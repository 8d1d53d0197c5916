"""Synthetic scenario folders in the PetShop layout (tests of ``rca fit`` / ``rca petshop``, fit-time
benchmark).

The shape of the "other real systems" ``rca fit`` must handle unchanged: 20-50 services with opaque
names, a call graph (as if taken from traces), 1-minute rows, metrics named like a Prometheus or
CloudWatch export (``cpu_usage``, ``memory_usage``, ``request_count``, ``success_rate``,
``latency_p90``), an issue split ``test/`` only (no ``train/``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

METRICS: tuple[tuple[str, str], ...] = (
    ("cpu_usage", "Average"),
    ("memory_usage", "Average"),
    ("request_count", "Sum"),
    ("success_rate", "Average"),
    ("latency_p90", "p90"),
)


def make_system(
    root: Path,
    n_services: int = 24,
    normal_rows: int = 240,
    issues: int = 3,
    seed: int = 0,
    prefix: str = "svc",
) -> dict[str, object]:
    """Write a scenario folder; returns ``{"names", "edges", "roots"}``.

    The call graph is a random DAG (each service calls 1-3 services of higher index), so the last
    services are leaves. Each issue multiplies one service's ``latency_p90`` by 8 from minute 3 of a
    10-minute window and adds the caller-weighted increase up the call chain (latency adds up).
    """
    rng = np.random.default_rng(seed)
    names = [f"{prefix}-{rng.integers(1 << 30):08x}" for _ in range(n_services)]
    edges: list[tuple[int, int]] = []
    for i in range(n_services - 1):
        k = int(rng.integers(1, 4))
        for j in rng.choice(
            np.arange(i + 1, n_services), size=min(k, n_services - 1 - i), replace=False
        ):
            edges.append((i, int(j)))
    adj = np.zeros((n_services, n_services), dtype=int)
    for i, j in edges:
        adj[i, j] = 1
    root.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(adj, index=names, columns=names).to_csv(root / "graph.csv")

    base = {
        "cpu_usage": rng.uniform(10, 60, n_services),
        "memory_usage": rng.uniform(200, 2000, n_services),
        "request_count": rng.uniform(50, 500, n_services),
        "success_rate": np.full(n_services, 99.9),
        "latency_p90": rng.uniform(0.01, 0.2, n_services),
    }

    def frame(rows: int, t0: float) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
        cols, data = [], {}
        for m, stat in METRICS:
            b = base[m]
            noise = {
                "cpu_usage": rng.normal(0, 2.0, (rows, n_services)),
                "memory_usage": rng.normal(0, 10.0, (rows, n_services)),
                "request_count": rng.poisson(b, (rows, n_services)) - b,
                "success_rate": -np.abs(rng.normal(0, 0.05, (rows, n_services))),
                "latency_p90": rng.normal(0, 0.005, (rows, n_services)),
            }[m]
            data[m] = b + noise
            cols += [(n, m, stat) for n in names]
        values = np.concatenate([data[m] for m, _ in METRICS], axis=1)
        idx = t0 + 60.0 * np.arange(rows)
        df = pd.DataFrame(values, index=pd.Index(idx, name="time"))
        df.columns = pd.MultiIndex.from_tuples(cols)
        return df, data

    normal, _ = frame(normal_rows, 1.7e9)
    (root / "noissue").mkdir(exist_ok=True)
    normal.to_csv(root / "noissue" / "metrics.csv")
    callers: list[list[int]] = [[] for _ in range(n_services)]
    for i, j in edges:
        callers[j].append(i)
    roots = []
    for k in range(issues):
        r = int(rng.integers(n_services // 2, n_services))
        roots.append(names[r])
        win, _ = frame(10, 1.8e9 + 3600.0 * k)
        delta = np.zeros(n_services)
        delta[r] = 7.0 * base["latency_p90"][r] + 0.3
        order = [r]
        for v in order:  # breadth first up the callers; latency adds up
            for c in callers[v]:
                delta[c] += 0.8 * delta[v]
                if c not in order:
                    order.append(c)
        lat = win.columns.get_level_values(1) == "latency_p90"
        win.loc[win.index[3:], lat] = win.loc[win.index[3:], lat].to_numpy() + delta
        d = root / "test" / f"issue_{k}"
        d.mkdir(parents=True, exist_ok=True)
        win.to_csv(d / "metrics.csv")
        (d / "target.json").write_text(
            json.dumps(
                {
                    "target": {"node": names[0], "metric": "latency", "agg": "p90", "timestamp": 0},
                    "root_cause": {"node": names[r]},
                    "metadata": {},
                }
            )
        )
    return {"names": names, "edges": edges, "roots": roots}
