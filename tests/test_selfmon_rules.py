"""FleetMind's own alerts in ``deploy/fleetmind-rules.yml`` read series and labels that exist.

``deploy/fleetmind-rules.test.yml`` (run with ``promtool test rules`` by tests/test_serving_e2e.py)
shows each rule firing on a failure and quiet otherwise. What it cannot show is that its input is
what the real components give; this file checks that against the sources:

- the extender rules' route templates are the routes kube-scheduler calls (``filterVerb`` and
  ``prioritizeVerb`` of deploy/kube-scheduler-config.yaml under its ``urlPrefix``), and the
  ingestion rule's route is the Alertmanager webhook's;
- ``FleetMindExtenderSlow`` reads a bucket the request histogram exports (prometheus-client writes
  ``le="5.0"``), at or below kube-scheduler's ``httpTimeout`` (5 s in the shipped configuration,
  and kube-scheduler's ``DefaultExtenderTimeout``, ``pkg/scheduler/extender.go``): a bucket
  above the timeout would count the calls kube-scheduler gave up on together with the ones it
  took;
- the job matcher of ``FleetMindDown``/``FleetMindAbsent`` takes the job of deploy/prometheus.yml
  and the job the Prometheus Operator gives the ServiceMonitor's targets: the Service's name, as
  the ServiceMonitor sets no ``jobLabel`` (prometheus-operator API, ``ServiceMonitorSpec.jobLabel``);
- every FleetMind alert says what to do (``description``) and links a section of the docs that
  exists (``runbook_url``).
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from test_docs import heading_anchors

from fleetmind.data.paths import REPO_ROOT
from fleetmind.serving.metrics import LATENCY_BUCKETS, Metrics

DEPLOY = REPO_ROOT / "deploy"
SELF_ALERTS = {
    "FleetMindDown",
    "FleetMindAbsent",
    "FleetMindNotReady",
    "FleetMindTLSHandshakeFailures",
    "FleetMindAlertIngestionFailing",
    "FleetMindExtenderErrors",
    "FleetMindExtenderSlow",
    "FleetMindFilterRefusingAll",
    "FleetMindIncidentGroupingLag",
    "FleetMindModelFallback",
    "FleetMindNotificationsFailing",
    "FleetMindWebhookRefused",
    "ModelWeightLoadFailures",
}


def _alerts() -> list[dict[str, Any]]:
    """Every alerting rule of deploy/fleetmind-rules.yml."""
    groups = yaml.safe_load((DEPLOY / "fleetmind-rules.yml").read_text())["groups"]
    return [r for g in groups for r in g["rules"] if "alert" in r]


def _expr(alert: str) -> str:
    (expr,) = {r["expr"] for r in _alerts() if r["alert"] == alert}
    return expr


def _extender() -> dict[str, Any]:
    """The FleetMind extender of the shipped kube-scheduler configuration."""
    (ext,) = yaml.safe_load((DEPLOY / "kube-scheduler-config.yaml").read_text())["extenders"]
    return ext


def test_every_fleetmind_alert_has_a_remedy_and_a_runbook_that_exists() -> None:
    alerts = [r for r in _alerts() if r["alert"] in SELF_ALERTS]
    assert {r["alert"] for r in alerts} == SELF_ALERTS
    for rule in alerts:
        ann = rule["annotations"]
        assert len(ann.get("description", "")) > 40, rule["alert"]
        page, _, anchor = ann["runbook_url"].partition("#")
        path = REPO_ROOT / page
        assert path.is_file(), ann["runbook_url"]
        assert anchor in heading_anchors(path), ann["runbook_url"]
        assert f"`{rule['alert']}`" in path.read_text(), f"{rule['alert']} not in {page}"


def test_the_extender_rules_read_the_routes_kube_scheduler_calls() -> None:
    from fleetmind.serving.routers.alerts import router as alerts_router
    from fleetmind.serving.scheduler.router import router as scheduler_router

    ext = _extender()
    prefix = "/" + ext["urlPrefix"].split("://", 1)[1].split("/", 1)[1]
    called = {f"{prefix}/{ext['filterVerb']}", f"{prefix}/{ext['prioritizeVerb']}"}
    posted = {r.path for r in scheduler_router.routes if "POST" in getattr(r, "methods", ())}
    assert called <= posted
    every = {r.path for r in scheduler_router.routes}  # /bound, /holds, ...: not kube-scheduler's
    assert len(every) > len(called)
    for alert in ("FleetMindExtenderErrors", "FleetMindExtenderSlow"):
        patterns = set(re.findall(r'route=~"([^"]+)"', _expr(alert)))
        assert patterns, alert
        for pattern in patterns:  # PromQL anchors a regular expression at both ends
            taken = {p for p in every if re.fullmatch(pattern, p)}
            assert taken == called, (alert, pattern, taken)
    webhook = {r.path for r in alerts_router.routes if "POST" in getattr(r, "methods", ())}
    assert webhook == {"/api/v1/alerts"}
    assert 'method="POST",route="/api/v1/alerts"' in _expr("FleetMindAlertIngestionFailing")


def test_the_slow_extender_rule_reads_an_exported_bucket_within_the_timeout() -> None:
    timeout = re.fullmatch(r"(\d+(?:\.\d+)?)s", str(_extender()["httpTimeout"]))
    assert timeout is not None
    timeout_s = float(timeout[1])
    (le,) = set(re.findall(r'le="([^"]+)"', _expr("FleetMindExtenderSlow")))
    assert float(le) in LATENCY_BUCKETS
    assert float(le) <= timeout_s
    # no bucket lies between it and the timeout: the rule counts every call past a bucket it can
    assert not [b for b in LATENCY_BUCKETS if float(le) < b <= timeout_s]
    metrics = Metrics()
    metrics.request_latency.labels("POST", "/api/v1/scheduler/filter", "200").observe(6.0)
    text = metrics.render()[0].decode()
    labels = f'le="{le}",method="POST",route="/api/v1/scheduler/filter",status="200"'
    bucket = f"fleetmind_http_request_duration_seconds_bucket{{{labels}}} 0.0"
    assert bucket in text.splitlines()


def test_the_down_rules_match_the_shipped_scrape_jobs() -> None:
    (down,) = set(re.findall(r'up\{job=~"([^"]+)"\}', _expr("FleetMindDown")))
    assert f'absent(up{{job=~"{down}"}})' in _expr("FleetMindAbsent")
    prom = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    jobs = {c["job_name"] for c in prom["scrape_configs"]}
    base = DEPLOY / "kubernetes" / "base"
    monitor = yaml.safe_load((base / "servicemonitor.yaml").read_text())
    assert "jobLabel" not in monitor["spec"]  # so the job is the Service's name
    service = yaml.safe_load((base / "service.yaml").read_text())
    selected = monitor["spec"]["selector"]["matchLabels"]
    assert selected.items() <= service["metadata"]["labels"].items()
    fleetmind_jobs = {"fleetmind", service["metadata"]["name"], "prod-fleetmind"}
    assert "fleetmind" in jobs
    for job in fleetmind_jobs:
        assert re.fullmatch(down, job), job
    for job in jobs - {"fleetmind"}:  # dcgm, cross-cluster-probe: not FleetMind
        assert not re.fullmatch(down, job), job
