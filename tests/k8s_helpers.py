"""Helpers for the Kubernetes tests: openb fleets as telemetry nodes, openb pods as ``v1.Pod`` JSON.

``ExtenderArgs`` documents follow ``staging/src/k8s.io/kube-scheduler/extender/v1/types.go``
(kubernetes/kubernetes): Go field names as keys (``Pod``, ``Nodes``, ``NodeNames``), since the Go
structs carry no JSON tags; ``Pod`` and ``Nodes`` are ``k8s.io/api/core/v1`` objects (JSON tags in
camelCase: ``metadata``, ``spec.containers[].resources.limits``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from fastapi.testclient import TestClient

from fleetmind.data.openb import (
    GPU_MODELS,
    OpenbNodes,
    PodTrace,
    load_openb_nodes,
    load_openb_trace,
)
from fleetmind.envs.core import ClusterState, Pod
from fleetmind.envs.fgd_mode import build_workload, run_fgd, unallocated_at
from fleetmind.serving.app import create_app
from fleetmind.serving.settings import Settings
from fleetmind.serving.telemetry.base import GpuState, NodeState
from fleetmind.serving.telemetry.prometheus import PrometheusApiSource


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


def pod_json(
    trace: PodTrace, i: int, namespace: str = "openb", name: str | None = None
) -> dict[str, Any]:
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
    pod_name = name or str(trace.pod_names[i])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name,
            "namespace": namespace,
            # the uid kube-state-metrics lists the pod under (kube_pod_info's ``uid`` is the
            # pod's metadata.uid): :func:`ksm_pod_info` and ``LiveFleet.bind`` write ``u-<pod>``
            "uid": f"u-{pod_name}",
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
        self.server.handle_error = lambda *a: None  # a scraper hanging up mid-answer is fine
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def prometheus_binary() -> str | None:
    import shutil

    return shutil.which("prometheus")


DCGM_CHART_SCRAPE: dict[str, Any] = {"honor_labels": False}
"""dcgm-exporter's Helm chart default: ``serviceMonitor.honorLabels: false`` (NVIDIA/dcgm-exporter
``deployment/values.yaml``, rendered by ``deployment/templates/service-monitor.yaml``)."""
KSM_SCRAPE: dict[str, Any] = {"honor_labels": True}
"""kube-state-metrics as kube-prometheus-stack scrapes it (``honorLabels: true``: its ``pod`` and
``namespace`` labels are the objects it describes)."""


def exporter_target(pod: str, namespace: str = "gpu-operator") -> dict[str, str]:
    """The target labels prometheus-operator gives a ServiceMonitor endpoint from Kubernetes service
    discovery (``namespace``, ``pod``, ``container``, ``service``, ``endpoint``; prometheus-operator
    ``pkg/prometheus/promcfg.go``, ``generateServiceMonitorConfig``)."""
    return {"namespace": namespace, "pod": pod, "container": "exporter",
            "service": "dcgm-exporter", "endpoint": "metrics"}  # fmt: skip


class Prometheus:
    """The Debian ``prometheus`` binary scraping ``jobs`` (``{job: metrics path}``) every second.

    ``scrape``: per job, ``honor_labels`` (default True) and ``labels`` (target labels, as service
    discovery would attach them); see :data:`DCGM_CHART_SCRAPE` and :func:`exporter_target`.
    """

    def __init__(self, tmp: Any, exporter: ExporterServer, jobs: dict[str, str],
                 scrape: dict[str, dict[str, Any]] | None = None) -> None:  # fmt: skip
        import subprocess

        import yaml
        from serving_helpers import free_port

        scrape = scrape or {}
        cfg = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
            "scrape_configs": [
                {
                    "job_name": job,
                    "metrics_path": path,
                    "honor_labels": bool(scrape.get(job, {}).get("honor_labels", True)),
                    "static_configs": [
                        {
                            "targets": [f"127.0.0.1:{exporter.port}"],
                            "labels": dict(scrape.get(job, {}).get("labels", {})),
                        }
                    ],
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


@contextlib.contextmanager
def ksm_prometheus(tmp: Path, dcgm: dict[str, tuple[str, str]], ksm: str,
                   ksm_target: dict[str, str] | None, series: int) -> Iterator[str]:  # fmt: skip
    """A real Prometheus scraping dcgm-exporter texts (``dcgm[job] = (exporter pod, text)``, each
    at ``/<job>`` with the chart's scrape, :data:`DCGM_CHART_SCRAPE`) and kube-state-metrics'
    ``ksm`` at ``/ksm`` (``ksm_target``: the target labels of a scrape with ``honor_labels: false``;
    None: ``honor_labels: true``); yields its URL once ``series`` ``DCGM_FI_DEV_FB_USED`` and
    ``kube_pod_info`` series are in. Skips the test without the binary."""
    import pytest

    if prometheus_binary() is None:
        pytest.skip("Prometheus not installed (Debian package prometheus)")
    exporter = ExporterServer({**{f"/{job}": text for job, (_, text) in dcgm.items()}, "/ksm": ksm})
    scrape = {job: {**DCGM_CHART_SCRAPE, "labels": exporter_target(pod)}
              for job, (pod, _) in dcgm.items()}  # fmt: skip
    scrape["ksm"] = {"honor_labels": ksm_target is None, "labels": ksm_target or {}}
    p = Prometheus(tmp, exporter, {**{job: f"/{job}" for job in dcgm}, "ksm": "/ksm"}, scrape)
    try:
        p.wait_for('{__name__=~"DCGM_FI_DEV_FB_USED|kube_pod_info"}', series)
        yield p.url
    finally:
        p.stop()
        exporter.close()


# ------------------------------------------------------------------ kube-state-metrics layout lines
# kube-state-metrics 2.x label layout: kube_node_status_allocatable{node, resource, unit},
# kube_pod_info{namespace, pod, uid, host_ip, pod_ip, node, created_by_kind, created_by_name,
# priority_class, host_network}, kube_pod_status_phase{namespace, pod, uid, phase} (one series per
# phase, 1 for the current), kube_pod_init_container_info{namespace, pod, uid, container,
# image_spec, image, image_id, container_id, restart_policy} ("Always" for a sidecar)
KSM_PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")


def ksm_allocatable(node: str, gpus: int) -> list[str]:
    """``kube_node_status_allocatable`` of a node with 64 cores, 512 GiB and ``gpus`` GPUs."""
    return [
        f'kube_node_status_allocatable{{node="{node}",resource="cpu",unit="core"}} 64',
        f'kube_node_status_allocatable{{node="{node}",resource="memory",unit="byte"}} {512 * 2**30}',
        f'kube_node_status_allocatable{{node="{node}",resource="nvidia_com_gpu",unit="integer"}} '
        f"{gpus}",
    ]


def ksm_pod_info(ns: str, pod: str, node: str, kind: str = "Job") -> str:
    """``kube_pod_info`` of pod ``ns/pod`` (uid ``u-<pod>``) on ``node`` ("": not scheduled)."""
    return (
        f'kube_pod_info{{namespace="{ns}",pod="{pod}",uid="u-{pod}",host_ip="10.0.0.1",'
        f'pod_ip="10.1.0.5",node="{node}",created_by_kind="{kind}",created_by_name="x",'
        'priority_class="",host_network="false"} 1'
    )


def ksm_request(init: bool, ns: str, pod: str, container: str, node: str, resource: str,
                value: float) -> str:  # fmt: skip
    """``kube_pod_container_resource_requests`` (``init``: ``kube_pod_init_container_...``) of a
    container of pod ``ns/pod`` on ``node``: ``resource`` cpu, memory or nvidia_com_gpu."""
    metric = (
        "kube_pod_init_container_resource_requests"
        if init
        else "kube_pod_container_resource_requests"
    )
    unit = {"cpu": "core", "memory": "byte", "nvidia_com_gpu": "integer"}[resource]
    return (
        f'{metric}{{namespace="{ns}",pod="{pod}",uid="u-{pod}",container="{container}",'
        f'node="{node}",resource="{resource}",unit="{unit}"}} {value}'
    )


def ksm_phases(ns: str, pod: str, phase: str) -> list[str]:
    """``kube_pod_status_phase`` of pod ``ns/pod``: one series per phase, 1 for ``phase``."""
    return [
        f'kube_pod_status_phase{{namespace="{ns}",pod="{pod}",uid="u-{pod}",phase="{p}"}} '
        f"{int(p == phase)}"
        for p in KSM_PHASES
    ]


def ksm_init_info(pod: str, container: str, sidecar: bool) -> str:
    """``kube_pod_init_container_info`` of the init container ``container`` of pod ``ml/pod``."""
    return (
        f'kube_pod_init_container_info{{namespace="ml",pod="{pod}",uid="u-{pod}",'
        f'container="{container}",image_spec="x:1",image="x:1",image_id="x@sha256:1",'
        f'container_id="containerd://{pod}-{container}",'
        f'restart_policy="{"Always" if sidecar else ""}"}} 1'
    )


# ------------------------------------------------------------------ dcgm-exporter layout texts
# dcgm-exporter's label layout (gpu, UUID, device, modelName, Hostname or hostname; pod/namespace/
# container of its Kubernetes mapping only on a GPU a pod holds; DCGM_EXP_XID_ERRORS_COUNT with an
# xid label, NVIDIA/dcgm-exporter internal/pkg/collector/xid_collector.go)
DCGM_FIELDS = (
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_XID_ERRORS",
)


def dcgm_text(host_label: str, host: str, gpus: list[dict[str, Any]],
              window: list[tuple[int, int, int]] | None = None) -> str:  # fmt: skip
    """One exporter's text; each GPU: ``used`` MiB, ``xid`` (last), ``pod`` ("ns/name" or "").
    ``window``: ``DCGM_EXP_XID_ERRORS_COUNT`` series ``(gpu, xid, count)``."""
    lines: list[str] = []
    for f in DCGM_FIELDS:
        lines += [f"# HELP {f} {f}.", f"# TYPE {f} gauge"]
        for i, g in enumerate(gpus):
            lab = (f'gpu="{i}",UUID="GPU-{host}-{i}",device="nvidia{i}",'
                   f'modelName="NVIDIA H100 80GB HBM3",{host_label}="{host}"')  # fmt: skip
            if g.get("pod"):
                ns, name = g["pod"].split("/")
                lab += f',container="main",namespace="{ns}",pod="{name}"'
            value = {"DCGM_FI_DEV_GPU_UTIL": 90 if g.get("pod") else 0,
                     "DCGM_FI_DEV_FB_USED": g.get("used", 0),
                     "DCGM_FI_DEV_FB_FREE": 81559 - g.get("used", 0),
                     "DCGM_FI_DEV_XID_ERRORS": g.get("xid", 0)}[f]  # fmt: skip
            lines.append(f"{f}{{{lab}}} {value}")
    if window is not None:
        f = "DCGM_EXP_XID_ERRORS_COUNT"
        lines += [f"# HELP {f} Count of XID Errors within user-specified time window.",
                  f"# TYPE {f} gauge"]  # fmt: skip
        for gpu, xid, count in window:
            lab = (f'gpu="{gpu}",UUID="GPU-{host}-{gpu}",device="nvidia{gpu}",'
                   f'modelName="NVIDIA H100 80GB HBM3",{host_label}="{host}",xid="{xid}"')  # fmt: skip
            lines.append(f"{f}{{{lab}}} {count}")
    return "\n".join(lines) + "\n"


KSM = """# HELP kube_node_status_allocatable allocatable
# TYPE kube_node_status_allocatable gauge
kube_node_status_allocatable{node="gpu-a",resource="cpu",unit="core"} 96
kube_node_status_allocatable{node="gpu-a",resource="memory",unit="byte"} 1.099511627776e+12
kube_node_status_allocatable{node="gpu-b",resource="cpu",unit="core"} 32
kube_node_status_allocatable{node="gpu-b",resource="memory",unit="byte"} 2.74877906944e+11
# HELP kube_pod_info pod info
# TYPE kube_pod_info gauge
kube_pod_info{namespace="ml",pod="train-0",node="gpu-a",created_by_kind="Job",created_by_name="train"} 1
kube_pod_info{namespace="gpu-operator",pod="dcgm-exporter-a1b2c",node="gpu-a",created_by_kind="DaemonSet",created_by_name="dcgm-exporter"} 1
kube_pod_info{namespace="gpu-operator",pod="nvidia-dcgm-exp-d3e4f",node="gpu-b",created_by_kind="DaemonSet",created_by_name="nvidia-dcgm-exp"} 1
"""


# ------------------------------------------------------------------ a live openb fleet
class LiveFleet:
    """openb nodes as a Kubernetes GPU cluster seen through exporters.

    The DCGM text (every node's GPUs, idle, healthy; ``modelName`` = the openb model) is fixed; the
    kube-state-metrics text (allocatable CPU and memory; per bound pod ``kube_pod_info``, container
    requests, phase and the GPU-sharing scheduler's ``gpu-milli``/``gpu-index`` annotations) is
    rebuilt on every :meth:`bind`, as kube-state-metrics would show the cluster.
    """

    def __init__(self, names: list[str], models: list[str], num_gpu: list[int],
                 cpu_milli: list[int], memory_mib: list[int]) -> None:  # fmt: skip
        self.names, self.models, self.num_gpu = names, models, num_gpu
        self.cpu_milli, self.memory_mib = cpu_milli, memory_mib
        self._pods: list[str] = []
        self._used: dict[str, list[int]] = {n: [0, 0] for n in names}  # CPU (milli), memory (MiB)

    def fits(self, node: str, cpu_milli: int, memory_mib: int) -> bool:
        """Whether kube-scheduler's NodeResourcesFit passes ``node`` for a pod of these requests:
        within its allocatable less its pods' requests (``fitsRequest`` in kubernetes
        ``pkg/scheduler/framework/plugins/noderesources/fit.go``), so the pod reaches the
        extender with it at all."""
        i = self.names.index(node)
        used_cpu, used_mem = self._used[node]
        return (
            used_cpu + cpu_milli <= self.cpu_milli[i]
            and used_mem + memory_mib <= self.memory_mib[i]
        )

    def dcgm_text(self) -> str:
        fams: dict[str, list[str]] = {"DCGM_FI_DEV_GPU_UTIL": [], "DCGM_FI_DEV_FB_USED": [],
                                      "DCGM_FI_DEV_FB_FREE": [], "DCGM_FI_DEV_XID_ERRORS": []}  # fmt: skip
        values = {"DCGM_FI_DEV_GPU_UTIL": 0, "DCGM_FI_DEV_FB_USED": 0,
                  "DCGM_FI_DEV_FB_FREE": 16000, "DCGM_FI_DEV_XID_ERRORS": 0}  # fmt: skip
        for n, model, k in zip(self.names, self.models, self.num_gpu, strict=True):
            for g in range(k):
                lab = (f'gpu="{g}",UUID="GPU-{n}-{g}",device="nvidia{g}",modelName="{model}",'
                       f'Hostname="{n}",container="",namespace="",pod=""')  # fmt: skip
                for f in fams:
                    fams[f].append(f"{f}{{{lab}}} {values[f]}")
        out = []
        for f, lines in fams.items():
            out += [f"# HELP {f} {f}.", f"# TYPE {f} gauge", *lines]
        return "\n".join(out) + "\n"

    def ksm_text(self) -> str:
        alloc = [
            "# HELP kube_node_status_allocatable allocatable",
            "# TYPE kube_node_status_allocatable gauge",
        ]
        for n, c, m in zip(self.names, self.cpu_milli, self.memory_mib, strict=True):
            alloc.append(
                f'kube_node_status_allocatable{{node="{n}",resource="cpu",unit="core"}} {c / 1000}'
            )
            alloc.append(
                f'kube_node_status_allocatable{{node="{n}",resource="memory",unit="byte"}} {m * 2**20}'
            )
        fam = {"kube_pod_info": [], "kube_pod_container_resource_requests": [],
               "kube_pod_status_phase": [], "kube_pod_annotations": []}  # fmt: skip
        for line in self._pods:
            fam[line.split("{", 1)[0]].append(line)
        out = alloc
        for f, lines in fam.items():
            out += [f"# HELP {f} {f}.", f"# TYPE {f} gauge", *lines]
        return "\n".join(out) + "\n"

    def bind(self, ns: str, pod: str, node: str, gpus: list[int], milli: int, cpu_milli: int,
             memory_mib: int) -> None:  # fmt: skip
        """Record pod ``ns/pod`` as running on ``node`` with ``milli`` of each GPU in ``gpus``."""
        p = f'namespace="{ns}",pod="{pod}",uid="u-{pod}"'
        self._used[node][0] += cpu_milli
        self._used[node][1] += memory_mib
        self._pods.append(f'kube_pod_info{{{p},node="{node}",host_network="false"}} 1')
        self._pods.append(
            f'kube_pod_container_resource_requests{{{p},container="main",node="{node}",resource="cpu",unit="core"}} {cpu_milli / 1000}'
        )
        self._pods.append(
            f'kube_pod_container_resource_requests{{{p},container="main",node="{node}",resource="memory",unit="byte"}} {memory_mib * 2**20}'
        )
        self._pods.append(f'kube_pod_status_phase{{{p},phase="Running"}} 1')
        if gpus:
            idx = "-".join(str(g) for g in gpus)
            self._pods.append(
                f'kube_pod_annotations{{{p},annotation_alibabacloud_com_gpu_milli="{milli}",'
                f'annotation_alibabacloud_com_gpu_index="{idx}"}} 1'
            )


def run_live(client: Any, fleet: LiveFleet, exporter: ExporterServer, trace: PodTrace,
             ksm_path: str = "/ksm") -> dict[str, Any]:  # fmt: skip
    """Send every pod of ``trace`` (arrival order) through the extender, bind it where the top
    score says (on the GPUs FleetMind held), publish it through kube-state-metrics and report
    the binding; returns ``{"arrived", "allocated", "placed", "node_of"}`` per pod (milli-GPU)."""
    import numpy as np

    res = client.app.state.services.reservations
    n = len(trace)
    arrived = np.cumsum(trace.gpu_request)
    allocated = np.zeros(n, dtype=np.int64)
    node_of: list[str | None] = [None] * n
    total = 0
    for i in range(n):
        name = f"p{i:05d}"
        # what kube-scheduler sends: the nodes its own NodeResourcesFit passed
        cpu, mem = int(trace.cpu_milli[i]), int(trace.memory_mib[i])
        sent = [n for n in fleet.names if fleet.fits(n, cpu, mem)]
        args = {"Pod": pod_json(trace, i, name=name), "NodeNames": sent}
        r = client.post("/api/v1/scheduler/filter", json=args)
        assert r.status_code == 200, r.text
        passed = r.json()["NodeNames"]
        if passed:
            args["NodeNames"] = passed
            r = client.post("/api/v1/scheduler/prioritize", json=args)
            assert r.status_code == 200, r.text
            best = max(r.json(), key=lambda h: h["Score"])
            node = best["Host"]
            (hold,) = [h for h in res.rows() if h["pod_key"] == f"openb/{name}"]
            assert hold["node"] == node
            fleet.bind("openb", name, node, list(hold["gpus"]), int(trace.gpu_milli[i]),
                       int(trace.cpu_milli[i]), int(trace.memory_mib[i]))  # fmt: skip
            exporter.texts[ksm_path] = fleet.ksm_text()
            r = client.post("/api/v1/scheduler/bound",
                            json={"PodName": name, "PodNamespace": "openb", "Node": node})  # fmt: skip
            assert r.json()["Outcome"] == "held", r.text
            total += int(trace.gpu_request[i])
            node_of[i] = node
        allocated[i] = total
    return {"arrived": arrived, "allocated": allocated, "node_of": node_of}


# ------------------------------------------------------------- live equals simulated
SEED = 42
LEVELS = (100, 130)


def live_vs_sim(tmp_path: Path, step: int, policy: str = "fgd") -> dict:
    """Run both paths on every ``step``-th openb GPU node; returns both results."""
    allnodes = load_openb_nodes()
    idx = np.arange(0, len(allnodes), step)
    nodes = OpenbNodes(
        names=allnodes.names[idx],
        cpu_milli=allnodes.cpu_milli[idx],
        memory_mib=allnodes.memory_mib[idx],
        num_gpu=allnodes.num_gpu[idx],
        model=allnodes.model[idx],
        model_id=allnodes.model_id[idx],
        source=f"{allnodes.source} (every {step}th node)",
    )
    trace = load_openb_trace("default")
    sim = run_fgd(trace, policy, SEED, nodes=nodes, levels=LEVELS)
    wl = build_workload(trace, len(nodes), sim.capacity_milli, SEED)
    names = [f"gpu-{int(r):04d}" for r in wl.priority]
    fleet = LiveFleet(names, [str(m) for m in nodes.model], nodes.num_gpu.tolist(),
                      nodes.cpu_milli.tolist(), nodes.memory_mib.tolist())  # fmt: skip
    exporter = ExporterServer({"/dcgm": fleet.dcgm_text(), "/ksm": fleet.ksm_text()})
    prom = Prometheus(
        tmp_path, exporter, {"dcgm-exporter": "/dcgm", "kube-state-metrics": "/ksm"},
        scrape={"dcgm-exporter": {**DCGM_CHART_SCRAPE, "labels": exporter_target("dcgm-exporter-q7x2m")},
                "kube-state-metrics": KSM_SCRAPE},
    )  # fmt: skip
    try:
        prom.wait_for("kube_node_status_allocatable", 2 * len(names))
        prom.wait_for("DCGM_FI_DEV_FB_FREE", int(nodes.num_gpu.sum()))
        settings = Settings(
            database_url=f"sqlite:///{tmp_path}/live.db",
            telemetry="prometheus",
            prometheus_url=prom.url,
            telemetry_ttl_s=0.0,
            rca_model="baseline:upstream-coverage",
            placement_model=f"heuristic:{policy}",
            incident_worker=False,
        )
        with TestClient(create_app(settings)) as client:
            if not isinstance(client.app.state.services.telemetry, PrometheusApiSource):
                raise RuntimeError("the service did not pick the Prometheus API source")
            live = run_live(client, fleet, exporter, sim.workload)
    finally:
        prom.stop()
        exporter.close()
    live_unalloc = {
        lvl: unallocated_at(live["arrived"], live["allocated"], sim.capacity_milli, lvl)
        for lvl in LEVELS
    }
    sim_nodes = [names[n] if n >= 0 else None for n in sim.node_of.tolist()]
    same = float(np.mean([a == b for a, b in zip(sim_nodes, live["node_of"], strict=True)]))
    return {
        "nodes": len(names),
        "gpus": int(nodes.num_gpu.sum()),
        "pods": len(sim.workload),
        "sim_unallocated": sim.unallocated,
        "live_unallocated": live_unalloc,
        "same_node_fraction": same,
    }
