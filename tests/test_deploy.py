"""deploy/: Kubernetes manifests against the upstream schemas, the Grafana dashboard against the
metrics the service exports, and the container image built and run with podman."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from fastapi.testclient import TestClient

from fleetmind.data.paths import REPO_ROOT
from fleetmind.serving.metrics import Metrics

DEPLOY = REPO_ROOT / "deploy"
BASE = DEPLOY / "kubernetes" / "base"
K8S_VERSION = "1.30.0"  # oldest Kubernetes minor the manifests are checked against


def _kustomize_resources() -> list[dict[str, Any]]:
    kust = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    docs = []
    for name in kust["resources"]:
        path = BASE / name
        assert path.is_file(), f"kustomization names a missing file {name}"
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


def test_manifests_validate_against_the_upstream_openapi_schemas() -> None:
    import kubernetes_validate

    docs = _kustomize_resources()
    core = [
        d
        for d in docs
        if "." not in d["apiVersion"].split("/")[0] or d["apiVersion"].startswith("apps/")
    ]
    assert {d["kind"] for d in core} >= {
        "Deployment",
        "Service",
        "Namespace",
        "PersistentVolumeClaim",
    }  # the Secret is generated (secretGenerator): tests/test_deploy_cluster.py renders it
    for doc in core:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)  # raises on any unknown field
    # the checker really rejects a wrong field (so the loop above is not vacuous)
    bad = json.loads(json.dumps(next(d for d in core if d["kind"] == "Deployment")))
    bad["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGet"]["pathh"] = "/"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, K8S_VERSION, strict=True)


def test_deployment_matches_the_service_and_the_image(tmp_path: Path) -> None:
    from fleetmind.serving.app import create_app
    from fleetmind.serving.settings import Settings

    docs = {d["kind"]: d for d in _kustomize_resources()}
    pod = docs["Deployment"]["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    app = create_app(Settings(telemetry="sim", database_url=f"sqlite:///{tmp_path / 'fm.db'}"))
    with TestClient(app) as client:  # the probes answer 200 without a token on a started service
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            assert client.get(container[probe]["httpGet"]["path"]).status_code == 200
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    dockerfile = (DEPLOY / "container" / "Dockerfile").read_text()
    (port,) = re.findall(r"^EXPOSE (\d+)", dockerfile, re.M)
    assert container["ports"][0]["containerPort"] == int(port)
    user = re.findall(r"^USER (\d+)", dockerfile, re.M)[-1]
    assert pod["spec"]["securityContext"]["runAsUser"] == int(user) != 0
    # the Service selects the pods, the ServiceMonitor selects the Service
    labels = pod["metadata"]["labels"]
    assert docs["Service"]["spec"]["selector"].items() <= labels.items()
    svc_labels = docs["Service"]["metadata"]["labels"]
    assert docs["ServiceMonitor"]["spec"]["selector"]["matchLabels"].items() <= svc_labels.items()
    assert (
        docs["ServiceMonitor"]["spec"]["endpoints"][0]["port"]
        == docs["Service"]["spec"]["ports"][0]["name"]
    )
    # every variable the Deployment sets is a setting (the generated Secret's tokens:
    # tests/test_deploy_cluster.py)
    fields = {f"FLEETMIND_{name.upper()}" for name in Settings.model_fields}
    assert {e["name"] for e in container["env"]} <= fields


def test_prometheusrule_is_generated_from_the_rules_file() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "prometheusrule", DEPLOY / "kubernetes" / "prometheusrule.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert (BASE / "prometheusrule.yaml").read_text() == module.render(), (
        "run python deploy/kubernetes/prometheusrule.py"
    )
    rule = yaml.safe_load((BASE / "prometheusrule.yaml").read_text())
    source = yaml.safe_load((DEPLOY / "fleetmind-rules.yml").read_text())
    assert rule["spec"]["groups"] == source["groups"]


def _dashboard() -> dict[str, Any]:
    return json.loads((DEPLOY / "grafana" / "fleetmind-dashboard.json").read_text())


def _graphs(dash: dict[str, Any]) -> list[dict[str, Any]]:
    """The dashboard's panels that query (its rows only group them)."""
    return [p for p in dash["panels"] if p["type"] != "row"]


