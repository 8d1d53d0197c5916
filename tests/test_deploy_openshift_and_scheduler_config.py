"""The OpenShift overlay, the image's data folder for arbitrary uids, and kube-scheduler-config.yaml.

* OpenShift's default SCC ``restricted-v2`` admits a pod only with a uid from the namespace's range
  (``runAsUser: MustRunAsRange``) and its ``fsGroup`` (``MustRunAs``); it assigns both when the pod
  names none (docs.openshift.com, "Managing security context constraints"). The base names 10001.
* Red Hat's guideline for arbitrary user ids (docs.openshift.com, "Creating images", "Support
  arbitrary user ids"): the process runs as a random uid in group 0, so writable folders belong to
  group 0 with the owner's rights (``chgrp 0`` and ``chmod g=u``).
* kube-scheduler's HTTP extender (kubernetes ``pkg/scheduler/extender.go``, ``HTTPExtender.send``)
  fails with ``fmt.Errorf("failed %v with extender at URL %v, code %v", action, url, code)``, url
  being ``urlPrefix + "/" + verb``; it never writes "failed to run extender".
* A second scheduler needs its own profile name and leader-election lease (kubernetes.io,
  "Configure Multiple Schedulers"); the default lease is ``kube-system/kube-scheduler``.
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
DEPLOY = REPO_ROOT / "deploy"
K8S = DEPLOY / "kubernetes"
OPENSHIFT = K8S / "openshift"
FIXED_IDS = ("runAsUser", "runAsGroup", "fsGroup")


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _resources(kustomization_dir: Path) -> list[dict[str, Any]]:
    """The documents a kustomization lists, following directories (no transformers applied)."""
    kust = yaml.safe_load((kustomization_dir / "kustomization.yaml").read_text())
    out: list[dict[str, Any]] = []
    for entry in kust.get("resources", []):
        path = (kustomization_dir / entry).resolve()
        out += _resources(path) if path.is_dir() else _docs(path)
    return out


def _pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    if doc["kind"] == "CronJob":
        return doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return doc["spec"]["template"]["spec"]


def _apply_json6902(doc: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902 ``remove`` ops (the only kind the overlay uses); a missing path raises, as in
    kustomize."""
    out = copy.deepcopy(doc)
    for op in ops:
        assert op["op"] == "remove", op
        *parents, last = op["path"].lstrip("/").split("/")
        node = out
        for key in parents:
            node = node[key]
        del node[last]
    return out


def _patched_by_overlay() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the base and graph documents, the same after the overlay's patches), in Python."""
    kust = yaml.safe_load((OPENSHIFT / "kustomization.yaml").read_text())
    original = _resources(OPENSHIFT)
    patched = copy.deepcopy(original)
    for patch in kust["patches"]:
        target = patch["target"]
        ops = yaml.safe_load((OPENSHIFT / patch["path"]).read_text())
        hits = [
            i
            for i, d in enumerate(patched)
            if d["kind"] == target["kind"] and d["metadata"]["name"] == target["name"]
        ]
        assert len(hits) == 1, target
        patched[hits[0]] = _apply_json6902(patched[hits[0]], ops)
    return original, patched


def test_the_overlay_drops_the_fixed_ids_and_changes_nothing_else() -> None:
    kust = yaml.safe_load((OPENSHIFT / "kustomization.yaml").read_text())
    assert {"../base", "../graph"} <= set(kust["resources"])
    original, patched = _patched_by_overlay()
    pods = [d for d in original if d["kind"] in {"Deployment", "CronJob"}]
    assert {d["kind"] for d in pods} == {"Deployment", "CronJob"}
    for doc in pods:  # the base does name them: the overlay has something to remove
        assert all(k in _pod_spec(doc)["securityContext"] for k in FIXED_IDS), doc["kind"]
    for before, after in zip(original, patched, strict=True):
        expected = copy.deepcopy(before)
        if before["kind"] in {"Deployment", "CronJob"}:
            ctx = _pod_spec(after)["securityContext"]
            assert not set(FIXED_IDS) & set(ctx), (after["kind"], ctx)
            assert ctx["runAsNonRoot"] is True and ctx["seccompProfile"]["type"] == "RuntimeDefault"
            for key in FIXED_IDS:
                del _pod_spec(expected)["securityContext"][key]
        assert after == expected, before["kind"]
    for doc in patched:  # no container re-adds a uid of its own
        if doc["kind"] in {"Deployment", "CronJob"}:
            spec = _pod_spec(doc)
            for c in spec.get("initContainers", []) + spec["containers"]:
                assert not set(FIXED_IDS) & set(c.get("securityContext", {})), c["name"]


