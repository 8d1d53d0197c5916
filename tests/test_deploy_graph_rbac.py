"""deploy/kubernetes/graph: the CronJob that rebuilds the dependency graph, with the account it needs.

docs/graph.md showed a CronJob with ``serviceAccountName: fleetmind-graph`` and a claim
``fleetmind-graphs``, but nothing in the repository made the ServiceAccount, its RBAC or the claim:
applied as documented the Job could not create its pod (``serviceaccount "fleetmind-graph" not
found``), and a namespaced Role could not grant the build what it lists (nodes are cluster-scoped;
pods, services and EndpointSlices are listed across all namespaces). The shipped manifests are
checked here against the code: the ClusterRole grants ``list`` on exactly the collections
``fleetmind graph build`` requests (recorded through the real kubernetes client), the binding
binds the CronJob's account to it, and the container's command parses with the CLI's own parser
and writes the file the base Deployment serves (``FLEETMIND_GRAPH``) on the volume it mounts.
kustomize is not needed: the kustomization's files are read as kustomize would (and rendered
with ``kubectl kustomize`` where kubectl is installed).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from fleetmind.data.paths import REPO_ROOT

KUBE = REPO_ROOT / "deploy" / "kubernetes"
GRAPH = KUBE / "graph"
BASE = KUBE / "base"
K8S_VERSION = "1.30.0"  # as tests/test_deploy.py
NAMESPACED = {"ServiceAccount", "CronJob"}


def _docs(folder: Path) -> list[dict[str, Any]]:
    kust = yaml.safe_load((folder / "kustomization.yaml").read_text())
    docs: list[dict[str, Any]] = []
    for name in kust["resources"]:
        path = folder / name
        assert path.is_file(), f"{folder.name}/kustomization.yaml names a missing file {name}"
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


def _one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind]
    return doc


def _base_container() -> dict[str, Any]:
    deployment = _one(_docs(BASE), "Deployment")
    (c,) = [
        c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "fleetmind"
    ]
    return c


def _requested_collections(monkeypatch: pytest.MonkeyPatch) -> set[tuple[str, str, str]]:
    """(method, API group, resource) of each request ``fetch_lists`` sends, through the real
    kubernetes client with only its transport replaced (an empty list for every request)."""
    from kubernetes import client

    from fleetmind.cli import graph as graph_cli

    seen: set[tuple[str, str, str]] = set()

    class _Raw:
        data = json.dumps({"items": []}).encode()

    class _Response:
        status = 200
        response = _Raw()

        def read(self) -> bytes:
            return _Raw.data

    def call_api(self: Any, method: str, url: str, *args: Any, **kw: Any) -> _Response:
        parts = urlsplit(url).path.strip("/").split("/")
        # /api/v1/<resource> (core) or /apis/<group>/<version>/<resource>; a namespaced path
        # (/namespaces/<ns>/...) would make a Role enough, and is not what the build asks
        assert "namespaces" not in parts, url
        group, resource = ("", parts[2]) if parts[0] == "api" else (parts[1], parts[3])
        assert len(parts) == (3 if parts[0] == "api" else 4), url  # a collection, not one object
        seen.add((method, group, resource))
        return _Response()

    monkeypatch.setattr(client.ApiClient, "call_api", call_api)
    monkeypatch.setattr(
        graph_cli, "_client_configuration", lambda *a, **k: client.Configuration(host="https://k")
    )
    nodes, pods, services, slices = graph_cli.fetch_lists(None, None, True)
    assert nodes["items"] == pods["items"] == services["items"] == slices["items"] == []
    return seen


def test_the_cluster_role_grants_list_on_what_the_build_lists(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    requested = _requested_collections(monkeypatch)
    assert {m for m, _, _ in requested} == {"GET"}  # collection GETs: the `list` verb
    wanted = {(g, r) for _, g, r in requested}
    assert wanted == {
        ("", "nodes"),
        ("", "pods"),
        ("", "services"),
        ("discovery.k8s.io", "endpointslices"),
    }  # what docs/graph.md and docs/deploy.md name

    role = _one(_docs(GRAPH), "ClusterRole")
    granted: set[tuple[str, str]] = set()
    for rule in role["rules"]:
        assert rule["verbs"] == ["list"], rule  # read-only, and no more than the build needs
        assert "resourceNames" not in rule and "nonResourceURLs" not in rule, rule
        for g in rule["apiGroups"]:
            for r in rule["resources"]:
                assert "*" not in (g, r), rule
                granted.add((g, r))
    assert granted == wanted


def test_the_cronjob_account_exists_and_is_bound_to_the_role() -> None:
    docs = _docs(GRAPH)
    kust = yaml.safe_load((GRAPH / "kustomization.yaml").read_text())
    namespace = yaml.safe_load((BASE / "kustomization.yaml").read_text())["namespace"]
    assert kust["namespace"] == namespace  # beside the base's Deployment and claim
    pod = _one(docs, "CronJob")["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    account = _one(docs, "ServiceAccount")
    assert account["metadata"]["name"] == pod["serviceAccountName"]
    role, binding = _one(docs, "ClusterRole"), _one(docs, "ClusterRoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    # a ClusterRoleBinding is cluster-scoped: kustomize's namespace need not reach its subjects,
    # so the subject names the namespace itself
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": namespace}
    ]


def test_the_cronjob_writes_the_graph_the_service_serves() -> None:
    from fleetmind.cli import build_parser

    docs = _docs(GRAPH)
    cron = _one(docs, "CronJob")
    assert cron["spec"]["schedule"] == "*/10 * * * *"  # docs/graph.md: every 10 minutes
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["command"] == ["fleetmind"]  # replaces the image's `fleetmind serve` entry point
    args = build_parser().parse_args(c["args"])
    assert (args.group, args.func.__name__) == ("graph", "_build")
    assert args.in_cluster and args.from_dir is None and not args.nvml

    service = _base_container()
    served = {e["name"]: e.get("value") for e in service["env"]}["FLEETMIND_GRAPH"]
    assert args.out == served
    # the same claim, mounted where the service mounts it
    base_pod = _one(_docs(BASE), "Deployment")["spec"]["template"]["spec"]
    claim_of = {
        v["name"]: v["persistentVolumeClaim"]["claimName"]
        for v in base_pod["volumes"]
        if "persistentVolumeClaim" in v
    }
    job_claims = {
        v["name"]: v["persistentVolumeClaim"]["claimName"]
        for v in pod["volumes"]
        if "persistentVolumeClaim" in v
    }

    def mount_of(container: dict[str, Any], claims: dict[str, str]) -> dict[str, str]:
        return {
            m["mountPath"]: claims[m["name"]]
            for m in container["volumeMounts"]
            if m["name"] in claims
        }

    service_mounts, job_mounts = mount_of(service, claim_of), mount_of(c, job_claims)
    (where,) = [p for p in service_mounts if served.startswith(p.rstrip("/") + "/")]
    assert job_mounts.get(where) == service_mounts[where]
    # a ReadWriteOnce claim mounts only on the node it is attached to: the Job's pod must follow
    # the FleetMind pod there
    (pvc,) = [
        d
        for d in _docs(BASE)
        if d["kind"] == "PersistentVolumeClaim" and d["metadata"]["name"] == service_mounts[where]
    ]
    if pvc["spec"]["accessModes"] != ["ReadWriteMany"]:
        (term,) = pod["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert term["topologyKey"] == "kubernetes.io/hostname"
        server_labels = _one(_docs(BASE), "Deployment")["spec"]["template"]["metadata"]["labels"]
        assert term["labelSelector"]["matchLabels"].items() <= server_labels.items()
        job_labels = cron["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"]
        service_doc = _one(_docs(BASE), "Service")
        assert not service_doc["spec"]["selector"].items() <= job_labels.items()  # not an endpoint
    # the Deployment's user and restrictions: it owns the graph file on the volume
    assert pod["securityContext"] == base_pod["securityContext"]
    assert c["securityContext"] == service["securityContext"]


def test_the_graph_manifests_validate_against_the_upstream_schemas() -> None:
    import kubernetes_validate

    for doc in _docs(GRAPH):
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)  # raises on any unknown field


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (kustomize) not installed")
def test_kustomize_renders_what_the_files_say() -> None:
    out = subprocess.run(
        ["kubectl", "kustomize", str(GRAPH)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    rendered = [d for d in yaml.safe_load_all(out) if d]
    assert sorted(d["kind"] for d in rendered) == sorted(d["kind"] for d in _docs(GRAPH))
    assert {d["metadata"].get("namespace") for d in rendered if d["kind"] in NAMESPACED} == {
        yaml.safe_load((BASE / "kustomization.yaml").read_text())["namespace"]
    }
    binding = _one(rendered, "ClusterRoleBinding")
    assert binding["subjects"] == _one(_docs(GRAPH), "ClusterRoleBinding")["subjects"]
    pod = _one(rendered, "CronJob")["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == "localhost/fleetmind-k8s:0.2.0"