def _interpolated(expr: str, rate_interval: str = "1m") -> str:
    """``expr`` as Grafana sends it, for a parser: ``$__rate_interval`` a duration (Grafana's
    global variables; the variables in label values are left as they are)."""
    return expr.replace("$__rate_interval", rate_interval)


def _metric_names(node: Any) -> set[str]:
    """Metric names of every vector selector in a parsed PromQL expression (promql-parser AST)."""
    import promql_parser as pp

    if isinstance(node, pp.VectorSelector):
        return {node.name} if node.name else set()
    out: set[str] = set()
    for attr in ("args", "expr", "lhs", "rhs", "param", "vector_selector"):
        child = getattr(node, attr, None)
        for item in child if isinstance(child, list) else [child]:
            if item is not None and not isinstance(item, (str, int, float)):
                out |= _metric_names(item)
    return out


def _exported_series() -> set[str]:
    from fleetmind.serving.notify import _counter

    metrics = Metrics()
    _counter(metrics.registry)  # fleetmind_notifications_total: registered by the notifier
    metrics.holds_count = lambda: 0  # fleetmind_scheduler_holds: set by the app (build_services)
    names = {"up"}  # made by Prometheus for every target (docs: "Jobs and instances")
    for family in [*metrics.registry.collect(), *metrics.process_registry.collect()]:
        names.add(family.name)
        suffixes = {
            "counter": ["_total"],
            "histogram": ["_bucket", "_sum", "_count"],
            "gauge": [""],
        }
        names.update(family.name + s for s in suffixes.get(family.type, [""]))
    return names


def test_grafana_dashboard_queries_parse_and_name_exported_metrics() -> None:
    import promql_parser

    dash = _dashboard()
    exported = _exported_series()
    assert "fleetmind_rca_duration_seconds_bucket" in exported
    used: set[str] = set()
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for panel in _graphs(dash):
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            names = _metric_names(promql_parser.parse(_interpolated(target["expr"])))
            assert names, (panel["title"], target["expr"])
            unknown = names - exported
            assert not unknown, f"panel {panel['title']!r} queries {sorted(unknown)}, not exported"
            used |= names
    # the four signals operators watch first, and what FleetMind's own alerts page on or an
    # operator needs beside them (readiness, fallback models, notifications, refused webhooks and
    # handshakes, alerts without a ranked cause or left out, capacity held), are on the dashboard
    for needed in (
        "fleetmind_alerts_ingested_total",
        "fleetmind_incident_grouping_lag_seconds",
        "fleetmind_rca_duration_seconds_bucket",
        "fleetmind_open_incidents",
        "fleetmind_ready",
        "up",
        "fleetmind_model_info",
        "fleetmind_notifications_total",
        "fleetmind_http_bodies_too_large_total",
        "fleetmind_tls_handshake_failures_total",
        "fleetmind_alerts_unmapped_total",
        "fleetmind_alerts_truncated_total",
        "fleetmind_scheduler_holds",
    ):
        assert needed in used, needed
    with pytest.raises(ValueError):  # the parser really rejects a broken query
        promql_parser.parse("sum(rate(fleetmind_open_incidents[5m]")


def _aggregations_over(node: Any, metric: str) -> list[tuple[Any, list[Any]]]:
    """``(aggregation, selectors of metric under it)`` for each aggregation in a parsed PromQL
    expression whose argument reads ``metric`` (promql-parser AST)."""
    import promql_parser as pp

    def selectors(n: Any) -> list[Any]:
        if isinstance(n, pp.VectorSelector):
            return [n] if n.name == metric else []
        found = []
        for attr in ("args", "expr", "lhs", "rhs", "param", "vector_selector"):
            child = getattr(n, attr, None)
            for item in child if isinstance(child, list) else [child]:
                if item is not None and not isinstance(item, (str, int, float)):
                    found += selectors(item)
        return found

    out = []
    if isinstance(node, pp.AggregateExpr) and selectors(node.expr):
        out.append((node, selectors(node.expr)))
    for attr in ("args", "expr", "lhs", "rhs", "param"):
        child = getattr(node, attr, None)
        for item in child if isinstance(child, list) else [child]:
            if item is not None and not isinstance(item, (str, int, float)):
                out += _aggregations_over(item, metric)
    return out