def test_kustomize_renders_the_overlay_without_fixed_ids(tmp_path: Path) -> None:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl not installed (kustomize)")
    shutil.copytree(K8S, tmp_path / "k", ignore=shutil.ignore_patterns("tokens.env"))
    made = subprocess.run(
        ["bash", str(tmp_path / "k" / "make-tokens.sh"), str(tmp_path / "k" / "base")],
        capture_output=True,
        text=True,
    )
    assert made.returncode == 0, made.stderr

    def render(name: str) -> list[dict[str, Any]]:
        out = subprocess.run(
            ["kubectl", "kustomize", str(tmp_path / "k" / name)], capture_output=True, text=True
        )
        assert out.returncode == 0, out.stderr
        return [d for d in yaml.safe_load_all(out.stdout) if d]

    plain = render("base") + render("graph")
    overlay = render("openshift")
    key = lambda d: (d["kind"], d["metadata"]["name"])  # noqa: E731
    assert sorted(map(key, overlay)) == sorted(map(key, plain))
    by_key = {key(d): d for d in overlay}
    for doc in plain:
        expected = copy.deepcopy(doc)
        if doc["kind"] in {"Deployment", "CronJob"}:
            for k in FIXED_IDS:
                del _pod_spec(expected)["securityContext"][k]
        assert by_key[key(doc)] == expected, key(doc)
    assert not re.search(r"runAsUser|runAsGroup|fsGroup", yaml.safe_dump_all(overlay))


def _dockerfile_instructions() -> list[str]:
    """The Dockerfile's instructions with continuation lines joined, comments dropped."""
    text = (DEPLOY / "container" / "Dockerfile").read_text()
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    return [ins.strip() for ins in re.split(r"(?<!\\)\n", "\n".join(lines)) if ins.strip()]


def test_the_data_folder_is_writable_by_an_arbitrary_uid_in_group_0() -> None:
    joined = " ".join(i.replace("\\\n", " ") for i in _dockerfile_instructions())
    owner = re.search(r"chown (\d+):(\d+) /var/lib/fleetmind\b", joined)
    assert owner and owner.group(2) == "0", "the data folder's group must be 0"
    mode = re.search(r"chmod (0?[0-7]{3}|g=u) /var/lib/fleetmind\b", joined)
    assert mode, "the data folder needs an explicit mode"
    if mode.group(1) != "g=u":
        bits = int(mode.group(1), 8)
        assert (bits >> 3) & 0o7 == (bits >> 6) & 0o7 == 0o7, oct(bits)  # group rwx = owner rwx
    # the chown/chmod come after the folder is made, in the same RUN
    assert joined.index("mkdir -p /var/lib/fleetmind") < owner.start() < mode.start()


def test_the_cache_is_under_tmp_not_under_a_read_only_home() -> None:
    env = next(i for i in _dockerfile_instructions() if i.startswith("ENV ") and "PATH=" in i)
    values = dict(re.findall(r"(\w+)=(\S+)", env.replace("\\\n", " ")))
    cache = values.get("FLEETMIND_CACHE_DIR") or values.get("XDG_CACHE_HOME")
    assert cache and cache.startswith("/tmp/"), values
    # /tmp is writable in the manifests (an emptyDir) while the root is read-only
    for path in (K8S / "base" / "deployment.yaml", K8S / "graph" / "cronjob.yaml"):
        (doc,) = _docs(path)
        spec = _pod_spec(doc)
        tmp = {v["name"] for v in spec["volumes"] if "emptyDir" in v}
        for c in spec["containers"]:
            assert c["securityContext"]["readOnlyRootFilesystem"] is True
            assert any(m["mountPath"] == "/tmp" and m["name"] in tmp for m in c["volumeMounts"])


