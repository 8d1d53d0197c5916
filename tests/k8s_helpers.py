"""Helpers for the Kubernetes tests: openb fleets as telemetry nodes, openb pods as ``v1.Pod`` JSON.

``ExtenderArgs`` documents follow ``staging/src/k8s.io/kube-scheduler/extender/v1/types.go``
(kubernetes/kubernetes): Go field names as keys (``Pod``, ``Nodes``, ``NodeNames``), since the Go
structs carry no JSON tags; ``Pod`` and ``Nodes`` are ``k8s.io/api/core/v1`` objects (JSON tags in
camelCase: ``metadata``, ``spec.containers[].resources.limits``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fleetmind.data.openb import GPU_MODELS, PodTrace
from fleetmind.envs.core import ClusterState, Pod
from fleetmind.serving.telemetry.base import GpuState, NodeState


def state_nodes(state: ClusterState, cluster: str = "k8s") -> list[NodeState]:
    """The simulator's state as telemetry nodes (same free GPU milli, CPU and memory)."""
    out = []
    for i in range(state.n_nodes):
        model = GPU_MODELS[int(state.model_id[i])] if state.model_id[i] >= 0 else ""
        gpus = [
            GpuState(
                index=j,
                model=model,
                mem_total_mib=16_000.0,
                mem_used_mib=16_000.0 * (1 - int(state.gpu_idle[i, j]) / 1000),
                free_milli=int(state.gpu_idle[i, j]),
            )
            for j in range(int(state.num_gpu[i]))
        ]
        out.append(
            NodeState(
                name=str(state.names[i]),
                cluster=cluster,
                gpus=gpus,
                cpu_milli=int(state.cpu_cap[i]),
                cpu_milli_free=int(state.cpu_free[i]),
                memory_mib=int(state.mem_cap[i]),
                memory_mib_free=int(state.mem_free[i]),
            )
        )
    return out


def pod_json(trace: PodTrace, i: int, namespace: str = "openb") -> dict[str, Any]:
    """Pod ``i`` of an openb trace as a ``v1.Pod``: whole GPUs as ``nvidia.com/gpu``, shares as
    the GPU-sharing scheduler's ``alibabacloud.com/gpu-milli``/``gpu-count`` annotations."""
    num_gpu, milli = int(trace.num_gpu[i]), int(trace.gpu_milli[i])
    limits: dict[str, str] = {}
    ann: dict[str, str] = {}
    if num_gpu and milli >= 1000:
        limits["nvidia.com/gpu"] = str(num_gpu)
    elif num_gpu:
        ann["alibabacloud.com/gpu-milli"] = str(milli)
        ann["alibabacloud.com/gpu-count"] = str(num_gpu)
    if trace.gpu_spec[i]:
        ann["alibabacloud.com/gpu-card-model"] = str(trace.gpu_spec[i])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": str(trace.pod_names[i]),
            "namespace": namespace,
            "uid": f"uid-{i:06d}",
            "annotations": ann,
        },
        "spec": {
            "schedulerName": "default-scheduler",
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example/job:1",
                    "resources": {
                        "requests": {
                            "cpu": f"{int(trace.cpu_milli[i])}m",
                            "memory": f"{int(trace.memory_mib[i])}Mi",
                        },
                        "limits": limits,
                    },
                }
            ],
        },
    }


def node_json(node: NodeState) -> dict[str, Any]:
    """A ``v1.Node`` for a telemetry node (allocatable CPU, memory and GPUs)."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node.name,
            "labels": {
                "kubernetes.io/hostname": node.name,
                "alibabacloud.com/gpu-card-model": node.gpus[0].model if node.gpus else "",
            },
        },
        "status": {
            "allocatable": {
                "cpu": f"{node.cpu_milli}m",
                "memory": f"{node.memory_mib}Mi",
                "nvidia.com/gpu": str(len(node.gpus)),
            }
        },
    }


def extender_args(
    pod: dict[str, Any], nodes: list[NodeState], node_cache_capable: bool
) -> dict[str, Any]:
    """``ExtenderArgs`` as kube-scheduler sends it (``NodeNames`` or a full ``Nodes`` list)."""
    if node_cache_capable:
        return {"Pod": pod, "Nodes": None, "NodeNames": [n.name for n in nodes]}
    items = [node_json(n) for n in nodes]
    return {"Pod": pod, "Nodes": {"kind": "NodeList", "apiVersion": "v1", "items": items}}


def trace_pod(trace: PodTrace, i: int) -> Pod:
    """Pod ``i`` as the simulator sees it."""
    from fleetmind.envs.core import pod_from_trace

    return pod_from_trace(trace, i)


def filled_state(
    state: ClusterState, trace: PodTrace, policy: Any, n_pods: int, seed: int
) -> list[int]:
    """Place ``n_pods`` seeded random pods of ``trace`` with ``policy``; returns their indices."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(trace))[:n_pods].tolist()
    policy.reset(state, trace=trace)
    for i in order:
        pod = trace_pod(trace, i)
        mask = state.feasible(pod)
        if not mask.any():
            continue
        node, gpus = policy.select(state, pod, mask)
        if node >= 0:
            state.place(pod, node, gpus)
    return order


# ------------------------------------------------------------------ exporters and a real Prometheus
class ExporterServer:
    """Serves exposition texts at paths (``texts[path]``, replaceable while running)."""

    def __init__(self, texts: dict[str, str]) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.texts = dict(texts)
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                text = outer.texts.get(self.path)
                if text is None:
                    self.send_error(404)
                    return
                body = text.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def prometheus_binary() -> str | None:
    import shutil

    return shutil.which("prometheus")


class Prometheus:
    """The Debian ``prometheus`` binary scraping ``jobs`` (``{job: metrics path}``) every second."""

    def __init__(self, tmp: Any, exporter: ExporterServer, jobs: dict[str, str]) -> None:
        import subprocess

        import yaml
        from serving_helpers import free_port

        cfg = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
            "scrape_configs": [
                {
                    "job_name": job,
                    "metrics_path": path,
                    "honor_labels": True,
                    "static_configs": [{"targets": [f"127.0.0.1:{exporter.port}"]}],
                }
                for job, path in jobs.items()
            ],
        }
        (tmp / "prometheus.yml").write_text(yaml.safe_dump(cfg))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [
                str(prometheus_binary()),
                f"--config.file={tmp / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            stdout=subprocess.DEVNULL,
            stderr=open(tmp / "prom.log", "wb"),  # noqa: SIM115
        )

    def count(self, promql: str) -> int:
        import httpx

        try:
            r = httpx.post(self.url + "/api/v1/query", data={"query": promql}, timeout=2.0)
            return len(r.json()["data"]["result"])
        except (httpx.HTTPError, ValueError, KeyError):
            return -1

    def wait_for(self, promql: str, n: int, timeout: float = 60.0) -> None:
        """Wait until ``promql`` returns ``n`` series (the exporters were scraped)."""
        import time

        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.count(promql) == n:
                return
            time.sleep(0.2)
        raise TimeoutError(f"Prometheus never returned {n} series for {promql}")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