def test_grafana_placements_panel_counts_each_decision_once() -> None:
    """fleetmind_placements_total counts the placement route (path="placements") and the
    kube-scheduler extender's filter and prioritize, which both decide for the same pod
    (serving/scheduler/router.py): a sum over paths counts an extender-scheduled pod twice, so
    every aggregation on the dashboard keeps ``path`` or selects one path."""
    import promql_parser as pp

    seen = 0
    for panel in _graphs(_dashboard()):
        for target in panel["targets"]:
            parsed = pp.parse(_interpolated(target["expr"]))
            for agg, sels in _aggregations_over(parsed, "fleetmind_placements_total"):
                seen += 1
                mod = agg.modifier
                kept = mod is not None and (
                    ("path" in mod.labels) == (mod.type == pp.AggModifierType.By)
                )
                one_path = all(
                    any(m.name == "path" and m.op == pp.MatchOp.Equal for m in s.matchers.matchers)
                    for s in sels
                )
                assert kept or one_path, (
                    f"panel {panel['title']!r} sums fleetmind_placements_total over its paths: "
                    f"{target['expr']}"
                )
    assert seen, "no panel shows fleetmind_placements_total"


def _stats(dash: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["title"]: p for p in _graphs(dash) if p["type"] == "stat"}


def _selectors(node: Any) -> list[Any]:
    """Every vector selector of a parsed PromQL expression (promql-parser AST)."""
    import promql_parser as pp

    if isinstance(node, pp.VectorSelector):
        return [node]
    out: list[Any] = []
    for attr in ("args", "expr", "lhs", "rhs", "param", "vector_selector"):
        child = getattr(node, attr, None)
        for item in child if isinstance(child, list) else [child]:
            if item is not None and not isinstance(item, (str, int, float)):
                out += _selectors(item)
    return out


