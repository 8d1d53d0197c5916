"""Unit tests of the service through TestClient (SQLite in tmp_path, sim telemetry, baseline RCA)."""

from __future__ import annotations

import json
import threading
import typing
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from serving_helpers import alert, webhook

from fleetmind.data.graph import DependencyGraph
from fleetmind.rca.base import BaseAnalyzer, RankedCause, RCAResult
from fleetmind.serving.app import create_app
from fleetmind.serving.defaults.example import build_example_graph
from fleetmind.serving.deps import Services, get_registry
from fleetmind.serving.health import HealthService
from fleetmind.serving.registry import LoadedModel, ModelRegistry, ModelSet
from fleetmind.serving.scheduler.extender import ExtenderState
from fleetmind.serving.settings import Settings, get_settings

GPU_ALERT = {"alertname": "GpuXidError", "cluster": "c0", "node": "c0-h1", "gpu": "3"}
HOST_ALERT = {"alertname": "HostDown", "cluster": "c0", "node": "c0-h1"}
FAR_ALERT = {"alertname": "HostDown", "cluster": "c1", "node": "c1-h2"}


def make_settings(tmp_path: Path, **kw: object) -> Settings:
    base = {
        "database_url": f"sqlite:///{tmp_path}/fm.db",
        "rca_model": "baseline:upstream-coverage",
        "placement_model": "heuristic:builtin-bestfit",
        "incident_worker": False,
    }
    base.update(kw)
    return Settings(**base)


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(create_app(make_settings(tmp_path))) as c:
        yield c


def services(c: TestClient):  # noqa: ANN201
    return c.app.state.services


def process(c: TestClient) -> None:
    while services(c).incidents.process_pending() > 0:
        pass


# ----------------------------------------------------------------------------------------- ingestion
def test_webhook_stores_alerts_and_ignores_unknown_keys(client: TestClient) -> None:
    body = webhook(
        [alert(GPU_ALERT, fingerprint="a1", someNewField=1), alert(HOST_ALERT)],
        notification_reason="new_alerts",
        routeLabels={"team": "infra"},
    )
    r = client.post("/api/v1/alerts", json=body)
    assert r.status_code == 200, r.text
    assert r.json() == {
        "accepted": 2,
        "firing": 2,
        "resolved": 0,
        "rejected": [],
        "rejected_count": 0,
        "truncated": 0,
    }
    stored = client.get("/api/v1/alerts").json()
    assert {a["labels"]["alertname"] for a in stored} == {"GpuXidError", "HostDown"}
    assert {a["fingerprint"] for a in stored} >= {"a1"}


def test_webhook_is_idempotent_and_resolved_closes_out(client: TestClient) -> None:
    a = alert(GPU_ALERT, fingerprint="fp1")
    for _ in range(3):
        assert client.post("/api/v1/alerts", json=webhook([a, a])).status_code == 200
    assert len(client.get("/api/v1/alerts").json()) == 1
    process(client)
    (inc,) = client.get("/api/v1/incidents").json()
    assert inc["firing_count"] == 1

    done = alert(GPU_ALERT, fingerprint="fp1", status="resolved")
    assert client.post("/api/v1/alerts", json=webhook([done], status="resolved")).status_code == 200
    (stored,) = client.get("/api/v1/alerts").json()
    assert stored["status"] == "resolved" and stored["endsAt"] is not None
    process(client)
    assert client.get("/api/v1/incidents").json() == []
    (closed,) = client.get("/api/v1/incidents", params={"status": "resolved"}).json()
    assert closed["id"] == inc["id"] and closed["closed_at"] is not None


def test_same_fingerprint_new_start_is_a_new_alert(client: TestClient) -> None:
    a1 = alert(GPU_ALERT, fingerprint="fp", starts="2026-01-01T00:00:00Z")
    a2 = alert(GPU_ALERT, fingerprint="fp", starts="2026-01-01T02:00:00Z")
    client.post("/api/v1/alerts", json=webhook([a1, a2]))
    assert len(client.get("/api/v1/alerts").json()) == 2


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"alerts": "nope"},
        {"alerts": [{"labels": "x"}]},
        {"alerts": [{"labels": {"a": 1}}]},
        {"alerts": [{"labels": {"a": "b"}, "status": "weird"}]},
        {"alerts": [{"labels": {"a": "b\u0000c"}}]},
        {"alerts": [{"labels": {"a": "b"}, "startsAt": "yesterday"}]},
        {"alerts": [{"labels": {"a": "b"}, "startsAt": "0001-01-01T00:00:00+05:00"}]},
        [],
    ],
)
def test_malformed_webhooks_get_422(client: TestClient, body: object) -> None:
    r = client.post("/api/v1/alerts", json=body)
    assert r.status_code == 422, r.text
    assert client.get("/api/v1/alerts").json() == []


