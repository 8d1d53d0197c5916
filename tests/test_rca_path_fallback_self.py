"""The fallback ranker honours RankedCause.path: an alerting cause's path is the cause alone.

RankedCause.path (fleetmind/rca/base.py) is "``[node]`` alone when the cause itself alerts"; the GAT
ranker does the same (docs/gat.md). A non-alerting cause keeps a path that ends at an alerting node.
"""

from __future__ import annotations

from fleetmind.serving.fallback import UpstreamCoverageAnalyzer
from tests.golden_storm_helpers import golden_fleet, storm_alert


def test_alerting_cause_path_is_itself_and_others_end_at_an_alerting_node() -> None:
    g = golden_fleet()
    host = next(n for n in g.nodes if n.kind == "host" and n.attrs.get("role") == "gpu-host")
    pod = next(
        e.src
        for e in g.edges
        if e.dst == host.id and e.kind == "runs_on" and g.node(e.src).kind == "pod"
    )
    alerts = [storm_alert(host.match, "KubeNodeNotReady", 0)]
    names = ["KubePodNotReady", "KubePodCrashLooping", "KubeContainerWaiting"]
    alerts += [storm_alert(g.node(pod).match, n, 5 + i, "warning") for i, n in enumerate(names)]
    causes = UpstreamCoverageAnalyzer().find_root_causes(g, alerts, 10).causes
    by_node = {c.node: c for c in causes}
    # both alerting nodes are candidates, and each explains its own alerts
    assert by_node[pod].path == (pod,)
    assert by_node[host.id].path == (host.id,)
    for c in causes:
        assert c.path[0] == c.node
        assert c.path[-1] in {pod, host.id}
        if c.node not in {pod, host.id}:
            assert len(c.path) >= 2
