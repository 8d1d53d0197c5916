"""deploy/ as a real cluster uses it: generated tokens, the TLS component, kube-scheduler's
configuration, the ServiceMonitor's release label, the image's constraints.

Upstream definitions checked against:
* kube-scheduler ``KubeSchedulerConfiguration`` ``extenders``: kubernetes/kubernetes
  ``staging/src/k8s.io/kube-scheduler/config/v1/types.go`` (``Extender``, ``ExtenderTLSConfig``
  JSON tags; v1.30+);
* kube-prometheus-stack's Prometheus selects ServiceMonitors and PrometheusRules by
  ``release: <Helm release>`` (its ``prometheus.prometheusSpec.serviceMonitorSelector`` default).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from fleetmind.data.paths import REPO_ROOT
from fleetmind.serving.settings import Settings

DEPLOY = REPO_ROOT / "deploy"
K8S = DEPLOY / "kubernetes"
EXTENDER_KEYS = {
    "urlPrefix", "filterVerb", "preemptVerb", "prioritizeVerb", "weight", "bindVerb",
    "enableHTTPS", "tlsConfig", "httpTimeout", "nodeCacheCapable", "managedResources",
    "ignorable",
}  # fmt: skip
TLS_KEYS = {"insecure", "serverName", "certFile", "keyFile", "caFile", "certData", "keyData",
            "caData"}  # fmt: skip


def _render(tmp_path: Path, with_tls: bool) -> list[dict[str, Any]]:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl not installed (kustomize)")
    shutil.copytree(K8S, tmp_path / "k", ignore=shutil.ignore_patterns("tokens.env"))
    made = subprocess.run(["bash", str(tmp_path / "k" / "make-tokens.sh"), str(tmp_path / "k" / "base")],
                          capture_output=True, text=True)  # fmt: skip
    assert made.returncode == 0, made.stderr
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    kust: dict[str, Any] = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                            "resources": ["../k/base"]}  # fmt: skip
    if with_tls:
        kust["components"] = ["../k/tls"]
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(kust))
    out = subprocess.run(["kubectl", "kustomize", str(overlay)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def test_no_placeholder_token_ships_and_the_generated_ones_are_accepted(tmp_path: Path) -> None:
    import base64

    for path in DEPLOY.rglob("*"):
        if path.is_file() and path.suffix in {".yaml", ".yml", ".sh", ""}:
            assert "change-me" not in path.read_text(errors="replace").lower(), path
    docs = _render(tmp_path, with_tls=False)
    (secret,) = [d for d in docs if d["kind"] == "Secret"]
    tokens = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert set(tokens) == {f"FLEETMIND_{s}_TOKEN" for s in ("INGEST", "READ", "SCHEDULE", "ADMIN")}
    assert len(set(tokens.values())) == 4 and all(
        re.fullmatch(r"[0-9a-f]{64}", t) for t in tokens.values()
    )
    settings = Settings(**{k[len("FLEETMIND_") :].lower(): v for k, v in tokens.items()})
    assert settings.weak_tokens() == []
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    refs = deployment["spec"]["template"]["spec"]["containers"][0]["envFrom"]
    assert {"secretRef": {"name": secret["metadata"]["name"]}} in refs
    # a second run keeps the tokens (rotation is deliberate: delete the file)
    again = subprocess.run(["bash", str(tmp_path / "k" / "make-tokens.sh"), str(tmp_path / "k" / "base")],
                           capture_output=True, text=True)  # fmt: skip
    assert again.returncode == 0 and "kept" in again.stderr


def test_tls_component_serves_https_with_the_scheduler_ca(tmp_path: Path) -> None:
    import kubernetes_validate

    docs = _render(tmp_path, with_tls=True)
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    (deployment,) = by_kind["Deployment"]
    (service,) = by_kind["Service"]
    for doc in (deployment, service):
        kubernetes_validate.validate(doc, "1.30.0", strict=True)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    fields = {f"FLEETMIND_{name.upper()}" for name in Settings.model_fields}
    assert set(env) <= fields
    assert {"FLEETMIND_TLS_CERT", "FLEETMIND_TLS_KEY", "FLEETMIND_SCHEDULER_CLIENT_CA"} <= set(env)
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert container[probe]["httpGet"]["scheme"] == "HTTPS"
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    for var in ("FLEETMIND_TLS_CERT", "FLEETMIND_TLS_KEY", "FLEETMIND_SCHEDULER_CLIENT_CA"):
        assert str(Path(env[var]).parent) in mounts
    certs = {c["metadata"]["name"]: c for c in by_kind["Certificate"]}
    assert certs["kube-scheduler-client"]["spec"]["issuerRef"]["name"] == "fleetmind-scheduler-ca"
    assert certs["fleetmind-tls"]["spec"]["issuerRef"]["name"] == "fleetmind-ca"
    # kube-scheduler dials the fixed ClusterIP, which the server certificate names
    ip = service["spec"]["clusterIP"]
    assert ip in certs["fleetmind-tls"]["spec"]["ipAddresses"]
    cfg = yaml.safe_load((DEPLOY / "kube-scheduler-config.yaml").read_text())
    (extender,) = cfg["extenders"]
    url = urlsplit(extender["urlPrefix"])
    assert (
        url.scheme == "https"
        and url.hostname == ip
        and url.port == service["spec"]["ports"][0]["port"]
    )
    (monitor,) = by_kind["ServiceMonitor"]
    assert monitor["spec"]["endpoints"][0]["scheme"] == "https"


def test_kube_scheduler_config_uses_https_and_a_client_certificate() -> None:
    cfg = yaml.safe_load((DEPLOY / "kube-scheduler-config.yaml").read_text())
    assert cfg["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    (extender,) = cfg["extenders"]
    assert set(extender) <= EXTENDER_KEYS, set(extender) - EXTENDER_KEYS
    assert extender["enableHTTPS"] is True
    assert set(extender["tlsConfig"]) <= TLS_KEYS
    assert {"certFile", "keyFile", "caFile"} <= set(extender["tlsConfig"])
    assert extender["urlPrefix"].endswith("/api/v1/scheduler")
    text = (DEPLOY / "kube-scheduler-config.yaml").read_text()
    # ignorable is a documented choice: both settings are explained
    assert "ignorable: true  ->" in text and "ignorable: false ->" in text


def test_servicemonitor_carries_the_release_label_of_the_rules() -> None:
    monitor = yaml.safe_load((K8S / "base" / "servicemonitor.yaml").read_text())
    rule = yaml.safe_load((K8S / "base" / "prometheusrule.yaml").read_text())
    assert monitor["metadata"]["labels"]["release"] == rule["metadata"]["labels"]["release"]
    assert "release" in (REPO_ROOT / "docs" / "deploy.md").read_text()


def test_the_image_installs_with_the_constraints() -> None:
    dockerfile = (DEPLOY / "container" / "Dockerfile").read_text()
    assert re.search(
        r"pip install [^\n]*\\\n\s+[^\n]*-r /tmp/ctx/requirements\.txt -c /tmp/ctx/constraints\.txt",
        dockerfile,
    )
    assert "constraints.txt" in (DEPLOY / "container" / "build.sh").read_text()
    # the health check is valid Python
    (cmd,) = re.findall(r"^\s+CMD (\[.*\])$", dockerfile, re.M)
    argv = json.loads(cmd)
    assert argv[:2] == ["python", "-c"]
    compile(argv[2], "HEALTHCHECK", "exec")