def test_one_bad_alert_does_not_cost_the_others(client: TestClient) -> None:
    """Alertmanager does not retry a 4xx: the valid alerts of a webhook are stored, the invalid
    ones are left out and named (index, field, reason), and counted in /metrics."""
    good = [alert(GPU_ALERT, fingerprint="g1"), alert(HOST_ALERT, fingerprint="g2")]
    bad_status = {"labels": {"alertname": "X"}, "status": "weird"}
    bad_label = {"labels": {"alertname": "Y", "": "empty name"}}  # (long values are clipped)
    r = client.post("/api/v1/alerts", json=webhook([good[0], bad_status, good[1], bad_label]))
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["accepted"] == 2 and out["firing"] == 2 and out["rejected_count"] == 2
    assert [x["index"] for x in out["rejected"]] == [1, 3]
    first = out["rejected"][0]["errors"][0]
    assert first["loc"] == ["body", "alerts", 1, "status"] and "firing" in first["msg"]
    assert out["rejected"][1]["errors"][0]["loc"][:5] == ["body", "alerts", 3, "labels", ""]
    stored = client.get("/api/v1/alerts").json()
    assert sorted(a["fingerprint"] for a in stored) == ["g1", "g2"]
    assert "fleetmind_alerts_rejected_total 2.0" in client.get("/metrics").text
    # a validator's error (its context holds an exception object) is reported, not a 500
    late = {"labels": {"a": "b"}, "startsAt": "0001-01-01T00:00:00+05:00"}
    r = client.post("/api/v1/alerts", json=webhook([alert(HOST_ALERT, fingerprint="g2"), late]))
    assert r.status_code == 200, r.text
    (rej,) = r.json()["rejected"]
    assert rej["index"] == 1 and rej["errors"][0]["loc"] == ["body", "alerts", 1, "startsAt"]
    assert set(rej["errors"][0]) == {"type", "loc", "msg"}  # no echoed input or context
    # alerts that are not objects at all are left out the same way
    r = client.post("/api/v1/alerts", json=webhook([1, alert(GPU_ALERT, fingerprint="g3"), None]))
    assert r.status_code == 200 and r.json()["accepted"] == 1
    assert [x["index"] for x in r.json()["rejected"]] == [0, 2]
    # a bad envelope still rejects the whole webhook, and stores nothing
    r = client.post("/api/v1/alerts", json={**webhook([good[0]]), "alerts": {"0": good[0]}})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "alerts"]
    assert len(client.get("/api/v1/alerts").json()) == 3


