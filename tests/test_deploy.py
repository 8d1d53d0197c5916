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
    metrics = Metrics()
    names = set()
    for family in metrics.registry.collect():
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

    dash = json.loads((DEPLOY / "grafana" / "fleetmind-dashboard.json").read_text())
    exported = _exported_series()
    assert "fleetmind_rca_duration_seconds_bucket" in exported
    used: set[str] = set()
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dash["panels"]:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            names = _metric_names(promql_parser.parse(target["expr"]))
            assert names, (panel["title"], target["expr"])
            unknown = names - exported
            assert not unknown, f"panel {panel['title']!r} queries {sorted(unknown)}, not exported"
            used |= names
    # the four signals operators watch first are all on the dashboard
    for needed in (
        "fleetmind_alerts_ingested_total",
        "fleetmind_incident_grouping_lag_seconds",
        "fleetmind_rca_duration_seconds_bucket",
        "fleetmind_open_incidents",
    ):
        assert needed in used
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

    dash = json.loads((DEPLOY / "grafana" / "fleetmind-dashboard.json").read_text())
    seen = 0
    for panel in dash["panels"]:
        for target in panel["targets"]:
            parsed = pp.parse(target["expr"])
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
