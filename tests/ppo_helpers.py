"""Tiny fleet and trace for the PPO tests (fast: 20 nodes, 84 GPUs, 150 pods)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fleetmind.data.openb import OpenbNodes, PodTrace, load_openb_nodes, load_openb_trace

NODE_ROWS = [
    ("n00", 96000, 786432, 8, "V100M32"),
    ("n01", 96000, 786432, 8, "V100M32"),
    ("n02", 64000, 262144, 4, "T4"),
    ("n03", 64000, 262144, 4, "T4"),
    ("n04", 32000, 131072, 2, "P100"),
    ("n05", 32000, 131072, 2, "P100"),
    ("n06", 96000, 393216, 8, "G2"),
    ("n07", 16000, 65536, 1, "A10"),
    ("n08", 16000, 65536, 1, "A10"),
    ("n09", 64000, 262144, 4, "V100M16"),
]
NODE_ROWS = NODE_ROWS + [(f"m{n[1:]}", *rest) for n, *rest in NODE_ROWS]


def write_tiny(folder: Path, n_pods: int = 150, seed: int = 7) -> tuple[Path, Path]:
    """Write ``nodes.csv`` and ``pods.csv`` (openb columns) into ``folder``; returns both paths."""
    rng = np.random.default_rng(seed)
    nodes = folder / "nodes.csv"
    nodes.write_text(
        "sn,cpu_milli,memory_mib,gpu,model\n"
        + "".join(f"{a},{b},{c},{d},{e}\n" for a, b, c, d, e in NODE_ROWS)
    )
    rows = []
    for i in range(n_pods):
        u = rng.random()
        if u < 0.15:
            ng, gm = 0, 0
        elif u < 0.6:
            ng, gm = 1, int(rng.choice([100, 250, 500, 800]))
        elif u < 0.9:
            ng, gm = 1, 1000
        else:
            ng, gm = 2, 1000
        spec = "V100M32|T4" if ng > 0 and rng.random() < 0.1 else ""
        cpu = int(rng.choice([1000, 2000, 4000, 8000]))
        mem = int(rng.choice([2048, 8192, 16384]))
        rows.append(f"pod-{i:04d},{cpu},{mem},{ng},{gm},{spec}\n")
    pods = folder / "pods.csv"
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n" + "".join(rows))
    return nodes, pods


def load_tiny(folder: Path) -> tuple[OpenbNodes, PodTrace]:
    nodes, pods = write_tiny(folder)
    return load_openb_nodes(nodes), load_openb_trace(pods)
