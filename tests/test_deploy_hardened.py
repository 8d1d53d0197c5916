"""deploy/kubernetes/networkpolicy and deploy/kubernetes/postgres, the two optional kustomize
Components: the policies admit what the shipped pods need and nothing else, and the PostgreSQL
Component runs several replicas without a claim that no longer exists.

Upstream definitions the checks model:
* NetworkPolicy semantics (a peer's ``namespaceSelector`` and ``podSelector`` in one entry are
  ANDed, entries are ORed; an absent ``ports`` allows every port; ``protocol`` defaults to TCP; a
  named port is the destination pod's container port of that name; ``ipBlock`` allows ``cidr``
  minus ``except``; hostNetwork pods count as their node's address):
  https://kubernetes.io/docs/concepts/services-networking/network-policies/ and
  kubernetes/api ``networking/v1/types.go`` (``NetworkPolicyPeer``, ``NetworkPolicyPort``);
* the control plane labels every namespace ``kubernetes.io/metadata.name=<name>``
  (same page, "Targeting a Namespace by its name"); CoreDNS keeps the ``k8s-app: kube-dns`` label
  (kubernetes/kubernetes ``cluster/addons/dns/coredns/coredns.yaml.base``); OpenShift's DNS pods
  run in ``openshift-dns`` with ``dns.operator.openshift.io/daemonset-dns: default`` on container
  port 5353 (openshift/cluster-dns-operator ``assets/dns/daemonset.yaml``);
* kustomize Components (``kind: Component``), ``$patch: delete`` and patches with a ``target``
  that matches nothing (no change): kubectl.docs.kubernetes.io "Components" and "patches".
Rendering uses ``kubectl kustomize`` like tests/test_deploy_cluster.py (skipped without kubectl);
the structural checks read the YAML files directly and always run.
"""

from __future__ import annotations

import ipaddress
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleetmind.data.paths import REPO_ROOT

K8S = REPO_ROOT / "deploy" / "kubernetes"
NS = "fleetmind"
SERVER = {"app.kubernetes.io/name": "fleetmind", "app.kubernetes.io/component": "server"}
GRAPH = {"app.kubernetes.io/name": "fleetmind", "app.kubernetes.io/component": "graph"}


def _render(tmp_path: Path, resources: list[str], components: list[str]) -> list[dict[str, Any]]:
    """``kubectl kustomize`` of an overlay (namespace fleetmind) of a copy of deploy/kubernetes
    listing ``resources`` and ``components`` (folder names there), with generated tokens."""
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl not installed (kustomize)")
    root = tmp_path / "k"
    shutil.copytree(K8S, root, ignore=shutil.ignore_patterns("tokens.env"))
    made = subprocess.run(["bash", str(root / "make-tokens.sh"), str(root / "base")],
                          capture_output=True, text=True)  # fmt: skip
    assert made.returncode == 0, made.stderr
    kust = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
            "namespace": NS, "resources": [f"../{r}" for r in resources],
            "components": [f"../{c}" for c in components]}  # fmt: skip
    return _kustomize(root, kust)


def _kustomize(root: Path, kust: dict[str, Any]) -> list[dict[str, Any]]:
    """Render ``kust`` written as ``root``/overlay/kustomization.yaml."""
    (root / "overlay").mkdir()
    (root / "overlay" / "kustomization.yaml").write_text(yaml.safe_dump(kust))
    out = subprocess.run(["kubectl", "kustomize", str(root / "overlay")], capture_output=True,
                         text=True)  # fmt: skip
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def _pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    """The pod template's spec of a Deployment or CronJob."""
    if doc["kind"] == "CronJob":
        return doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return doc["spec"]["template"]["spec"]


def _pod_labels(doc: dict[str, Any]) -> dict[str, str]:
    """The pod template's labels of a Deployment or CronJob."""
    if doc["kind"] == "CronJob":
        return doc["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"]
    return doc["spec"]["template"]["metadata"]["labels"]


def _one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


