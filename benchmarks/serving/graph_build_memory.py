"""``fleetmind graph build`` against an API server of realistic objects: peak RSS per cluster size,
the memory per pod, and the pods the graph CronJob's memory limit holds, written as JSON.

Usage (from the checkout root)::

    python -m benchmarks.serving.graph_build_memory [--nodes 2000] [--pods-per-node 5 15 30] \
        [--out benchmarks/results/serving/graph_build_memory.json]

An in-process fake API server pages (``limit``/``continue``) ``--nodes`` Nodes (8 GPUs each on
every other node, 40 images, ``managedFields``) and ``--nodes`` x each ``--pods-per-node`` pods of
about 7 KB of JSON each, the shape ``kubectl get pod -o json`` shows of a Deployment's pod
(``managedFields`` of the controller manager and the kubelet, 15 ``env`` entries, three probes, a
projected service-account volume, tolerations, conditions, container statuses); one Service
selects them, no EndpointSlices. ``fleetmind graph build`` runs as its own process, once per size,
and its peak RSS is that process's alone (``os.wait4``). A least-squares line through the sizes
gives MiB per 1,000 pods and the fixed part; ``cronjob`` compares them with the memory limit of
``deploy/kubernetes/graph/cronjob.yaml`` (the pods it holds at this node count). The JSON carries
the load averages before and after; peak RSS does not depend on the load.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from benchmarks.provenance import REPO_ROOT, RESULTS, fleetmind_command, load_now, provenance
from fleetmind import argtypes
from fleetmind.cli.runner import run_main

CRONJOB = REPO_ROOT / "deploy" / "kubernetes" / "graph" / "cronjob.yaml"
DOCUMENTED_PODS = 30_000
"""The cluster size docs/graph.md cites (2,000 nodes, 30,000 pods)."""


def _managed(manager: str, fields: dict[str, Any], subresource: str | None = None) -> dict:
    entry = {"manager": manager, "operation": "Update", "apiVersion": "v1",
             "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": fields}  # fmt: skip
    return entry | ({"subresource": subresource} if subresource else {})


def pod(i: int, node: str) -> dict[str, Any]:
    """A Deployment's pod as the API server returns it (about 7 KB of JSON)."""
    env = [{"name": f"ENV_{k}", "value": f"value-{k}-xxxxxxxxxxxxxxxx"} for k in range(15)]
    probe = {"httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"}, "periodSeconds": 10,
             "timeoutSeconds": 1, "successThreshold": 1, "failureThreshold": 3}  # fmt: skip
    conds = ("Initialized", "Ready", "ContainersReady", "PodScheduled", "PodReadyToStartContainers")
    spec_fields = {"f:containers": {'k:{"name":"web"}': {
        ".": {}, "f:env": {".": {}, **{f'k:{{"name":"ENV_{k}"}}': {".": {}, "f:name": {}, "f:value": {}}
                                      for k in range(15)}},
        "f:image": {}, "f:name": {}, "f:ports": {}, "f:resources": {}}}}  # fmt: skip
    status_fields = {"f:conditions": {f'k:{{"type":"{t}"}}': {".": {}, "f:lastProbeTime": {},
                     "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}} for t in conds},
                     "f:containerStatuses": {}, "f:hostIP": {}, "f:phase": {}, "f:podIP": {}}  # fmt: skip
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"web-7f9c6d5b4-{i:06d}", "namespace": "prod",
            "uid": f"0b3c7e2a-1f4d-4c8e-9a6b-{i:012d}", "resourceVersion": str(1_000_000 + i),
            "creationTimestamp": "2026-01-01T00:00:00Z", "generateName": "web-7f9c6d5b4-",
            "labels": {"app.kubernetes.io/name": "web", "app.kubernetes.io/instance": "web",
                       "pod-template-hash": "7f9c6d5b4", "app.kubernetes.io/version": "1.2.3"},
            "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-01-01T00:00:00Z",
                            "prometheus.io/scrape": "true", "prometheus.io/port": "9090"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                 "name": "web-7f9c6d5b4", "uid": "aaaa-bbbb", "controller": True,
                                 "blockOwnerDeletion": True}],
            "managedFields": [_managed("kube-controller-manager", {"f:spec": spec_fields}),
                              _managed("kubelet", {"f:status": status_fields}, "status")],
        },
        "spec": {
            "nodeName": node, "serviceAccountName": "web", "restartPolicy": "Always",
            "dnsPolicy": "ClusterFirst", "schedulerName": "default-scheduler",
            "terminationGracePeriodSeconds": 30,
            "containers": [{
                "name": "web", "image": "registry.example.com/web:1.2.3",
                "imagePullPolicy": "IfNotPresent",
                "ports": [{"containerPort": 8080, "protocol": "TCP", "name": "http"}], "env": env,
                "resources": {"limits": {"cpu": "2", "memory": "4Gi"},
                              "requests": {"cpu": "1", "memory": "2Gi"}},
                "volumeMounts": [{"name": "kube-api-access-abcde", "readOnly": True,
                                  "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "readinessProbe": probe, "livenessProbe": probe, "startupProbe": probe,
            }],
            "volumes": [{"name": "kube-api-access-abcde", "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {
                    "apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}}],
            "tolerations": [{"key": f"node.kubernetes.io/{k}", "operator": "Exists",
                             "effect": "NoExecute", "tolerationSeconds": 300}
                            for k in ("not-ready", "unreachable")],
        },
        "status": {
            "phase": "Running", "hostIP": "10.0.0.1", "podIP": "10.1.2.3",
            "podIPs": [{"ip": "10.1.2.3"}], "startTime": "2026-01-01T00:00:00Z",
            "qosClass": "Burstable",
            "conditions": [{"type": t, "status": "True", "lastProbeTime": None,
                            "lastTransitionTime": "2026-01-01T00:00:00Z"} for t in conds],
            "containerStatuses": [{"name": "web", "ready": True, "restartCount": 0,
                                   "image": "registry.example.com/web:1.2.3",
                                   "imageID": "registry.example.com/web@sha256:" + "a" * 64,
                                   "containerID": "containerd://" + "b" * 64, "started": True,
                                   "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
                                   "lastState": {}}],
        },
    }  # fmt: skip


def node(i: int) -> dict[str, Any]:
    """A Node as the API server returns it: 8 GPUs on every other node, 40 images."""
    cap = {"cpu": "64", "memory": "512Gi", "pods": "110"}
    labels = {"kubernetes.io/hostname": f"n{i}", "topology.kubernetes.io/zone": f"z{i % 3}"}
    if i % 2 == 0:
        cap["nvidia.com/gpu"] = "8"
        labels |= {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.count": "8"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": f"n{i}", "labels": labels, "uid": f"node-{i:08d}",
                     "managedFields": [_managed("kubelet", {"f:status": {f"f:c{k}": {} for k in range(40)}},
                                                "status")]},
        "spec": {"podCIDR": f"10.244.{i % 250}.0/24", "providerID": f"aws:///z/i-{i:08d}"},
        "status": {"capacity": cap, "allocatable": dict(cap),
                   "addresses": [{"type": "InternalIP", "address": f"10.0.{i // 250}.{i % 250}"},
                                 {"type": "Hostname", "address": f"ip-10-0-{i // 250}-{i % 250}"}],
                   "images": [{"names": [f"registry.example.com/img{k}@sha256:{'c' * 64}"],
                               "sizeBytes": 1_000_000 + k} for k in range(40)],
                   "nodeInfo": {"kubeletVersion": "v1.30.4", "osImage": "Ubuntu 22.04"}},
    }  # fmt: skip


class _Cluster:
    def __init__(self, nodes: int, pods_per_node: int) -> None:
        self.nodes, self.pods_per_node = nodes, pods_per_node

    def page(self, resource: str, start: int, limit: int) -> dict[str, Any]:
        total = {"nodes": self.nodes, "pods": self.nodes * self.pods_per_node, "services": 1}.get(
            resource, 0
        )
        end = min(total, start + (limit or total))
        if resource == "nodes":
            items = [node(i) for i in range(start, end)]
        elif resource == "pods":
            items = [pod(i, f"n{i // self.pods_per_node}") for i in range(start, end)]
        elif resource == "services":
            items = [{"metadata": {"name": "web", "namespace": "prod"},
                      "spec": {"selector": {"app.kubernetes.io/name": "web"}}}]  # fmt: skip
        else:
            items = []
        meta = {"continue": str(end)} if end < total else {}
        return {"kind": "List", "apiVersion": "v1", "metadata": meta, "items": items}


def _serve(cluster: _Cluster, port: int) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            u = urlparse(self.path)
            q = parse_qs(u.query)
            doc = cluster.page(u.path.rstrip("/").rsplit("/", 1)[-1],
                               int(q.get("continue", ["0"])[0]), int(q.get("limit", ["0"])[0]))  # fmt: skip
            body = json.dumps(doc).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _cronjob_limit_mib() -> float | None:
    """The graph CronJob's memory limit in MiB (``limits: memory: 2Gi``), None when not found."""
    m = re.search(r"limits:\s*\n\s*memory:\s*(\d+)(Mi|Gi)", CRONJOB.read_text())
    return None if m is None else float(m.group(1)) * (1024 if m.group(2) == "Gi" else 1)


def _build_wait4(kubeconfig: Path, out: Path) -> tuple[float, float, str]:
    """Run ``fleetmind graph build`` and reap it with ``os.wait4``: its own peak RSS (MiB), its
    wall time (s) and its summary line."""
    with tempfile.TemporaryFile("w+") as so, tempfile.TemporaryFile("w+") as se:
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [
                *fleetmind_command(),
                "graph",
                "build",
                "--kubeconfig",
                str(kubeconfig),
                "--out",
                str(out),
            ],
            stdout=so,
            stderr=se,
        )
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        so.seek(0)
        se.seek(0)
        if proc.returncode != 0:
            sys.stderr.write(se.read()[-4000:])
            raise SystemExit(proc.returncode)
        return usage.ru_maxrss / 1024.0, wall, so.read().strip()  # Linux: ru_maxrss in KiB


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=argtypes.positive_int, default=2000)
    ap.add_argument(
        "--pods-per-node", type=argtypes.positive_int, nargs="+", default=[5, 15, 30],
        help="one build per value: --nodes x this many pods",
    )  # fmt: skip
    ap.add_argument("--port", type=argtypes.nonnegative_int, default=0, help="0: any free port")
    ap.add_argument(
        "--out",
        type=argtypes.output_file,
        default=str(RESULTS / "serving" / "graph_build_memory.json"),
    )
    ap.add_argument("--note", default="", help="free text stored with the result (e.g. the load)")
    args = ap.parse_args(argv)

    load0 = load_now()
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for ppn in sorted(set(args.pods_per_node)):
            cluster = _Cluster(args.nodes, ppn)
            server = _serve(cluster, args.port)
            try:
                kc = Path(tmp) / "kubeconfig"
                url = f"http://127.0.0.1:{server.server_address[1]}"
                kc.write_text(json.dumps({
                    "apiVersion": "v1", "kind": "Config", "current-context": "b",
                    "clusters": [{"name": "b", "cluster": {"server": url}}],
                    "contexts": [{"name": "b", "context": {"cluster": "b", "user": "u"}}],
                    "users": [{"name": "u", "user": {"token": "x"}}],
                }))  # fmt: skip
                peak, wall, summary = _build_wait4(kc, Path(tmp) / "graph.json")
            finally:
                server.shutdown()
                server.server_close()
            runs.append({"nodes": args.nodes, "pods": args.nodes * ppn,
                         "pod_json_bytes": len(json.dumps(pod(0, "n0"))),
                         "peak_rss_mib": round(peak, 1), "wall_s": round(wall, 1),
                         "summary": summary})  # fmt: skip
            print(f"{args.nodes * ppn:,} pods: peak RSS {peak:.0f} MiB, {wall:.1f} s", flush=True)
    xs = [r["pods"] for r in runs]
    ys = [r["peak_rss_mib"] for r in runs]
    if len(xs) > 1:
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
            (x - mx) ** 2 for x in xs
        )
        fixed = my - slope * mx
    else:
        slope, fixed = float("nan"), float("nan")
    limit = _cronjob_limit_mib()
    fit = {
        "mib_per_1000_pods": round(slope * 1000, 2),
        "fixed_mib": round(fixed, 1),
        "pods_per_gib": round(1024 / slope) if slope > 0 else None,
    }
    cron: dict[str, Any] = {"file": str(CRONJOB.relative_to(REPO_ROOT)), "limit_mib": limit}
    if limit and slope > 0:
        cron["pods_within_limit"] = int((limit - fixed) / slope)
        cron["documented_pods"] = DOCUMENTED_PODS
        cron["documented_peak_mib"] = round(fixed + slope * DOCUMENTED_PODS, 1)
        cron["met"] = cron["documented_peak_mib"] <= limit
    out = {
        **provenance(__spec__.name, argv, load_start=load0, packages=("kubernetes",)),
        "build_command": "fleetmind graph build --kubeconfig KC --out GRAPH (fake API server)",
        "runs": runs,
        "fit": fit,
        "cronjob": cron,
        "note": args.note,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}: {fit}, cronjob {cron}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main, prog="benchmarks.serving.graph_build_memory"))
