"""The planned-maintenance silence docs/operators.md recommends: ``FleetMindRootCause`` has no
``node`` label, so a drained node's root cause is silenced by ``cause_node``, a graph node id.

The ids a node's own causes take are those ``fleetmind graph build`` makes
(``data/graph_build.py``): ``<cluster>/host/<node>``, ``<cluster>/gpu/<node>/<i>``,
``<cluster>/link/<node>/nvlink``. Alertmanager anchors a ``=~`` matcher's regular expression at
both ends (``pkg/labels/matcher.go``, prometheus/alertmanager: ``"^(?:" + value + ")$"``), so
``<node>.*`` would also match ``<node>0`` (``gpu-a100-1`` silencing ``gpu-a100-10``); the recipe
ends the node name with ``(/.*)?``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest
from alertmanager_helpers import running_alertmanager
from kps_helpers import kps_graph

from fleetmind.data.paths import REPO_ROOT

CAUSE_NODE = "prod-eu/(host|gpu|link)/gpu-a100-1(/.*)?"
MATCHERS = ['alertname="FleetMindRootCause"', f'cause_node=~"{CAUSE_NODE}"']


def _silenced(cause_node: str) -> bool:
    """Whether Alertmanager's anchored regex match takes ``cause_node``."""
    return re.fullmatch(f"^(?:{CAUSE_NODE})$", cause_node) is not None


def test_the_documented_recipe_is_this_one() -> None:
    text = (REPO_ROOT / "docs" / "operators.md").read_text()
    for matcher in MATCHERS:
        assert f"'{matcher}'" in text


def test_the_regex_takes_the_node_own_causes_only() -> None:
    """Against the ids of the kube-prometheus-stack test cluster's graph: the host and its 8 GPUs,
    not the other node's, nor a pod's or Service's (their ids name no node)."""
    graph = kps_graph()
    took = sorted(n.id for n in graph.nodes if _silenced(n.id))
    own = sorted(n.id for n in graph.nodes if n.match.get("node") == "gpu-a100-1")
    assert took == own and "prod-eu/host/gpu-a100-1" in took and len(took) >= 9  # host + 8 GPUs
    assert _silenced("prod-eu/link/gpu-a100-1/nvlink")
    assert not _silenced("prod-eu/host/gpu-a100-10")  # a node whose name extends this one's
    assert not _silenced("prod-eu/gpu/gpu-a100-10/0")
    assert not _silenced("staging/host/gpu-a100-1")  # the same node name in another cluster
    assert re.fullmatch("prod-eu/(host|gpu)/gpu-a100-1.*", "prod-eu/host/gpu-a100-10")  # why not .*


def test_a_real_alertmanager_silences_with_amtool(tmp_path: Path) -> None:
    """``amtool silence add`` with the documented matchers; Alertmanager then marks the root
    causes on the node ``suppressed`` and the others ``active``."""
    amtool = shutil.which("amtool")
    if amtool is None:
        pytest.skip("amtool not installed (Debian package prometheus-alertmanager)")
    config = tmp_path / "am.yml"
    config.write_text('route:\n  receiver: "null"\nreceivers:\n  - name: "null"\n')
    causes = ["prod-eu/host/gpu-a100-1", "prod-eu/gpu/gpu-a100-1/3", "prod-eu/host/gpu-a100-10",
              "prod-eu/svc/gpu-operator/nvidia-dcgm-exporter"]  # fmt: skip
    with running_alertmanager(config, tmp_path / "data") as url:
        add = [amtool, f"--alertmanager.url={url}", "silence", "add", "--duration=2h",
               "--author=ops", "--comment=drain gpu-a100-1 for a driver upgrade", *MATCHERS]  # fmt: skip
        done = subprocess.run(add, capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        alerts = [{"labels": {"alertname": "FleetMindRootCause", "cluster": "prod-eu",
                              "incident": str(i), "cause_node": c}} for i, c in enumerate(causes)]  # fmt: skip
        httpx.post(f"{url}/api/v2/alerts", json=alerts, timeout=10).raise_for_status()
        got = httpx.get(f"{url}/api/v2/alerts", timeout=10).json()
    state = {a["labels"]["cause_node"]: a["status"]["state"] for a in got}
    assert state == {
        "prod-eu/host/gpu-a100-1": "suppressed",
        "prod-eu/gpu/gpu-a100-1/3": "suppressed",
        "prod-eu/host/gpu-a100-10": "active",
        "prod-eu/svc/gpu-operator/nvidia-dcgm-exporter": "active",
    }