def test_the_second_scheduler_variant_has_its_own_name_and_lease() -> None:
    text = (DEPLOY / "kube-scheduler-config.yaml").read_text()
    lines = text.splitlines()
    start = lines.index("#   leaderElection:")
    block = []
    for line in lines[start:]:
        if not line.startswith("#   "):
            break
        block.append(line[4:])
    variant = yaml.safe_load("\n".join(block))
    assert variant["leaderElection"]["leaderElect"] is True
    assert variant["leaderElection"]["resourceName"] not in {"", "kube-scheduler"}
    (profile,) = variant["profiles"]
    assert profile["schedulerName"] != "default-scheduler"
    assert f"spec.schedulerName: {profile['schedulerName']}" in text
    # the live configuration is still the default scheduler's
    cfg = yaml.safe_load(text)
    assert [p["schedulerName"] for p in cfg["profiles"]] == ["default-scheduler"]
    assert "leaderElection" not in cfg


def test_the_second_scheduler_variant_names_its_rbac_and_port() -> None:
    """kubernetes ``plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go``: the
    system:kube-scheduler ClusterRole has ``get``/``update`` on leases only for resourceNames
    ``kube-scheduler``; a second kube-scheduler static pod shares the host's port 10259."""
    text = (DEPLOY / "kube-scheduler-config.yaml").read_text()
    comment = " ".join(line.lstrip("# ") for line in text.splitlines() if line.startswith("#"))
    lease = re.search(r"resourceName: (\S+)", comment)
    assert lease is not None and lease.group(1) != "kube-scheduler"
    rbac = re.search(r"RBAC: .*?(?= Ports:)", comment)
    assert rbac is not None, "the second-scheduler variant names no RBAC step"
    for needed in ("system:kube-scheduler ClusterRole", "resourceNames", f"Add {lease.group(1)}",
                   "bind a separate ClusterRole", "kubectl edit clusterrole system:kube-scheduler"):  # fmt: skip
        assert needed in rbac.group(0), needed
    assert re.search(r"--secure-port 10259: start it with another --secure-port", comment)


def test_the_quoted_extender_error_is_the_one_kube_scheduler_writes() -> None:
    text = (DEPLOY / "kube-scheduler-config.yaml").read_text()
    (ext,) = yaml.safe_load(text)["extenders"]
    url = f"{ext['urlPrefix']}/{ext['filterVerb']}"
    expected = f"failed {ext['filterVerb']} with extender at URL {url}, code 503"
    assert expected in re.sub(r"\s*\n\s*#\s*", " ", text)
    for path in [DEPLOY / "kube-scheduler-config.yaml", *(REPO_ROOT / "docs").rglob("*.md")]:
        assert "failed to run extender" not in path.read_text(), path


def test_the_managed_resources_comment_names_every_pod_it_would_skip() -> None:
    text = (DEPLOY / "kube-scheduler-config.yaml").read_text()
    comment = re.sub(r"\s*\n\s*#\s*", " ", text[text.index("# Every pod is sent") :])
    for needle in (
        "IsInterested",
        "alibabacloud.com/gpu-milli",
        "alibabacloud.com/gpu-count",
        "nvidia.com/mig-",
        "one entry per profile",
        "CPU-only pods",
    ):
        assert needle in comment, needle


def test_the_cronjob_never_suggests_the_database_on_a_shared_volume() -> None:
    text = (K8S / "graph" / "cronjob.yaml").read_text()
    header = re.sub(r"\s*\n#\s*", " ", text[: text.index("apiVersion:")])
    sentence = next(s for s in re.split(r"(?<=[.:])\s", header) if "ReadWriteMany" in s)
    assert "graph alone" in sentence or "graph only" in sentence, sentence
    assert "stays on fleetmind-data" in header and "PostgreSQL" in header
