"""deploy/ as a real cluster uses it: generated tokens, the TLS component, kube-scheduler's
configuration, the ServiceMonitor's release label, the image's constraints.

Upstream definitions checked against:
* kube-scheduler ``KubeSchedulerConfiguration`` ``extenders``: kubernetes/kubernetes
  ``staging/src/k8s.io/kube-scheduler/config/v1/types.go`` (``Extender``, ``ExtenderTLSConfig``
  JSON tags; v1.30+);
* kube-prometheus-stack's Prometheus selects ServiceMonitors and PrometheusRules by
  ``release: <Helm release>`` (its ``prometheus.prometheusSpec.serviceMonitorSelector`` default);
* kustomize's ``namespace:`` field sets the namespace of the kustomization's own resources only;
  a Component's resources are added to the kustomization that lists it (kubernetes-sigs/kustomize
  ``api/krusty`` component tests, kubectl.docs.kubernetes.io "Components"), and cert-manager's
  ``Issuer`` signs only Certificates of its own namespace (cert-manager.io/docs/concepts/issuer);
* Alertmanager's ``webhook_config`` ``http_config`` (``authorization.credentials_file``,
  ``tls_config.ca_file``: prometheus/common ``config/http_config.go``), and the Prometheus
  Operator's ``AlertmanagerSpec.secrets``: Secrets of Alertmanager's own namespace, mounted at
  ``/etc/alertmanager/secrets/<secret-name>`` (prometheus-operator ``Documentation/api.md``).
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


CLUSTER_SCOPED = {"Namespace"}
NAMESPACED = {"Secret", "Service", "PersistentVolumeClaim", "Deployment", "ServiceMonitor",
              "PrometheusRule", "Certificate", "Issuer"}  # fmt: skip


def _render(
    tmp_path: Path, with_tls: bool, overlay_kust: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """``kubectl kustomize`` of an overlay of a copy of deploy/kubernetes: the base (and the TLS
    component), or ``overlay_kust`` as written in deploy/kubernetes/overlay (``../base``)."""
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl not installed (kustomize)")
    shutil.copytree(K8S, tmp_path / "k", ignore=shutil.ignore_patterns("tokens.env"))
    made = subprocess.run(["bash", str(tmp_path / "k" / "make-tokens.sh"), str(tmp_path / "k" / "base")],
                          capture_output=True, text=True)  # fmt: skip
    assert made.returncode == 0, made.stderr
    overlay = tmp_path / "overlay" if overlay_kust is None else tmp_path / "k" / "overlay"
    overlay.mkdir()
    kust: dict[str, Any] = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                            "resources": ["../k/base"]}  # fmt: skip
    if with_tls:
        kust["components"] = ["../k/tls"]
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(overlay_kust or kust))
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


def test_kube_scheduler_config_lets_the_extender_see_every_feasible_node() -> None:
    """kube-scheduler's default (unset or 0) filters only an adaptive share of a cluster of 100
    nodes or more per pod, from a start index that rotates (numFeasibleNodesToFind,
    nextStartNodeIndex: kubernetes pkg/scheduler/schedule_one.go), so the extender would choose
    within a moving window and spread one job's pods; 100 sends every feasible node. No profile may
    override it with a smaller share (KubeSchedulerProfile.percentageOfNodesToScore)."""
    cfg = yaml.safe_load((DEPLOY / "kube-scheduler-config.yaml").read_text())
    assert cfg.get("percentageOfNodesToScore") == 100
    for profile in cfg["profiles"]:
        assert profile.get("percentageOfNodesToScore", 100) == 100


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


def _documented_overlays() -> dict[str, dict[str, Any]]:
    """The TLS overlays the documentation shows: docs/deploy.md's, and the usage comment of
    deploy/kubernetes/tls/kustomization.yaml."""
    docs = (REPO_ROOT / "docs" / "deploy.md").read_text()
    block = re.search(r"Use it from an overlay:\n\n```yaml\n(.*?)```", docs, re.S)
    assert block, "docs/deploy.md no longer shows the TLS overlay"
    comment = (K8S / "tls" / "kustomization.yaml").read_text().split("\napiVersion:")[0]
    usage = "\n".join(ln[4:] for ln in comment.splitlines() if ln.startswith("#   "))
    head = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization"}
    return {"docs": yaml.safe_load(block[1]), "comment": {**head, **yaml.safe_load(usage)}}


def _namespaces(docs: list[dict[str, Any]]) -> dict[str, str | None]:
    """``kind/name -> metadata.namespace`` of every namespaced object (every kind is known)."""
    kinds = {d["kind"] for d in docs}
    assert kinds <= CLUSTER_SCOPED | NAMESPACED, kinds - CLUSTER_SCOPED - NAMESPACED
    return {
        f"{d['kind']}/{d['metadata']['name']}": d["metadata"].get("namespace")
        for d in docs
        if d["kind"] in NAMESPACED
    }


@pytest.mark.parametrize("source", ["docs", "comment"])
def test_documented_tls_overlay_puts_every_object_in_the_fleetmind_namespace(
    tmp_path: Path, source: str
) -> None:
    """The overlay as documented: the cert-manager objects of the component land in ``fleetmind``
    with the pod that mounts their Secrets (kubectl would otherwise put them in its current
    namespace)."""
    overlay = _documented_overlays()[source]
    assert overlay["namespace"] == "fleetmind"
    docs = _render(tmp_path, with_tls=True, overlay_kust=overlay)
    namespaces = _namespaces(docs)
    assert {k for k in namespaces if k.startswith(("Certificate/", "Issuer/"))}, namespaces
    assert {k: v for k, v in namespaces.items() if v != "fleetmind"} == {}
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "Namespace"] == ["fleetmind"]
    # the Secrets the pod mounts are the Certificates' (in the same namespace, as checked above)
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    mounted = {v["secret"]["secretName"] for v in deployment["spec"]["template"]["spec"]["volumes"]
               if "secret" in v}  # fmt: skip
    made = {d["spec"]["secretName"] for d in docs if d["kind"] == "Certificate"}
    assert mounted and mounted <= made, mounted - made


def test_tls_component_objects_name_fleetmind_without_an_overlay_namespace(tmp_path: Path) -> None:
    """An overlay without ``namespace:`` (the one documented before) still keeps the component's
    Issuers and Certificates in ``fleetmind``: certificates.yaml names it."""
    docs = _render(tmp_path, with_tls=True)
    namespaces = _namespaces(docs)
    assert {k: v for k, v in namespaces.items() if v != "fleetmind"} == {}
    for doc in yaml.safe_load_all((K8S / "tls" / "certificates.yaml").read_text()):
        assert doc["metadata"]["namespace"] == "fleetmind", doc["metadata"]["name"]


def _alertmanager_kubernetes_receiver() -> dict[str, Any]:
    """The commented Kubernetes/TLS receiver of deploy/alertmanager.yml, uncommented."""
    text = (DEPLOY / "alertmanager.yml").read_text().split("# Kubernetes variant")[1]
    block = [ln[4:] for ln in text.splitlines() if re.match(r"  # [ -]", ln)]
    (receiver,) = yaml.safe_load("\n".join(block))
    return receiver


def test_alertmanager_reaches_the_tls_service_from_another_namespace(tmp_path: Path) -> None:
    """kube-prometheus-stack's Alertmanager (namespace ``monitoring``) cannot resolve the short
    name ``fleetmind`` and, with the TLS component, must speak HTTPS and trust fleetmind-ca."""
    from fleetmind.serving.app import create_app

    receiver = _alertmanager_kubernetes_receiver()
    (hook,) = receiver["webhook_configs"]
    docs = _render(tmp_path, with_tls=True)
    (service,) = [d for d in docs if d["kind"] == "Service"]
    (cert,) = [
        d for d in docs if d["kind"] == "Certificate" and d["metadata"]["name"] == "fleetmind-tls"
    ]
    url = urlsplit(hook["url"])
    assert url.scheme == "https"
    assert url.hostname == f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc"
    assert url.hostname in cert["spec"]["dnsNames"]
    assert url.port == service["spec"]["ports"][0]["port"]
    app = create_app(Settings(telemetry="sim", database_url=f"sqlite:///{tmp_path / 'fm.db'}"))
    assert "post" in app.openapi()["paths"][url.path]  # the webhook route
    # the bearer token and the CA from one Secret of Alertmanager's namespace, as documented
    auth, tls = hook["http_config"]["authorization"], hook["http_config"]["tls_config"]
    assert auth["type"] == "Bearer"
    files = [Path(auth["credentials_file"]), Path(tls["ca_file"])]
    (mount,) = {f.parent for f in files}
    assert mount.parent == Path("/etc/alertmanager/secrets")
    guide = (REPO_ROOT / "docs" / "deploy.md").read_text()
    assert hook["url"] in guide and "alertmanagerSpec.secrets" in guide
    (create,) = re.findall(
        r"kubectl -n \S+ create secret generic \S+ .*", guide.split(hook["url"])[1]
    )
    assert f"generic {mount.name} " in create
    assert all(f"--from-file={f.name}" in create for f in files), create
    # the shipped receiver's comment names the token the manifests really set
    (tokens,) = [d for d in docs if d["kind"] == "Secret"]
    shipped = (DEPLOY / "alertmanager.yml").read_text().split("authorization:")[0]
    assert "FLEETMIND_INGEST_TOKEN" in tokens["data"]
    assert "FLEETMIND_INGEST_TOKEN" in shipped.rsplit("http_config:", 1)[1]
    # and the variant is a valid configuration in place of the shipped receiver
    amtool = shutil.which("amtool")
    if amtool is None:
        pytest.skip("amtool not installed (Debian package prometheus-alertmanager)")
    cfg = yaml.safe_load((DEPLOY / "alertmanager.yml").read_text())
    cfg["receivers"] = [r for r in cfg["receivers"] if r["name"] != "fleetmind"] + [receiver]
    (tmp_path / "alertmanager.yml").write_text(yaml.safe_dump(cfg))
    out = subprocess.run([amtool, "check-config", str(tmp_path / "alertmanager.yml")],
                         capture_output=True, text=True)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
