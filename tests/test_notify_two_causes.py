"""Two unrelated faults in one incident: every sent cause stays paged while its own alerts fire.

The example XID storm (``examples/storm-gpu-xid.json``: GPU c0-h1/1) fires, and three minutes
later the host-down storm (``examples/storm-host-down.json``: host c0-h2 NotReady) joins its
incident. The served model ranks a single root, so it splits its score (host 0.59, GPU 0.41). The
notifier used to resolve the GPU's critical FleetMindRootCause ("root cause changed") while the
GPU's alerts still fired, send the host alone, and, once the host recovered, keep re-sending the
healthy host as the cause: resolutions did not re-rank. Now the GPU's alert fires on beside the
host's (``notify.KEPT``), the host's is resolved once its own alerts are ("its alerts
resolved"), and the incident is ranked again on what still fires, naming the GPU. A cause the
new top cause explains (stored with the ranking, ``manager.EXPLAINS``: the pod on the failing GPU,
the GPU on the host that went down) is a symptom of one fault and is withdrawn ("root cause
changed"), so that one fault keeps one page.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from serving_helpers import NOTIFY_AM, NOTIFY_HOOK, NotifyPosts, notify_settings, webhook

from fleetmind.serving.app import create_app
from fleetmind.serving.incidents.manager import live_ranking
from fleetmind.serving.notify import Notifier

ROOT = Path(__file__).resolve().parents[1]
GPU, HOST, POD = "c0/gpu/c0-h1/1", "c0/host/c0-h2", "c0/pod/s2-1"
ALERTS = NOTIFY_AM + "/api/v2/alerts"


def _storm(name: str, shift_s: float = 0.0) -> list[dict[str, Any]]:
    """The alerts of example storm ``name``, their starts moved ``shift_s`` seconds later."""
    out = []
    for a in json.loads((ROOT / "examples" / f"{name}.json").read_text())["alerts"]:
        t = datetime.fromisoformat(a["startsAt"].replace("Z", "+00:00")) + timedelta(
            seconds=shift_s
        )
        out.append({**a, "startsAt": t.isoformat().replace("+00:00", "Z")})
    return out


def _resolved(alerts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**a, "status": "resolved", "endsAt": "2026-12-01T09:30:00Z"} for a in alerts]


class _Clock:
    def __init__(self) -> None:
        self.t = 1_800_000_000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    # the served default model (the released GAT): the one that splits the two faults' score
    with TestClient(create_app(notify_settings(tmp_path, rca_model=None))) as c:
        yield c


class _Run:
    """Deliver alerts, group and rank them, and let the notifier settle and send."""

    def __init__(self, c: TestClient) -> None:
        self.c, self.posts, self.clock = c, NotifyPosts(), _Clock()
        svc = c.app.state.services
        self.n = Notifier(
            svc.db, svc.settings, clock=self.clock, transport=httpx.MockTransport(self.posts)
        )

    def deliver(self, alerts: list[dict[str, Any]]) -> None:
        self.posts.calls.clear()
        assert self.c.post("/api/v1/alerts", json=webhook(alerts)).status_code == 200
        self.c.app.state.services.incidents.process_pending()
        self.n.poll()
        self.clock.t += self.c.app.state.services.settings.notify_settle_s + 1
        self.n.poll()

    def alerts(self) -> list[tuple[str, str, str | None]]:
        """(cause node, severity, resolved_because or None while firing) of each alert posted."""
        return [
            (
                a["labels"]["cause_node"],
                a["labels"]["severity"],
                a["annotations"].get("resolved_because") if a.get("endsAt") else None,
            )
            for body in self.posts.to(ALERTS)
            for a in body
        ]

    def chat(self) -> list[str]:
        return [m["text"] for m in self.posts.to(NOTIFY_HOOK)]

    def top(self) -> str:
        (inc,) = self.c.get("/api/v1/incidents").json()
        return inc["causes"][0]["node"]


def test_a_second_fault_leaves_the_first_paged_and_it_is_named_again(client: TestClient) -> None:
    run = _Run(client)
    run.deliver(_storm("storm-gpu-xid"))
    assert run.alerts() == [(GPU, "critical", None)]

    run.deliver(_storm("storm-host-down", 180))
    assert run.top() == HOST  # the single-root ranking now puts the host first
    sent = run.alerts()
    assert (GPU, "critical", None) in sent  # not withdrawn, its severity as it was
    assert all(s[2] is None for s in sent) and {s[0] for s in sent} == {GPU, HOST}
    (chat,) = run.chat()
    assert "A further root cause" in chat and "withdrawn" not in chat and GPU in chat

    run.deliver(_resolved(_storm("storm-host-down", 180)))  # the host recovers, the GPU not
    assert run.top() == GPU  # ranked again on what still fires
    sent = run.alerts()
    assert (HOST, sent[0][1], "its alerts resolved") == sent[0]
    assert (GPU, "critical", None) in sent[1:]
    (chat,) = run.chat()  # the GPU's own message went out when it was first sent
    assert "cleared: its alerts resolved" in chat and HOST in chat and "withdrawn" not in chat

    run.posts.calls.clear()
    run.clock.t += client.app.state.services.settings.notify_resend_s + 1
    run.n.poll()
    assert run.alerts() == [(GPU, "critical", None)]  # the healthy host is not re-sent


def test_the_incident_closing_resolves_every_cause_it_sent(client: TestClient) -> None:
    run = _Run(client)
    run.deliver(_storm("storm-gpu-xid"))
    run.deliver(_storm("storm-host-down", 180))
    run.deliver(_resolved(_storm("storm-gpu-xid") + _storm("storm-host-down", 180)))
    assert sorted(run.alerts()) == sorted(
        [(GPU, "critical", "incident closed"), (HOST, "warning", "incident closed")]
    )
    run.posts.calls.clear()
    run.clock.t += client.app.state.services.settings.notify_resend_s + 1
    run.n.poll()
    assert run.alerts() == []


def test_a_cause_with_no_alert_of_its_own_is_withdrawn(client: TestClient) -> None:
    """A top cause the model inferred (no alert maps to its node) is withdrawn when the ranking
    names another: nothing of its own still fires."""
    run = _Run(client)
    run.deliver(_storm("storm-gpu-xid"))
    db = client.app.state.services.db
    (inc,) = client.get("/api/v1/incidents").json()
    real = inc["causes"]
    inferred = [{**real[0], "node": "global/config", "kind": "config"}, *real[1:]]
    db.set_incident_rca(inc["id"], inferred, inc["method"], inc["model_version"])
    run.deliver([])
    db.set_incident_rca(inc["id"], real, inc["method"], inc["model_version"])
    run.deliver([])
    sent = run.alerts()
    assert (sent[0][0], sent[0][2]) == ("global/config", "root cause changed")
    assert (GPU, "critical", None) in sent[1:]  # kept beside it all along, firing on
    assert "withdrawn" in run.chat()[0]


@pytest.mark.parametrize(
    ("causes", "firing", "expected"),
    [
        ([(HOST, 0.587), (GPU, 0.41)], {GPU}, True),  # the host recovered, the GPU fires
        ([(HOST, 0.587), (GPU, 0.41)], {HOST, GPU}, False),  # the top still fires
        ([(GPU, 0.999), ("c0/host/c0-h1", 0.001), ("c0/pod/s2-1", 0.0)], {"c0/pod/s2-1"}, False),
        ([(HOST, 0.587), (GPU, 0.41)], set(), False),  # nothing fires: the incident closes
        # the top recovered and only a cause it explains (its symptom) still fires
        ([(GPU, 0.6, [POD]), (POD, 0.3)], {POD}, False),
        ([(GPU, 0.6, []), (POD, 0.3)], {POD}, True),
    ],
)
def test_which_resolutions_rank_again(
    causes: list[tuple[Any, ...]], firing: set[str], expected: bool
) -> None:
    """The XID storm recovering root first (third case: only what it broke still fires, ranked
    near 0) is not ranked again (``test_incident_evidence``); a second fault outliving the first
    is."""
    ranked = [
        {"node": c[0], "score": c[1], "explains": c[2] if len(c) > 2 else None} for c in causes
    ]
    assert live_ranking(ranked, firing) is expected


XID_SERVICES = ["ServiceErrorRateHigh", "ServiceLatencyHigh"]
XID_PODS = ["ModelServerEngineDead", "KubePodCrashLooping"]
XID_GPU = ["GPUXidError", "GPUFallenOffBus"]


def _named(storm: str, names: list[str]) -> list[dict[str, Any]]:
    return [a for a in _storm(storm) if a["labels"]["alertname"] in names]


def _stored_top(c: TestClient) -> dict[str, Any]:
    (inc,) = c.get("/api/v1/incidents").json()
    return c.app.state.services.db.get_incident(inc["id"])["causes"][0]


def test_a_symptom_paged_before_its_root_is_withdrawn_when_the_root_is_named(
    client: TestClient,
) -> None:
    """One fault, its alerts arriving symptoms first (the XID storm: Services, then the pods,
    then the GPU's XID): the crashing pod is paged while it is all the model sees, and withdrawn
    ("root cause changed") when the GPU it runs on takes the top: never two pages at once."""
    run = _Run(client)
    run.deliver(_named("storm-gpu-xid", XID_SERVICES))
    run.deliver(_named("storm-gpu-xid", XID_PODS))
    assert run.top() == POD and (POD, "critical", None) in run.alerts()
    run.deliver(_named("storm-gpu-xid", XID_GPU))
    assert run.top() == GPU
    assert POD in _stored_top(client)["explains"]  # the pod runs on the GPU
    sent = run.alerts()
    assert (POD, "critical", "root cause changed") in sent
    assert [s for s in sent if s[2] is None] == [(GPU, "critical", None)]
    assert not any("A further root cause" in m for m in run.chat())
    run.posts.calls.clear()
    run.clock.t += client.app.state.services.settings.notify_resend_s + 1
    run.n.poll()
    assert run.alerts() == [(GPU, "critical", None)]  # the pod is not re-sent


def test_a_gpu_paged_before_its_host_went_down_is_withdrawn(client: TestClient) -> None:
    """The host-down storm with the GPU's missing metrics first: the GPU is paged (warning),
    then the host NotReady explains it: the GPU's alert is withdrawn, the host's is critical."""
    run = _Run(client)
    run.deliver(_named("storm-host-down", ["GPUMetricsAbsent"]))
    assert run.alerts() == [("c0/gpu/c0-h2/0", "warning", None)]
    run.deliver(_named("storm-host-down", ["KubeNodeNotReady", "KubeNodeUnreachable"]))
    assert run.top() == HOST and "c0/gpu/c0-h2/0" in _stored_top(client)["explains"]
    assert sorted(run.alerts()) == [
        ("c0/gpu/c0-h2/0", "warning", "root cause changed"),
        (HOST, "critical", None),
    ]


def test_a_ranking_stored_without_what_it_explains_keeps_the_earlier_cause(
    client: TestClient,
) -> None:
    """Causes ranked before the top cause carried ``explains`` (an older replica's ranking)
    explain nothing to the notifier: the earlier cause whose alerts fire stays paged beside the
    new one rather than being withdrawn while it may be a second fault."""
    run = _Run(client)
    run.deliver(_named("storm-gpu-xid", XID_PODS))
    assert run.alerts() == [(POD, "critical", None)]
    db = client.app.state.services.db
    run.posts.calls.clear()
    assert (
        client.post("/api/v1/alerts", json=webhook(_named("storm-gpu-xid", XID_GPU))).status_code
        == 200
    )
    client.app.state.services.incidents.process_pending()
    (inc,) = client.get("/api/v1/incidents").json()
    causes = db.get_incident(inc["id"])["causes"]
    assert causes[0]["node"] == GPU and POD in causes[0].pop("explains")
    db.set_incident_rca(inc["id"], causes, inc["method"], inc["model_version"])
    run.n.poll()
    run.clock.t += client.app.state.services.settings.notify_settle_s + 1
    run.n.poll()
    assert sorted(run.alerts()) == sorted([(POD, "critical", None), (GPU, "critical", None)])


def test_a_kept_cause_the_new_top_explains_is_withdrawn(client: TestClient) -> None:
    """Both faults paged (the GPU kept beside the host); a ranking then names the cluster, which
    both depend on: the host's alert and the kept GPU's are withdrawn ("root cause changed")."""
    run = _Run(client)
    run.deliver(_storm("storm-gpu-xid"))
    run.deliver(_storm("storm-host-down", 180))
    assert GPU not in _stored_top(client)["explains"]  # the host does not explain the GPU
    db = client.app.state.services.db
    (inc,) = client.get("/api/v1/incidents").json()
    causes = db.get_incident(inc["id"])["causes"]
    cluster = {**causes[0], "node": "c0", "kind": "cluster", "path": ["c0"]}
    cluster["explains"] = [HOST, GPU, POD]
    db.set_incident_rca(inc["id"], [cluster, *causes], inc["method"], inc["model_version"])
    run.deliver([])
    sent = run.alerts()
    assert sorted(s for s in sent if s[2] is not None) == sorted(
        [(HOST, "warning", "root cause changed"), (GPU, "critical", "root cause changed")]
    )
    assert [s[0] for s in sent if s[2] is None] == ["c0"]


def test_a_top_cause_too_unsure_to_page_withdraws_no_page(client: TestClient) -> None:
    """The crashing pod is paged critical; a ranking then puts its GPU first but below the warning
    floor (score 0.2), listing the pod among what it explains. A cause that pages no one cannot
    supersede one that does: the pod's alert fires on (it was resolved "score below the floor",
    and nothing paged while its alerts fired) and is re-sent."""
    run = _Run(client)
    run.deliver(_named("storm-gpu-xid", XID_PODS))
    assert run.alerts() == [(POD, "critical", None)]
    db = client.app.state.services.db
    (inc,) = client.get("/api/v1/incidents").json()
    causes = db.get_incident(inc["id"])["causes"]
    gpu = {**causes[0], "node": GPU, "kind": "gpu", "path": [GPU, POD], "score": 0.2}
    gpu["explains"] = [POD]
    db.set_incident_rca(inc["id"], [gpu, *causes], inc["method"], inc["model_version"])
    sent = []
    for _ in range(2):  # each delivery clears the posts recorded before it
        run.deliver([])
        sent += run.alerts()
    assert all(s[2] is None for s in sent), sent  # nothing resolved
    run.posts.calls.clear()
    run.clock.t += client.app.state.services.settings.notify_resend_s + 1
    run.n.poll()
    assert run.alerts() == [(POD, "critical", None)]


def _gpu_alert(alertname: str, gpu: str, xid: str) -> dict[str, Any]:
    """A GPU alert as ``examples/storm-gpu-xid.json`` writes its ``GPUXidError`` (labels
    ``cluster``, ``node``, ``gpu``, ``xid``; DCGM's XID 48 is a double-bit ECC error), on host
    c0-h1's GPU ``gpu``."""
    (xid_alert,) = _named("storm-gpu-xid", ["GPUXidError"])
    labels = {**xid_alert["labels"], "alertname": alertname, "gpu": gpu, "xid": xid}
    return {**xid_alert, "labels": labels, "fingerprint": f"00000000000000{gpu}f"}


def test_a_fault_on_a_peer_gpu_of_the_same_host_is_no_symptom(client: TestClient) -> None:
    """A double-bit error on GPU 3 of host c0-h1 is paged critical; then the XID storm fails GPU
    1 of the same host and takes the top. The host's NVLink node joins both GPUs, but a GPU does
    not explain its peers through it: GPU 3's page fires on beside GPU 1's (it was withdrawn,
    "root cause changed", while its double-bit error fired)."""
    graph = client.app.state.services.incidents.graphs.graph
    link = "c0/link/c0-h1/nvlink"
    assert link in graph.index  # the served graph holds the host's NVLink node
    peer = "c0/gpu/c0-h1/3"
    run = _Run(client)
    run.deliver([_gpu_alert("GPUDoubleBitError", "3", "48")])
    assert run.alerts() == [(peer, "critical", None)]
    run.deliver(_named("storm-gpu-xid", XID_GPU))
    assert run.top() == GPU and peer not in _stored_top(client)["explains"]
    sent = run.alerts()
    assert (peer, "critical", None) in sent and (GPU, "critical", None) in sent
    assert all(s[2] is None for s in sent)
