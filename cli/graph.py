"""``fleetmind graph ...``: build the RCA dependency graph from a cluster; print the JSON Schema."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from fleetmind.cli.common import add_group


def register(subparsers: argparse._SubParsersAction, name: str, help_text: str) -> None:
    _, sub = add_group(subparsers, name, help_text)
    b = sub.add_parser(
        "build",
        help="build the dependency graph from the Kubernetes API (+ NVML links, + trace spans)",
        description="Build the graph JSON (docs/graph.schema.json) from the Kubernetes API: nodes "
        "(hosts, their GPUs), services, pods (runs_on host/GPUs, member_of services by "
        "EndpointSlices or selectors), plus NVLink topology of this host (--nvml) and call edges "
        "from trace spans (--spans). The service loads it with FLEETMIND_GRAPH.",
    )
    b.add_argument("--out", required=True, metavar="GRAPH.json", help="where to write the graph")
    b.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: ~/.kube/config)")
    b.add_argument("--context", default=None, help="kubeconfig context (default: current)")
    b.add_argument(
        "--in-cluster", action="store_true", help="use the pod's service account (in a cluster)"
    )
    b.add_argument(
        "--from-dir",
        default=None,
        metavar="DIR",
        help="read recorded list responses instead of the API: nodes.json, pods.json, "
        "services.json and optionally endpointslices.json (e.g. from 'kubectl get -o json')",
    )
    b.add_argument("--cluster", default=None, help="cluster name (default: node label "
                   "fleetmind.io/cluster, else 'default')")  # fmt: skip
    b.add_argument("--name", default=None, help="graph name (default k8s-<cluster>)")
    b.add_argument(
        "--spans",
        nargs="*",
        default=[],
        metavar="FILE.json",
        help="OTLP JSON or Jaeger JSON trace exports: calls edges between services",
    )
    b.add_argument(
        "--nvml", action="store_true", help="add this host's NVLink topology (NVML; a GPU host)"
    )
    b.set_defaults(func=_build)

    s = sub.add_parser(
        "schema",
        help="print the graph JSON Schema",
        description="Print the JSON Schema of the graph JSON, generated from the pydantic model "
        "the CLI, the service and data/graph.py use (docs/graph.schema.json).",
    )
    s.add_argument("--out", default=None, metavar="PATH", help="write it here instead of stdout")
    s.set_defaults(func=_schema)


def _read(path: Path) -> Any:
    from fleetmind.data.files import read_json

    return read_json(path)


def fetch_lists(
    kubeconfig: str | None, context: str | None, in_cluster: bool
) -> tuple[Any, Any, Any, Any]:
    """Nodes, pods, services and EndpointSlices (None when the API has none) as raw JSON lists.

    Raises:
        NotAvailableError: no client library, no configuration, or the API cannot be reached.
    """
    from fleetmind.data.errors import NotAvailableError

    try:
        from kubernetes import client, config
    except ImportError:
        raise NotAvailableError(
            "fleetmind graph build needs the kubernetes package (pip install kubernetes), "
            "or --from-dir with recorded list responses"
        ) from None
    try:
        if in_cluster:
            config.load_incluster_config()
        else:
            config.load_kube_config(config_file=kubeconfig, context=context)
    except Exception as err:  # ConfigException, missing file
        raise NotAvailableError(f"no Kubernetes configuration: {err}") from None
    core, disc = client.CoreV1Api(), client.DiscoveryV1Api()

    def raw(fn: Any) -> Any:
        return json.loads(fn(_preload_content=False).data)

    try:
        nodes = raw(core.list_node)
        pods = raw(core.list_pod_for_all_namespaces)
        services = raw(core.list_service_for_all_namespaces)
    except Exception as err:
        raise NotAvailableError(
            f"cannot list from the Kubernetes API: {err}".splitlines()[0]
        ) from None
    try:
        slices = raw(disc.list_endpoint_slice_for_all_namespaces)
    except Exception:
        slices = None  # no discovery.k8s.io/v1 (or no permission): selectors are used instead
    return nodes, pods, services, slices


def _build(args: argparse.Namespace) -> int:
    from fleetmind.data.files import require_dir
    from fleetmind.data.graph import DependencyGraph
    from fleetmind.data.graph_build import build_graph, calls_from_spans, nvlinks_from_nvml

    if args.from_dir:
        d = require_dir(args.from_dir, "--from-dir folder")
        nodes, pods, services = (_read(d / f"{k}.json") for k in ("nodes", "pods", "services"))
        slices = _read(d / "endpointslices.json") if (d / "endpointslices.json").exists() else None
    else:
        nodes, pods, services, slices = fetch_lists(args.kubeconfig, args.context, args.in_cluster)
    calls: list[tuple[str, str]] = []
    for f in args.spans:
        calls += calls_from_spans(_read(Path(f)))
    nvlinks = nvlinks_from_nvml() if args.nvml else None
    model = build_graph(nodes, pods, services, slices, cluster=args.cluster, calls=calls,
                        nvlinks=nvlinks, name=args.name)  # fmt: skip
    graph = DependencyGraph.from_model(model)  # ids unique, edge ends exist
    Path(args.out).write_text(model.model_dump_json(indent=1) + "\n")
    kinds: dict[str, int] = {}
    for n in graph.nodes:
        kinds[n.kind] = kinds.get(n.kind, 0) + 1
    summary = ", ".join(f"{v} {k}" for k, v in sorted(kinds.items()))
    print(
        f"graph {graph.name}: {graph.num_nodes} nodes ({summary}), {graph.num_edges} edges -> {args.out}"
    )
    return 0


def _schema(args: argparse.Namespace) -> int:
    from fleetmind.data.graph_schema import graph_json_schema

    text = json.dumps(graph_json_schema(), indent=2) + "\n"
    if args.out:
        Path(args.out).write_text(text)
    else:
        print(text, end="")
    return 0
