"""Live equals simulated: openb nodes exposed as a Kubernetes cluster (recorded-format dcgm-exporter
and kube-state-metrics texts, scraped by the real Prometheus), a job stream sent through the
scheduler extender, bindings fed back; the unallocated GPU % equals ``fleetmind sched evaluate``'s
(``envs.fgd_mode.run_fgd``, the function the CLI runs) for the same policy, trace and seed.

The simulator breaks ties between equally scored nodes by a seeded random node priority; a
cluster has no such thing, so the live nodes are *named* in that priority order
(``gpu-<rank>``): FleetMind ranks nodes in name order, and both break ties alike.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from k8s_helpers import LEVELS, live_vs_sim, prometheus_binary


@pytest.mark.external
def test_live_cluster_matches_the_simulator(tmp_path: Path) -> None:
    if prometheus_binary() is None:
        pytest.skip("Prometheus not installed (Debian package prometheus)")
    out = live_vs_sim(tmp_path, step=100)
    assert out["pods"] > out["gpus"]  # the stream fills the fleet past 130 % of its GPUs
    assert out["sim_unallocated"][130] > 0  # some GPU is stranded: the comparison is not trivial
    for lvl in LEVELS:
        assert abs(out["live_unallocated"][lvl] - out["sim_unallocated"][lvl]) <= 0.2, out
    assert out["same_node_fraction"] == 1.0, out