# -- a NetworkPolicy evaluator (upstream semantics, see the module docstring) -------------------

Endpoint = dict[str, Any]  # {"ns": str, "labels": {...}, "ports": {name: int}} or {"ip": str}


def _selects(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """A LabelSelector with matchLabels only (the only form these manifests use); {} selects all."""
    assert set(selector or {}) <= {"matchLabels"}, selector
    return all(labels.get(k) == v for k, v in (selector or {}).get("matchLabels", {}).items())


def _peer_matches(peer: dict[str, Any], policy_ns: str, other: Endpoint) -> bool:
    """Whether one ``from``/``to`` entry matches ``other`` (a pod, or a node/external address)."""
    if "ipBlock" in peer:
        if "ip" not in other:
            return False  # pod IPs are ephemeral: the manifests never rely on ipBlock for pods
        ip = ipaddress.ip_address(other["ip"])
        block = peer["ipBlock"]
        return ip in ipaddress.ip_network(block["cidr"]) and not any(
            ip in ipaddress.ip_network(e) for e in block.get("except", [])
        )
    if "ip" in other:
        return False  # a hostNetwork pod or a node: selectors do not match it (most plugins)
    if "namespaceSelector" in peer:
        ns_ok = _selects(peer["namespaceSelector"], {"kubernetes.io/metadata.name": other["ns"]})
    else:
        ns_ok = other["ns"] == policy_ns
    return ns_ok and _selects(peer.get("podSelector"), other["labels"])


def _port_matches(rule_port: dict[str, Any], port: int, protocol: str, dest: Endpoint) -> bool:
    if rule_port.get("protocol", "TCP") != protocol:
        return False
    want = rule_port.get("port")
    if want is None:
        return True
    if isinstance(want, str):  # a named port: the destination pod's container port of that name
        return dest.get("ports", {}).get(want) == port
    return want == port


def _allowed(
    policy: dict[str, Any], direction: str, pod: Endpoint, other: Endpoint, port: int, proto: str
) -> bool:
    """Whether ``policy`` (selecting ``pod``) lets a connection in (``direction`` "ingress", from
    ``other`` to ``pod``'s ``port``) or out ("egress", from ``pod`` to ``other``'s ``port``)."""
    spec = policy["spec"]
    assert _selects(spec["podSelector"], pod["labels"])
    dest = pod if direction == "ingress" else other
    key = "from" if direction == "ingress" else "to"
    for rule in spec.get(direction, []):
        peers = rule.get(key)
        peer_ok = not peers or any(_peer_matches(p, policy["metadata"]["namespace"], other)
                                   for p in peers)  # fmt: skip
        ports = rule.get("ports")
        if peer_ok and (not ports or any(_port_matches(p, port, proto, dest) for p in ports)):
            return True
    return False


def _container_ports(doc: dict[str, Any]) -> dict[str, int]:
    return {p["name"]: p["containerPort"] for c in _pod_spec(doc)["containers"]
            for p in c.get("ports", [])}  # fmt: skip


# -- structural checks, no kubectl ----------------------------------------------------------------


def test_the_components_name_the_shipped_labels_claims_and_ports() -> None:
    """Read straight from the files: the policies select the pods the Deployment and the CronJob
    label, the server policy's port is the container port the Service targets, and the PostgreSQL
    Component deletes the base's claim and mounts the one it ships."""
    deployment = yaml.safe_load((K8S / "base" / "deployment.yaml").read_text())
    cronjob = yaml.safe_load((K8S / "graph" / "cronjob.yaml").read_text())
    service = yaml.safe_load((K8S / "base" / "service.yaml").read_text())
    assert yaml.safe_load((K8S / "networkpolicy" / "kustomization.yaml").read_text())["kind"] == (
        "Component"
    )
    text = (K8S / "networkpolicy" / "networkpolicy.yaml").read_text()
    policies = {p["metadata"]["name"]: p for p in yaml.safe_load_all(text)}
    server, graph = policies["fleetmind-server"], policies["fleetmind-graph"]
    assert _selects(server["spec"]["podSelector"], _pod_labels(deployment))
    assert not _selects(server["spec"]["podSelector"], _pod_labels(cronjob))
    assert _selects(graph["spec"]["podSelector"], _pod_labels(cronjob))
    assert not _selects(graph["spec"]["podSelector"], _pod_labels(deployment))
    target = service["spec"]["ports"][0]["targetPort"]
    for rule in server["spec"]["ingress"]:
        assert [p["port"] for p in rule["ports"]] == [target]
    assert target in _container_ports(deployment)

    pg = K8S / "postgres"
    kust = yaml.safe_load((pg / "kustomization.yaml").read_text())
    assert kust["kind"] == "Component"
    base_claim = yaml.safe_load((K8S / "base" / "pvc.yaml").read_text())["metadata"]["name"]
    deleted = yaml.safe_load((pg / "pvc-delete.yaml").read_text())
    assert deleted["$patch"] == "delete" and deleted["metadata"]["name"] == base_claim
    shared = yaml.safe_load((pg / "pvc-graph.yaml").read_text())
    assert shared["spec"]["accessModes"] == ["ReadWriteMany"]
    assert "storageClassName" not in shared["spec"]  # left to the user, documented
    patched = yaml.safe_load((pg / "deployment-postgres.yaml").read_text())
    (volume,) = _pod_spec(patched)["volumes"]
    assert volume["persistentVolumeClaim"]["claimName"] == shared["metadata"]["name"]
    assert volume["name"] in {v["name"] for v in _pod_spec(deployment)["volumes"]}


# -- rendered ------------------------------------------------------------------------------------


def test_the_policies_let_in_and_out_what_the_pods_need_and_nothing_else(tmp_path: Path) -> None:
    import kubernetes_validate

    docs = _render(tmp_path, ["base", "graph"], ["networkpolicy"])
    deployment = _one(docs, "Deployment", "fleetmind")
    cronjob = _one(docs, "CronJob", "fleetmind-graph")
    server = _one(docs, "NetworkPolicy", "fleetmind-server")
    graph = _one(docs, "NetworkPolicy", "fleetmind-graph")
    for policy in (server, graph):
        kubernetes_validate.validate(policy, "1.30.0", strict=True)
        assert policy["metadata"]["namespace"] == deployment["metadata"]["namespace"] == NS
    port = _container_ports(deployment)["http"]
    pod = {"ns": NS, "labels": _pod_labels(deployment), "ports": _container_ports(deployment)}
    job = {"ns": NS, "labels": _pod_labels(cronjob), "ports": {}}
    assert _selects(server["spec"]["podSelector"], pod["labels"])
    assert not _selects(server["spec"]["podSelector"], job["labels"])
    alertmanager = {"ns": "monitoring", "labels": {"app.kubernetes.io/name": "alertmanager"}}
    stranger = {"ns": "default", "labels": {"app": "web"}}
    scheduler = {"ip": "192.0.2.10"}  # hostNetwork on a control-plane node of the placeholder
    assert _allowed(server, "ingress", pod, alertmanager, port, "TCP")
    assert _allowed(server, "ingress", pod, scheduler, port, "TCP")
    assert not _allowed(server, "ingress", pod, alertmanager, 9999, "TCP")
    assert not _allowed(server, "ingress", pod, stranger, port, "TCP")
    assert not _allowed(server, "ingress", pod, {"ip": "203.0.113.5"}, port, "TCP")
    kube_dns = {"ns": "kube-system", "labels": {"k8s-app": "kube-dns"}, "ports": {}}
    for proto in ("UDP", "TCP"):
        assert _allowed(server, "egress", pod, kube_dns, 53, proto)
        # namespace AND pod selector: not any pod of kube-system, not kube-dns on another port
        other = {"ns": "kube-system", "labels": {"k8s-app": "other"}}
        assert not _allowed(server, "egress", pod, other, 53, proto)
    # OpenShift: the DNS Operator's CoreDNS pods listen on 5353 behind dns-default's 53
    # (openshift/cluster-dns-operator assets/dns/daemonset.yaml; label set by its controller)
    ocp_dns = {
        "ns": "openshift-dns",
        "labels": {"dns.operator.openshift.io/daemonset-dns": "default"},
    }
    for proto in ("UDP", "TCP"):
        assert _allowed(server, "egress", pod, ocp_dns, 5353, proto)
        assert not _allowed(server, "egress", pod, ocp_dns, 53, proto)  # before the rewrite
        assert not _allowed(server, "egress", pod, kube_dns, 5353, proto)  # ports per rule
        for label, ns in (("other", "openshift-dns"), ("default", "default")):
            stray = {"ns": ns, "labels": {"dns.operator.openshift.io/daemonset-dns": label}}
            assert not _allowed(server, "egress", pod, stray, 5353, proto)
    prometheus = {"ns": "monitoring", "labels": {"app.kubernetes.io/name": "prometheus"}}
    assert _allowed(server, "egress", pod, prometheus, 9090, "TCP")
    assert _allowed(server, "egress", pod, alertmanager, 9093, "TCP")
    assert _allowed(server, "egress", pod, {"ip": "198.51.100.7"}, 5432, "TCP")
    assert not _allowed(server, "egress", pod, stranger, 443, "TCP")
    # the graph Job: out to the API server endpoints (after kube-proxy's DNAT: 6443), in: nothing
    assert _selects(graph["spec"]["podSelector"], job["labels"])
    assert not _selects(graph["spec"]["podSelector"], pod["labels"])
    apiserver = {"ip": "192.0.2.10"}
    assert _allowed(graph, "egress", job, apiserver, 6443, "TCP")
    assert not _allowed(graph, "egress", job, apiserver, 2379, "TCP")  # etcd stays closed
    assert "Ingress" in graph["spec"]["policyTypes"] and not graph["spec"].get("ingress")
    assert not _allowed(graph, "ingress", job, alertmanager, 8000, "TCP")


def _claims_referenced(docs: list[dict[str, Any]]) -> dict[str, set[str]]:
    """``kind/name -> claims`` every Deployment and CronJob pod mounts."""
    return {f"{d['kind']}/{d['metadata']['name']}": {
                v["persistentVolumeClaim"]["claimName"]
                for v in _pod_spec(d).get("volumes", []) if "persistentVolumeClaim" in v}
            for d in docs if d["kind"] in ("Deployment", "CronJob")}  # fmt: skip


@pytest.mark.parametrize("with_graph", [True, False])
def test_postgres_runs_replicas_with_no_missing_claim(tmp_path: Path, with_graph: bool) -> None:
    import kubernetes_validate

    docs = _render(tmp_path, ["base", "graph"] if with_graph else ["base"], ["postgres"])
    claims = {d["metadata"]["name"]: d for d in docs if d["kind"] == "PersistentVolumeClaim"}
    for owner, used in _claims_referenced(docs).items():
        assert used and used <= set(claims), f"{owner} mounts {used - set(claims)}, not rendered"
    assert "fleetmind-data" not in claims
    for claim in claims.values():
        assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
        assert claim["metadata"]["namespace"] == NS
    deployment = _one(docs, "Deployment", "fleetmind")
    assert deployment["spec"]["replicas"] >= 2
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    kubernetes_validate.validate(deployment, "1.30.0", strict=True)
    spec = _pod_spec(deployment)
    (server,) = spec["containers"]
    (url,) = [e for e in server["env"] if e["name"] == "FLEETMIND_DATABASE_URL"]
    assert set(url) == {"name", "valueFrom"}, url  # the base's SQLite value is gone
    ref = url["valueFrom"]["secretKeyRef"]
    assert ref["name"] and ref["key"] and not any(d["kind"] == "Secret" and d["metadata"]["name"]
                                                  == ref["name"] for d in docs)  # fmt: skip
    assert not any("sqlite" in str(e.get("value", "")) for e in server["env"])
    # the graph file, on the shared claim in every pod that reads or writes it
    graph_dir = str(
        Path({e["name"]: e.get("value") for e in server["env"]}["FLEETMIND_GRAPH"]).parent
    )
    pods = [spec] + ([_pod_spec(_one(docs, "CronJob", "fleetmind-graph"))] if with_graph else [])
    for pod in pods:
        volumes = {v["name"]: v for v in pod["volumes"]}
        for c in pod.get("initContainers", []) + pod["containers"]:
            (mount,) = [m for m in c["volumeMounts"] if m["mountPath"] == graph_dir]
            assert volumes[mount["name"]]["persistentVolumeClaim"]["claimName"] in claims
    if with_graph:
        cronjob = _one(docs, "CronJob", "fleetmind-graph")
        kubernetes_validate.validate(cronjob, "1.30.0", strict=True)
        affinity = _pod_spec(cronjob).get("affinity", {}).get("podAffinity", {})
        assert not affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    else:
        assert not [d for d in docs if d["kind"] == "CronJob"]


def test_base_and_graph_alone_keep_their_claim_and_affinity(tmp_path: Path) -> None:
    """Without the Component nothing changes (and the claim check above is not vacuous)."""
    docs = _render(tmp_path, ["base", "graph"], [])
    assert set().union(*_claims_referenced(docs).values()) == {"fleetmind-data"}
    cronjob = _pod_spec(_one(docs, "CronJob", "fleetmind-graph"))
    assert cronjob["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert _one(docs, "Deployment", "fleetmind")["spec"]["strategy"]["type"] == "Recreate"


def test_base_tls_networkpolicy_and_postgres_render_together(tmp_path: Path) -> None:
    docs = _render(tmp_path, ["base", "graph"], ["tls", "networkpolicy", "postgres"])
    namespaced = [d for d in docs if d["kind"] not in {"Namespace", "ClusterRole",
                                                       "ClusterRoleBinding"}]  # fmt: skip
    assert {d["metadata"].get("namespace") for d in namespaced} == {NS}
    deployment = _one(docs, "Deployment", "fleetmind")
    (server,) = _pod_spec(deployment)["containers"]
    env = {e["name"]: e for e in server["env"]}
    assert (
        "FLEETMIND_TLS_CERT" in env and "secretKeyRef" in env["FLEETMIND_DATABASE_URL"]["valueFrom"]
    )
    assert deployment["spec"]["replicas"] >= 2
    assert {d["metadata"]["name"] for d in docs if d["kind"] == "NetworkPolicy"} == {
        "fleetmind-server", "fleetmind-graph"}  # fmt: skip
    claims = {d["metadata"]["name"] for d in docs if d["kind"] == "PersistentVolumeClaim"}
    assert set().union(*_claims_referenced(docs).values()) <= claims


def test_the_documented_postgres_overlay_renders(tmp_path: Path) -> None:
    """docs/deploy.md's overlay, as written there (paths relative to deploy/kubernetes/overlay)."""
    guide = (REPO_ROOT / "docs" / "deploy.md").read_text()
    section = guide.split("### Several replicas (PostgreSQL)")[1].split("\n### ")[0]
    block = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert block, "docs/deploy.md no longer shows the PostgreSQL overlay"
    kust = yaml.safe_load(block[1])
    assert "../postgres" in kust["components"] and "../graph" in kust["resources"]
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl not installed (kustomize)")
    root = tmp_path / "k"
    shutil.copytree(K8S, root, ignore=shutil.ignore_patterns("tokens.env"))
    subprocess.run(["bash", str(root / "make-tokens.sh"), str(root / "base")], check=True,
                   capture_output=True)  # fmt: skip
    docs = _kustomize(root, kust)
    claims = {d["metadata"]["name"] for d in docs if d["kind"] == "PersistentVolumeClaim"}
    assert set().union(*_claims_referenced(docs).values()) <= claims