def test_grafana_dashboard_panels_sit_in_rows_without_overlapping() -> None:
    """Grafana's grid is 24 columns wide (``gridPos``, dashboard JSON model); a row panel groups
    the panels below it up to the next row."""
    dash = _dashboard()
    cells: dict[tuple[int, int], str] = {}
    for panel in dash["panels"]:
        g = panel["gridPos"]
        assert g["x"] >= 0 and g["w"] > 0 and g["x"] + g["w"] <= 24, panel["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{panel['title']!r} overlaps {cells[(x, y)]!r}"
                cells[(x, y)] = panel["title"]
    rows = sorted(p["gridPos"]["y"] for p in dash["panels"] if p["type"] == "row")
    assert len(rows) >= 4 and rows[0] == 0
    assert all(
        p["collapsed"] is False and p["panels"] == [] for p in dash["panels"] if p["type"] == "row"
    )


def test_grafana_stat_colours_follow_the_shipped_rules() -> None:
    """Without ``thresholds`` Grafana colours a stat by its default, red from 80 (grafana docs,
    panels-visualizations/configure-thresholds, "Default thresholds"): a 70 s grouping lag showed
    green while FleetMindIncidentGroupingLag fired. A stat turns red only where a shipped rule
    fires (its description names the rule), at the rule's threshold; the others keep one colour."""
    rules = {
        r["alert"]: r
        for g in yaml.safe_load((DEPLOY / "fleetmind-rules.yml").read_text())["groups"]
        for r in g["rules"]
        if "alert" in r
    }
    stats = _stats(_dashboard())
    for title, panel in stats.items():
        defaults = panel["fieldConfig"]["defaults"]
        steps = defaults["thresholds"]["steps"]
        assert defaults["thresholds"]["mode"] == "absolute" and steps[0]["value"] is None, title
        if len(steps) == 1:
            assert steps[0]["color"] not in ("red", "orange", "yellow"), title
            continue
        assert [s["color"] for s in steps] == ["green", "red"], title
        assert any(name in panel["description"] for name in rules), f"{title}: which rule?"

    def bound(alert: str, op: str) -> float:
        m = re.search(rf"{op}\s*([0-9.]+)\s*$", rules[alert]["expr"].strip())
        assert m, rules[alert]["expr"]
        return float(m.group(1))

    def red(title: str) -> float:
        return stats[title]["fieldConfig"]["defaults"]["thresholds"]["steps"][-1]["value"]

    assert red("Grouping lag") == bound("FleetMindIncidentGroupingLag", ">") == 60
    assert red("TLS handshakes refused (30 min)") == bound("FleetMindTLSHandshakeFailures", ">=")
    for title in ("Not ready", "Models on a fallback", "Webhooks refused (10 min)"):
        assert red(title) == 1, title  # a count: one is enough for the rule


@pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool")
def test_grafana_tls_stat_turns_red_where_its_rule_fires(tmp_path: Path) -> None:
    """FleetMindTLSHandshakeFailures counts per instance (``sum by (instance)``): the stat shows
    the instance that refused most, so one refusal on each of two replicas reads 1 (green, the
    rule silent), two on one reads 2 (red, the rule's expression returns that instance).
    ``promtool test rules`` runs the rule's and the stat's expressions on a real Prometheus
    engine (Prometheus docs, configuration/unit_testing_rules)."""
    rule = next(
        r
        for g in yaml.safe_load((DEPLOY / "fleetmind-rules.yml").read_text())["groups"]
        for r in g["rules"]
        if r.get("alert") == "FleetMindTLSHandshakeFailures"
    )
    panel = _stats(_dashboard())["TLS handshakes refused (30 min)"]
    red = panel["fieldConfig"]["defaults"]["thresholds"]["steps"][-1]["value"]
    stat = panel["targets"][0]["expr"].replace("$job", ".*").replace("$namespace", ".*")
    name = "fleetmind_tls_handshake_failures_total"

    def case(values: dict[str, str], fired: list[str], shown: float) -> dict[str, Any]:
        series = [
            {"series": f'{name}{{instance="{i}",job="fleetmind"}}', "values": v}
            for i, v in values.items()
        ]
        exp_rule = [{"labels": f'{{instance="{i}"}}', "value": red} for i in fired]
        return {"interval": "15s", "input_series": series, "promql_expr_test": [
            {"expr": rule["expr"].strip(), "eval_time": "20m", "exp_samples": exp_rule},
            {"expr": stat, "eval_time": "20m", "exp_samples": [{"labels": "{}", "value": shown}]},
        ]}  # fmt: skip

    one_each = case({"a:8000": "0x40 1x40", "b:8000": "0x40 1x40"}, [], red - 1)
    two_on_one = case({"a:8000": "0x40 1x20 2x20", "b:8000": "0x80"}, ["a:8000"], red)
    (tmp_path / "t.yml").write_text(yaml.safe_dump({"tests": [one_each, two_on_one]}))
    done = subprocess.run(["promtool", "test", "rules", "t.yml"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_grafana_notifications_dropped_reads_zero_without_a_channel() -> None:
    """``fleetmind_notifications_total`` exists only for the channels set (the notifier registers
    them), so without one the stat's sum is empty and Grafana shows "No data": ``or vector(0)``
    makes it a green 0, as on "Not ready" (the live test below runs it on a real Prometheus)."""
    expr = _stats(_dashboard())["Notifications dropped (15 min)"]["targets"][0]["expr"]
    assert expr.rstrip().endswith("or vector(0)"), expr


def test_grafana_dashboard_shows_what_fleetminds_own_alerts_read() -> None:
    """Every series a rule of the ``fleetmind-service`` and ``fleetmind-models`` groups reads is
    on a panel, so an operator paged by one finds it on the dashboard."""
    import promql_parser

    on_dashboard: set[str] = set()
    for panel in _graphs(_dashboard()):
        for target in panel["targets"]:
            on_dashboard |= _metric_names(promql_parser.parse(_interpolated(target["expr"])))
    groups = yaml.safe_load((DEPLOY / "fleetmind-rules.yml").read_text())["groups"]
    read: dict[str, set[str]] = {}
    for group in groups:
        if group["name"] in ("fleetmind-service", "fleetmind-models"):
            for rule in group["rules"]:
                read[rule["alert"]] = _metric_names(promql_parser.parse(rule["expr"]))
    assert {"FleetMindNotReady", "FleetMindModelFallback", "FleetMindWebhookRefused"} <= set(read)
    missing = {a: sorted(m - on_dashboard) for a, m in read.items() if m - on_dashboard}
    assert not missing, f"no panel shows what these alerts read: {missing}"


def test_grafana_units_name_what_is_counted() -> None:
    """``reqps`` reads "req/s" (grafana-data valueFormats categories): only HTTP requests are
    requests. Alerts and placement decisions carry their own suffix (Grafana's custom unit
    ``suffix:<text>``); the lag plotted beside a throughput is seconds on its own axis; the 1-hour
    increase of model loads says per hour."""
    import promql_parser

    panels = {p["title"]: p for p in _graphs(_dashboard())}
    for title, panel in panels.items():
        names = set()
        for target in panel["targets"]:
            names |= _metric_names(promql_parser.parse(_interpolated(target["expr"])))
        unit = panel["fieldConfig"]["defaults"]["unit"]
        if unit == "reqps":
            assert names == {"fleetmind_http_request_duration_seconds_count"}, title
        if names & {"fleetmind_alerts_ingested_total", "fleetmind_alerts_unmapped_total"}:
            assert unit == "suffix:alerts/s", title
        if "fleetmind_placements_total" in names:
            assert unit == "suffix:decisions/s", title
    mixed = panels["Incident grouping lag and throughput"]
    lag = next(t["legendFormat"] for t in mixed["targets"] if "grouping_lag" in t["expr"])
    (override,) = [
        o
        for o in mixed["fieldConfig"]["overrides"]
        if o["matcher"] == {"id": "byName", "options": lag}
    ]
    props = {p["id"]: p["value"] for p in override["properties"]}
    assert props["unit"] == "s" and props["custom.axisPlacement"] == "right"
    assert mixed["fieldConfig"]["defaults"]["unit"] == "suffix:alerts/s"
    loads = next(p for p in panels.values() if "model_loads" in p["targets"][0]["expr"])
    assert "[1h]" in loads["targets"][0]["expr"] and "per hour" in loads["title"]
    assert loads["fieldConfig"]["defaults"]["unit"].endswith("/h")


def test_grafana_grouping_lag_is_described_as_the_gauge_computes_it() -> None:
    """fleetmind_incident_grouping_lag_seconds is the age of the oldest ungrouped alert, read at
    every worker loop whether or not a batch succeeds, 0 when none is pending
    (serving/incidents/worker.py ``GroupingLag``, docs/serving/operations.md), not the wait of the
    last batch's oldest alert."""
    lag = _stats(_dashboard())["Grouping lag"]["description"]
    assert "not yet grouped" in lag and "0 when none is pending" in lag
    rules_text = (DEPLOY / "fleetmind-rules.yml").read_text()
    dash_text = (DEPLOY / "grafana" / "fleetmind-dashboard.json").read_text()
    for text in (rules_text, dash_text):
        assert "last batch" not in text


_FIXED_WINDOWS = {
    "5m": "5 min",
    "10m": "10 min",
    "15m": "15 min",
    "30m": "30 min",
    "1h": "per hour",
}
"""A fixed range a panel may use, and how its title says so."""


def test_grafana_rate_windows_follow_the_step_or_the_title() -> None:
    """A fixed ``[5m]`` under a step of 10 minutes (a 7-day range) skips half the samples;
    Grafana's ``$__rate_interval`` is max($__interval + scrape interval, 4 x scrape interval)
    (grafana docs, "Prometheus template variables", $__rate_interval). A fixed window stays only
    where the title promises it (a rule's window, "5 min", "per hour")."""
    rate_interval = 0
    for panel in _graphs(_dashboard()):
        for target in panel["targets"]:
            for window in re.findall(r"\[([^\]]+)\]", target["expr"]):
                if window == "$__rate_interval":
                    rate_interval += 1
                    continue
                assert window in _FIXED_WINDOWS, (panel["title"], window)
                assert _FIXED_WINDOWS[window] in panel["title"], (panel["title"], window)
    assert rate_interval >= 10


def test_grafana_queries_select_namespace_and_job() -> None:
    """Two installs whose Services are both named fleetmind share the job label (the Prometheus
    Operator names the job after the Service; its target carries ``namespace``,
    prometheus-operator ``pkg/prometheus/promcfg.go``): a ``namespace`` variable tells them apart.
    Grafana interpolates All as allValue ``.*``, never escaped (grafana docs, "Variables",
    "Custom all value"), which also matches a series without the label (compose)."""
    import promql_parser as pp

    dash = _dashboard()
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    ns = variables["namespace"]
    assert ns["includeAll"] and ns["allValue"] == ".*" and ns["multi"]
    m = re.fullmatch(r"label_values\((\w+)(\{.*\})?, namespace\)", ns["definition"])
    assert m and m.group(1) in _exported_series() and ns["query"]["query"] == ns["definition"]
    assert "$namespace" in variables["job"]["definition"]
    names = list(variables)
    assert names.index("namespace") < names.index("job")  # job lists the chosen namespaces' jobs
    for panel in _graphs(dash):
        for target in panel["targets"]:
            sels = _selectors(pp.parse(_interpolated(target["expr"])))
            assert sels, target["expr"]
            for sel in sels:
                for label in ("job", "namespace"):
                    assert any(
                        x.name == label and x.op == pp.MatchOp.Re and x.value == f"${label}"
                        for x in sel.matchers.matchers
                    ), (panel["title"], sel)


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


def test_counters_the_dashboard_and_rules_read_exist_at_zero_on_a_fresh_app(
    tmp_path: Path,
) -> None:
    """A labelled series born at N on its first increment shows ``rate()`` and ``increase()`` no
    increase (Prometheus, "Instrumentation: Avoid missing metrics",
    https://prometheus.io/docs/practices/instrumentation/#avoid-missing-metrics): 20 resolved
    alerts read 0 on the ingestion panel. Before any alert or placement, ``/metrics`` of a fresh
    app holds them at 0."""
    from serving_helpers import serving_settings

    from fleetmind.serving.app import create_app

    with TestClient(create_app(serving_settings(tmp_path))) as c:
        models = c.get("/api/v1/models").json()
        policy, method = models["placement"]["method"], models["rca"]["method"]
        samples = _samples(c.get("/metrics").text)
    for status in ("firing", "resolved"):
        assert samples[("fleetmind_alerts_ingested_total", (("status", status),))] == 0.0
    results = ("placed", "infeasible", "cpu_only", "passthrough")
    for path, kept in (("placements", results[:2]), ("filter", results), ("prioritize", results)):
        for result in kept:
            key = (("path", path), ("policy", policy), ("result", result))
            assert samples[("fleetmind_placements_total", key)] == 0.0, key
    assert samples[("fleetmind_http_bodies_too_large_total", (("route", "/api/v1/alerts"),))] == 0
    assert samples[("fleetmind_rca_duration_seconds_count", (("method", method),))] == 0.0
    le = (("le", "+Inf"), ("method", method))
    assert samples[("fleetmind_rca_duration_seconds_bucket", le)] == 0.0


def test_a_reload_keeps_the_series_of_the_policy_and_method_served_before() -> None:
    """After a reload (the fallback replaced by the real model, the usual recovery after
    FleetMindModelFallback) the new policy's and method's series exist at 0, and those served
    before stay, counted or not: requests still answering with the old models count on them, and
    removing a series (client_python ``remove``) between a request's ``labels()`` and ``inc()``
    lost that count (a review reproduced it in a threaded run)."""
    from types import SimpleNamespace

    def served(policy: str, method: str) -> Any:
        info = {"version": "", "fallback_reason": None}
        return SimpleNamespace(
            rca=SimpleNamespace(kind="rca", method=method, **info),
            placement=SimpleNamespace(kind="placement", method=policy, **info),
        )

    def series(metrics: Metrics, suffix: str) -> dict[tuple[tuple[str, str], ...], float]:
        return {k[1]: v for k, v in _samples(metrics.render()[0].decode()).items()
                if k[0] == suffix}  # fmt: skip

    metrics = Metrics()
    metrics.set_models(served("heuristic:BestFit", "rule"))
    metrics.placements.labels("heuristic:BestFit", "placed", "filter").inc(5)
    metrics.set_models(served("ppo", "gnn"))
    placements = series(metrics, "fleetmind_placements_total")
    old = {k: v for k, v in placements.items() if ("policy", "heuristic:BestFit") in k}
    assert len(old) == 10 and sum(old.values()) == 5
    assert old[(("path", "filter"), ("policy", "heuristic:BestFit"), ("result", "placed"))] == 5
    assert [v for k, v in placements.items() if ("policy", "ppo") in k] == [0.0] * 10
    assert series(metrics, "fleetmind_rca_duration_seconds_count") == {
        (("method", "gnn"),): 0.0,
        (("method", "rule"),): 0.0,
    }
    metrics.placements.labels("heuristic:BestFit", "placed", "filter").inc()  # an old request
    metrics.set_models(served("ppo", "rule"))
    placements = series(metrics, "fleetmind_placements_total")
    assert len(placements) == 20
    assert (
        placements[(("path", "filter"), ("policy", "heuristic:BestFit"), ("result", "placed"))] == 6
    )


def _query_range(url: str, expr: str, seconds: int) -> list[dict[str, Any]]:
    end = time.time()
    r = httpx.get(
        url + "/api/v1/query_range",
        params={"query": expr, "start": end - seconds, "end": end, "step": 1},
        timeout=5.0,
    )
    return r.json()["data"]["result"]


_NOT_A_NUMBER = ("NaN", "+Inf", "-Inf")
"""Values of a query that show no number on a panel (histogram_quantile of all-zero rates)."""


@pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus is not installed")
def test_a_real_prometheus_shows_the_first_resolved_alerts_on_the_ingestion_panel(
    tmp_path: Path,
) -> None:
    """The ingestion panel's query, interpolated as Grafana does (All -> ``.*``;
    ``$__rate_interval`` -> 4 s, 4 x the 1 s scrape interval), against a real Prometheus scraping
    a fresh app: the first resolved alerts show as a rate above 0, and another namespace shows
    none. Every other panel's query runs there too and shows a number, not only ``NaN`` (the
    ranking latency after the first RCA: its series exist at 0 from the model load)."""
    from k8s_helpers import ExporterServer, Prometheus
    from serving_helpers import alert, serving_settings, webhook

    from fleetmind.serving.app import create_app

    panel = next(p for p in _graphs(_dashboard()) if p["title"] == "Alert ingestion rate")
    expr = panel["targets"][0]["expr"].replace("$__rate_interval", "4s").replace("$job", ".*")
    with TestClient(create_app(serving_settings(tmp_path))) as c:
        exporter = ExporterServer({"/metrics": c.get("/metrics").text})
        prom = Prometheus(
            tmp_path, exporter, {"fleetmind": "/metrics"},
            scrape={"fleetmind": {"labels": {"namespace": "prod"}}},
        )  # fmt: skip
        try:
            prom.wait_for("count_over_time(fleetmind_open_incidents[1m]) >= 3", 1)
            gone = {"alertname": "HostDown", "cluster": "c0", "node": "c0-h1"}
            body = webhook([alert({**gone, "n": str(i)}, status="resolved") for i in range(3)])
            assert c.post("/api/v1/alerts", json=body).status_code == 200
            assert c.post("/api/v1/rca", json={"alerts": [alert(gone)]}).status_code == 200
            exporter.texts["/metrics"] = c.get("/metrics").text
            prom.wait_for('fleetmind_alerts_ingested_total{status="resolved"} == 3', 1)
            time.sleep(2)
            series = _query_range(prom.url, expr.replace("$namespace", "prod"), 30)
            resolved = [s for s in series if s["metric"].get("status") == "resolved"]
            assert resolved and max(float(v) for _, v in resolved[0]["values"]) > 0, series
            assert _query_range(prom.url, expr.replace("$namespace", "staging"), 30) == []
            # every query runs and shows a number, but the notifier's series (no channel is set
            # here) and the HTTP latency by route: its route x status series are open-ended, each
            # born at its first request, so one request per route reads NaN there
            exempt = ("Notifications", "HTTP p99 latency by route")
            for other in _graphs(_dashboard()):
                for target in other["targets"]:
                    q = target["expr"].replace("$__rate_interval", "4s").replace("$job", ".*")
                    got = _query_range(prom.url, q.replace("$namespace", "prod"), 30)
                    finite = [v for s in got for _, v in s["values"] if v not in _NOT_A_NUMBER]
                    assert finite or other["title"] in exempt, (other["title"], q, got)
        finally:
            prom.stop()
            exporter.close()


# ------------------------------------------------------------------------------ container image


def _podman_ready() -> str | None:
    if os.geteuid() != 0:
        return "the container test runs as root (podman with the overlay driver)"
    for tool in ("podman", "mmdebstrap", "runc"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (.ci/install_test_peers.sh installs it as root)"
    if not Path("/usr/libexec/podman/catatonit").exists():
        return (
            "catatonit (podman run --init) is not installed (.ci/install_test_peers.sh installs it)"
        )
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
@pytest.mark.external
@pytest.mark.timeout(2400)  # a cold build (base image, every dependency) takes 10-15 min on 2 cores
def test_container_image_builds_runs_and_takes_alerts(tmp_path: Path) -> None:
    reason = _podman_ready()
    if reason:
        pytest.skip(reason)
    # One fixed tag: the next run's build reuses this image's dependency layer (the slow part).
    image = "localhost/fleetmind-test:latest"
    env = {**os.environ, "PYTHON": sys.executable}
    build = subprocess.run(
        ["bash", str(DEPLOY / "container" / "build.sh"), image],
        capture_output=True,
        text=True,
        env=env,
        timeout=1500,
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    port = _free_port()
    name = f"fleetmind-test-{uuid.uuid4().hex[:8]}"
    hard_nofile = int(
        subprocess.run(["bash", "-c", "ulimit -Hn"], capture_output=True, text=True).stdout
    )
    nofile = min(hard_nofile, 8192)
    token = "t-" + uuid.uuid4().hex
    run = [
        "podman",
        "run",
        "-d",
        "--rm",
        "--init",
        "--runtime",
        "runc",
        "--name",
        name,
        "--ulimit",
        f"nofile={nofile}:{nofile}",
        "--ulimit",
        "nproc=4096:4096",
        "-p",
        f"127.0.0.1:{port}:8000",
        "-e",
        f"FLEETMIND_API_TOKEN={token}",
        "-e",
        "FLEETMIND_TELEMETRY=sim",
        image,
    ]
    started = subprocess.run(run, capture_output=True, text=True)
    assert started.returncode == 0, started.stderr
    try:
        user = subprocess.run(
            ["podman", "exec", name, "id", "-u"], capture_output=True, text=True
        ).stdout.strip()
        assert user == "10001"
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 180
        ready = None
        while time.monotonic() < deadline:
            try:
                ready = httpx.get(f"{base}/readyz", timeout=2)
                if ready.status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1)
        assert ready is not None and ready.status_code == 200, subprocess.run(
            ["podman", "logs", name], capture_output=True, text=True
        ).stderr[-3000:]
        headers = {"Authorization": f"Bearer {token}"}
        alert = {
            "status": "firing",
            "labels": {
                "alertname": "GpuXidError",
                "cluster": "c0",
                "node": "c0-n0",
                "gpu": "0",
                "severity": "critical",
            },
            "annotations": {"summary": "XID 79"},
            "startsAt": "2026-12-01T10:00:00Z",
            "fingerprint": "container-test-1",
        }
        body = {
            "version": "4",
            "status": "firing",
            "receiver": "fleetmind",
            "groupKey": "{}:{}",
            "alerts": [alert],
        }
        assert httpx.post(f"{base}/api/v1/alerts", json=body, timeout=10).status_code == 401
        stored = httpx.post(f"{base}/api/v1/alerts", json=body, headers=headers, timeout=10)
        assert stored.status_code == 200, stored.text
        assert stored.json()["accepted"] == 1
        listed = httpx.get(f"{base}/api/v1/alerts", headers=headers, timeout=10)
        assert [a["fingerprint"] for a in listed.json()] == ["container-test-1"]
        # the image's own health check passes
        health = subprocess.run(
            ["podman", "healthcheck", "run", name], capture_output=True, text=True
        )
        assert health.returncode == 0, health.stdout + health.stderr
    finally:
        subprocess.run(["podman", "rm", "-f", name], capture_output=True)
        subprocess.run(["podman", "image", "prune", "-f"], capture_output=True)  # earlier builds
