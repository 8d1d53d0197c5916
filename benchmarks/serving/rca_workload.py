"""The RCA benchmark's workload: request bodies of distinct simulated incidents.

Shared by ``benchmarks.serving.service`` and ``benchmarks.serving.cpu_loop``. It has no
import-time side effects and imports the project (``fleetmind.data.rca_gen``) only when called, so
the bodies are built by whichever ``fleetmind`` the running interpreter has installed.
"""

from __future__ import annotations

import json
from typing import Any


def sim_incidents(graph: Any, n: int, size: int, seed: int) -> list[bytes]:
    """``n`` request bodies, each ``size`` alerts of a different simulated incident.

    The alert simulator (``fleetmind.data.rca_gen.alerts``) with background noise raised to 0.15 alerts per
    node (default 0.006) so an incident on this graph has 200-300 alerts (a fault's cascade, flapping
    and repeated hub alerts, unrelated noise); ``size`` of them are drawn at random (order kept).
    """
    import numpy as np

    from fleetmind.data.rca_gen.alerts import AlertSimConfig, IncidentSimulator

    sim = IncidentSimulator(graph, AlertSimConfig(noise_per_node=0.15))
    rng = np.random.default_rng(seed)
    out: list[bytes] = []
    i = 0
    while len(out) < n:
        alerts = sim.simulate(rng, f"bench-{i}")["alerts"]
        i += 1
        if len(alerts) < size:
            continue
        keep = np.sort(rng.choice(len(alerts), size, replace=False))
        out.append(json.dumps({"alerts": [alerts[j] for j in keep], "top_k": 5}).encode())
    return out