def test_not_json_gets_4xx(client: TestClient) -> None:
    r = client.post(
        "/api/v1/alerts", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert 400 <= r.status_code < 500


def test_body_size_limit(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, max_body_bytes=2048, max_webhook_bytes=2048)
    with TestClient(create_app(settings)) as c:
        big = webhook([alert({"alertname": "x", "junk": "y" * 4000})])
        r = c.post("/api/v1/alerts", json=big)
        assert r.status_code == 413
        assert "2048" in r.json()["detail"]

        def chunks():  # no content-length: the limit applies while streaming
            yield b'{"alerts": [], "pad": "'
            yield b"z" * 4096
            yield b'"}'

        r = c.post("/api/v1/alerts", content=chunks(), headers={"content-type": "application/json"})
        assert r.status_code == 413


def test_default_limits_take_the_largest_webhook(tmp_path: Path) -> None:
    """10,000 alerts (the most a webhook may carry, Alertmanager's ``max_alerts`` in
    deploy/alertmanager.yml) of realistic size fit the default body limit and are all stored."""
    from fleetmind.serving.settings import Settings as S

    ann = {"summary": "GPU XID 79 on node " + "n" * 40, "description": "d" * 600}
    alerts = [
        alert(
            {"alertname": "GpuXidError", "cluster": "c0", "node": f"c0-h{i}", "gpu": str(i % 8)},
            fingerprint=f"f{i:05d}",
            annotations=ann,
            generatorURL="http://prometheus:9090/graph?g0.expr=" + "x" * 200,
        )
        for i in range(10_000)
    ]
    body = webhook(alerts)
    size = len(json.dumps(body))
    assert 10_000_000 < size < S.model_fields["max_body_bytes"].default
    with TestClient(create_app(make_settings(tmp_path))) as c:
        r = c.post("/api/v1/alerts", json=body)
        assert r.status_code == 200, r.text[:300]
        assert r.json()["accepted"] == 10_000
        # no count cap (Alertmanager's max_alerts defaults to 0, no limit): one more is stored too
        r = c.post("/api/v1/alerts", json=webhook(alerts + [alert({"alertname": "one-more"})]))
        assert r.status_code == 200 and r.json()["accepted"] == 10_001


def test_bearer_token(tmp_path: Path) -> None:
    with TestClient(create_app(make_settings(tmp_path, api_token="s3cret"))) as c:
        body = webhook([alert(GPU_ALERT)])
        assert c.post("/api/v1/alerts", json=body).status_code == 401
        bad = {"Authorization": "Bearer nope"}
        assert c.post("/api/v1/alerts", json=body, headers=bad).status_code == 401
        assert c.get("/api/v1/incidents").status_code == 401
        ok = {"Authorization": "Bearer s3cret"}
        assert c.post("/api/v1/alerts", json=body, headers=ok).status_code == 200
        assert c.get("/api/v1/alerts", headers=ok).status_code == 200
        # health and metrics stay open for probes and scrapers
        assert c.get("/healthz").status_code == 200
        assert c.get("/metrics").status_code == 200


def test_settings_override_through_dependency(tmp_path: Path) -> None:
    app = create_app(make_settings(tmp_path))
    app.dependency_overrides[get_settings] = lambda: make_settings(tmp_path, api_token="t")
    with TestClient(app) as c:
        assert c.get("/api/v1/alerts").status_code == 401


# ----------------------------------------------------------------------------------------- incidents
def test_grouping_by_graph_and_time(client: TestClient) -> None:
    body = webhook(
        [
            alert(GPU_ALERT, starts="2026-01-01T00:00:00Z"),
            alert(HOST_ALERT, starts="2026-01-01T00:01:00Z"),  # GPU's host: 1 hop
            alert(FAR_ALERT, starts="2026-01-01T00:01:00Z"),  # other cluster
            alert(HOST_ALERT, starts="2026-01-02T00:00:00Z", fingerprint="later"),  # a day later
        ]
    )
    client.post("/api/v1/alerts", json=body)
    process(client)
    incs = client.get("/api/v1/incidents").json()
    assert sorted(i["alert_count"] for i in incs) == [1, 1, 2]
    pair = next(i for i in incs if i["alert_count"] == 2)
    assert set(pair["nodes"]) == {"c0/gpu/c0-h1/3", "c0/host/c0-h1"}
    assert pair["causes"], "each incident update re-runs the RCA"
    top = pair["causes"][0]
    assert top["node"] in pair["nodes"] or top["path"][-1] in pair["nodes"]
    for c in pair["causes"]:
        assert c["path"][0] == c["node"]
    detail = client.get(f"/api/v1/incidents/{pair['id']}").json()
    assert len(detail["alerts"]) == 2 and all(a["node"] for a in detail["alerts"])


def test_bridging_alert_merges_incidents(client: TestClient) -> None:
    g = {"alertname": "GpuDown", "cluster": "c0", "node": "c0-h0", "gpu": "0"}
    g2 = {"alertname": "GpuDown", "cluster": "c0", "node": "c0-h0", "gpu": "7"}
    # gpu0 and gpu7 of one host are 2 hops apart via the host and via the NVLink node -> with
    # hops=2 they join; make them 3+ hops apart by using hops=1 in a fresh manager
    inc = services(client).incidents
    inc.hops = 1
    client.post("/api/v1/alerts", json=webhook([alert(g), alert(g2)]))
    process(client)
    assert len(client.get("/api/v1/incidents").json()) == 2
    host = {"alertname": "HostDown", "cluster": "c0", "node": "c0-h0"}
    client.post("/api/v1/alerts", json=webhook([alert(host)]))
    process(client)
    (merged,) = client.get("/api/v1/incidents").json()
    assert merged["alert_count"] == 3
    gone = client.get("/api/v1/incidents", params={"status": "merged"}).json()
    assert len(gone) == 1 and gone[0]["merged_into"] == merged["id"]


def test_a_merge_within_one_webhook_moves_every_alert(client: TestClient) -> None:
    """Two incidents opened and merged by alerts of the same webhook (one grouping batch): the
    alerts grouped before the merge were written back to the merged-away incident, which the
    survivor's count, ranking and page then left out."""
    g = {"alertname": "GpuDown", "cluster": "c0", "node": "c0-h0", "gpu": "0"}
    g2 = {"alertname": "GpuDown", "cluster": "c0", "node": "c0-h0", "gpu": "7"}
    host = {"alertname": "HostDown", "cluster": "c0", "node": "c0-h0"}
    services(client).incidents.hops = 1  # gpu0 and gpu7 3+ hops apart: two incidents, then one
    client.post("/api/v1/alerts", json=webhook([alert(g), alert(g2), alert(host)]))
    process(client)
    (merged,) = client.get("/api/v1/incidents").json()
    assert merged["alert_count"] == 3
    stored = client.get("/api/v1/alerts").json()
    assert {a["incident_id"] for a in stored} == {merged["id"]}


def test_a_cluster_level_alert_does_not_join_unrelated_incidents(client: TestClient) -> None:
    """kube-prometheus' KubeCPUOvercommit (``by (cluster)``) maps to the cluster node, which was in
    every member's neighbourhood: with it, a GPU fault on one host and a host fault on another
    became one incident, ranked as one."""
    overcommit = {"alertname": "KubeCPUOvercommit", "severity": "warning", "cluster": "c0"}
    gpu = {"alertname": "GpuXidError", "cluster": "c0", "node": "c0-h0", "gpu": "3"}
    far = {"alertname": "HostDown", "cluster": "c0", "node": "c0-h3"}
    for labels in (overcommit, gpu, far):
        client.post("/api/v1/alerts", json=webhook([alert(labels)]))
        process(client)
    incs = client.get("/api/v1/incidents").json()
    assert sorted(i["alert_count"] for i in incs) == [1, 1, 1]
    assert ["c0"] in [i["nodes"] for i in incs]


def test_unknown_incident_is_404(client: TestClient) -> None:
    r = client.get("/api/v1/incidents/999")
    assert r.status_code == 404 and "999" in r.json()["detail"]


def test_worker_thread_groups_in_background(tmp_path: Path) -> None:
    from serving_helpers import wait_for

    with TestClient(create_app(make_settings(tmp_path, incident_worker=True))) as c:
        c.post("/api/v1/alerts", json=webhook([alert(GPU_ALERT)]))
        incs = wait_for(lambda: [i for i in c.get("/api/v1/incidents").json() if i["causes"]])
        assert incs and incs[0]["method"] == "upstream-coverage"


# ----------------------------------------------------------------------------------------- rca
def test_rca_on_served_and_given_graph(client: TestClient) -> None:
    alerts = [alert(GPU_ALERT), alert(HOST_ALERT)]
    r = client.post("/api/v1/rca", json={"alerts": alerts, "top_k": 3})
    assert r.status_code == 200, r.text
    out = r.json()
    assert len(out["causes"]) == 3 and out["mapped_alerts"] == 2
    assert out["graph"] == "fleetmind-example" and out["method"] == "upstream-coverage"
    scores = [c["score"] for c in out["causes"]]
    assert scores == sorted(scores, reverse=True)

    tiny = build_example_graph(clusters=1, hosts=2, gpus=2, services=1, pods=1, name="tiny")
    stray = alert({"alertname": "X", "cluster": "c9", "node": "c9-h0"})
    r = client.post("/api/v1/rca", json={"alerts": [*alerts, stray], "graph": tiny.to_json()})
    assert r.status_code == 200 and r.json()["graph"] == "tiny"
    assert r.json()["mapped_alerts"] == 2  # no node of the tiny graph matches cluster c9


def test_rca_rejects_inconsistent_graph(client: TestClient) -> None:
    bad = {
        "name": "x",
        "nodes": [{"id": "a", "kind": "host"}],
        "edges": [{"src": "a", "dst": "b", "kind": "calls"}],
    }
    r = client.post("/api/v1/rca", json={"alerts": [alert(GPU_ALERT)], "graph": bad})
    assert r.status_code == 422 and "'b'" in r.json()["detail"]


class _FixedAnalyzer(BaseAnalyzer):
    name = "fixed"

    def find_root_causes(self, graph, alerts, top_k=None):  # noqa: ANN001, ANN201
        return RCAResult(
            [RankedCause("global/dns", "dns", None, 9.0, "dns_outage", ("global/dns",))],
            "fixed",
            "v7",
        )


def test_registry_injected_through_dependency_override(tmp_path: Path) -> None:
    app = create_app(make_settings(tmp_path))
    reg = ModelRegistry()
    place = LoadedModel("placement", None, "none", None, None, None, 0.0)
    reg.set_current(
        ModelSet(LoadedModel("rca", _FixedAnalyzer(), "fixed", "v7", "test", None, 0.0), place, 1)
    )
    app.dependency_overrides[get_registry] = lambda: reg
    with TestClient(app) as c:
        out = c.post("/api/v1/rca", json={"alerts": [alert(GPU_ALERT)]}).json()
        assert out["causes"][0]["fault_type"] == "dns_outage" and out["model_version"] == "v7"


# ----------------------------------------------------------------------------------------- graph
def test_graph_get_and_replace(client: TestClient) -> None:
    g = client.get("/api/v1/graph").json()
    assert DependencyGraph.from_json(g).num_nodes == len(g["nodes"]) > 50
    tiny = build_example_graph(clusters=1, hosts=1, gpus=2, services=1, pods=1, name="tiny")
    r = client.put("/api/v1/graph", json=tiny.to_json())
    assert r.status_code == 200 and r.json()["num_nodes"] == tiny.num_nodes
    assert client.get("/api/v1/graph").json()["name"] == "tiny"
    r = client.put(
        "/api/v1/graph",
        json={"name": "bad", "nodes": [{"id": "a", "kind": "spaceship"}], "edges": []},
    )
    assert r.status_code == 422
    dup = {
        "name": "d",
        "nodes": [{"id": "a", "kind": "host"}, {"id": "a", "kind": "gpu"}],
        "edges": [],
    }
    r = client.put("/api/v1/graph", json=dup)
    assert r.status_code == 422 and "duplicate" in r.json()["detail"]
    assert client.get("/api/v1/graph").json()["name"] == "tiny"


# ----------------------------------------------------------------------------------------- placement
def test_placement_reserves_until_full(client: TestClient) -> None:
    fleet = client.get("/api/v1/fleet").json()
    assert fleet["source"] == "sim" and fleet["num_gpus"] == 64
    seen = set()
    for _ in range(8):  # 8 hosts x 8 GPUs: eight 8-GPU jobs fill the fleet
        r = client.post("/api/v1/placements", json={"num_gpu": 8, "reserve": True})
        assert r.status_code == 200, r.text
        p = r.json()
        assert p["gpus"] == list(range(8)) and p["policy"] == "builtin-bestfit"
        seen.add((p["cluster"], p["node"]))
    assert len(seen) == 8
    r = client.post("/api/v1/placements", json={"num_gpu": 1})
    assert r.status_code == 409 and "no node" in r.json()["detail"]
    assert r.json()["detail"].endswith(
        "not enough free GPU: 0 milli free on healthy GPUs, the job needs 1000 "
        "(the rest held for pods FleetMind placed, not yet seen bound)"
    )
    fleet = client.get("/api/v1/fleet").json()
    assert all(g["free_milli"] == 0 for n in fleet["nodes"] for g in n["gpus"])


def test_placement_packs_shared_gpus_and_filters(client: TestClient) -> None:
    a = client.post(
        "/api/v1/placements", json={"num_gpu": 1, "gpu_milli": 300, "reserve": True}
    ).json()
    b = client.post(
        "/api/v1/placements", json={"num_gpu": 1, "gpu_milli": 500, "reserve": True}
    ).json()
    assert (a["node"], a["gpus"]) == (b["node"], b["gpus"])  # best fit packs the shared GPU
    c1 = client.post(
        "/api/v1/placements", json={"num_gpu": 2, "cluster": "c1", "alternatives": 2}
    ).json()
    assert c1["cluster"] == "c1" and all(o["cluster"] == "c1" for o in c1["alternatives"])
    assert len(c1["alternatives"]) == 2
    h = client.post("/api/v1/placements", json={"num_gpu": 1, "gpu_model": "H100"}).json()
    assert h["cluster"] == "c1"  # the example graph puts H100s in odd clusters
    tpu = client.post("/api/v1/placements", json={"num_gpu": 1, "gpu_model": "TPU"})
    assert tpu.status_code == 409 and "no GPU model matches 'TPU'" in tpu.json()["detail"]
    assert (
        client.post("/api/v1/placements", json={"num_gpu": 2, "gpu_milli": 500}).status_code == 422
    )
    assert client.post("/api/v1/placements", json={"num_gpu": -1}).status_code == 422


def test_placement_fallback_is_reported(tmp_path: Path) -> None:
    with TestClient(create_app(make_settings(tmp_path, placement_model=None))) as c:
        p = c.post("/api/v1/placements", json={"num_gpu": 1}).json()
        models = c.get("/api/v1/models").json()
        if models["placement"]["fallback_reason"]:
            assert p["fallback_reason"] == models["placement"]["fallback_reason"]
            assert p["policy"] == models["placement"]["method"] != "ppo"


# ----------------------------------------------------------------------------------------- models, health
def test_models_and_reload(client: TestClient) -> None:
    m = client.get("/api/v1/models").json()
    assert m["generation"] == 1 and m["rca"]["method"] == "upstream-coverage"
    r = client.post("/api/v1/models/reload")
    assert r.status_code == 200 and r.json()["generation"] == 2


def test_reload_under_load_never_fails_a_request(client: TestClient) -> None:
    errors: list[str] = []
    stop = threading.Event()
    body = {"alerts": [alert(GPU_ALERT), alert(HOST_ALERT)]}

    def hammer() -> None:
        while not stop.is_set():
            r = client.post("/api/v1/rca", json=body)
            if r.status_code != 200:
                errors.append(r.text)

    threads = [threading.Thread(target=hammer) for _ in range(3)]
    for t in threads:
        t.start()
    gens = [client.post("/api/v1/models/reload").json()["generation"] for _ in range(10)]
    stop.set()
    for t in threads:
        t.join()
    assert errors == [] and gens == list(range(2, 12))


def test_health_ready_metrics(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz").json()
    assert ready["status"] == "ready" and ready["telemetry"] == "sim"
    client.post("/api/v1/alerts", json=webhook([alert(GPU_ALERT)]))
    client.post("/api/v1/rca", json={"alerts": [alert(GPU_ALERT)]})
    process(client)
    text = client.get("/metrics").text
    assert 'fleetmind_alerts_ingested_total{status="firing"} 1.0' in text
    assert (
        'fleetmind_http_request_duration_seconds_count{method="POST",route="/api/v1/rca",status="200"} 1.0'
        in text
    )
    assert "fleetmind_open_incidents 1.0" in text
    assert (
        'fleetmind_model_info{fallback="false",kind="rca",method="upstream-coverage",version=""} 1.0'
        in text
    )


def test_grouping_lag_and_grouped_alerts_in_metrics(client: TestClient) -> None:
    """The incident worker reports how many alerts it grouped and how stale its last batch was:
    an alert stored two minutes before it is grouped reads as a lag of two minutes or more, and
    the lag drops to 0 once nothing is pending."""
    import re
    import time

    from fleetmind.serving.routers.alerts import alert_row
    from fleetmind.serving.schemas import AlertIn

    def gauge(text: str, name: str) -> float:
        m = re.search(rf"^{name} (\S+)$", text, re.M)
        assert m is not None, name
        return float(m.group(1))

    svc = services(client)
    client.post("/api/v1/alerts", json=webhook([alert(GPU_ALERT), alert(HOST_ALERT)]))
    old = alert_row(AlertIn.model_validate(alert(FAR_ALERT, fingerprint="late")), time.time() - 120)
    svc.db.store_alerts([old])  # stored two minutes ago, never grouped since
    assert svc.incidents.process_pending() == 3
    text = client.get("/metrics").text
    assert gauge(text, "fleetmind_alerts_grouped_total") == 3.0
    assert 120.0 <= gauge(text, "fleetmind_incident_grouping_lag_seconds") < 600.0
    assert svc.incidents.process_pending() == 0  # nothing pending: the lag is gone
    assert gauge(client.get("/metrics").text, "fleetmind_incident_grouping_lag_seconds") == 0.0


# ----------------------------------------------------------------------------------------- CLI
def test_cli_serve_rejects_bad_options(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fleetmind.cli import main

    monkeypatch.setenv("FLEETMIND_GRAPH", "restored-after-the-test")  # the CLI exports its options

    assert main(["serve", "--graph", str(tmp_path / "missing.json")]) == 2
    assert "graph file not found" in capsys.readouterr().err
    assert main(["serve", "--port", "70000"]) == 2
    assert "--port" in capsys.readouterr().err


def test_services_fields_have_real_types() -> None:
    hints = typing.get_type_hints(Services)  # every annotation resolves at run time
    assert not [name for name, hint in hints.items() if hint is typing.Any]
    assert hints["extender"] == ExtenderState | None
    assert hints["health"] == HealthService | None
