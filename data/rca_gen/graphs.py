"""Seeded multi-cluster AI-platform dependency graphs.

A generated graph is a :class:`fleetmind.data.graph.DependencyGraph` (edges point dependent -> dependency) with:

* **global shared infra** (``cluster=None``): ``global/model-registry`` (registry), ``global/image-mirror``
  (registry), ``global/config-store`` (config), ``global/dns`` (dns), ``global/object-storage``
  (storage), and one ``wan/<a>--<b>`` (network) per cluster pair that talks across regions;
* per **cluster** (a region, e.g. ``us-east``): the cluster node ``us-east/cluster``; infra
  ``us-east/infra/{apiserver,coredns,image-mirror,config-agent}``; top-of-rack switches
  ``us-east/net/tor-<r>`` (network); replicated services ``us-east/svc/<svc>`` (gateway, tokenizer,
  router, model servers, KV cache, feature store, vector DB, embedder, reranker, safety filter, batch
  trainers, eval runner; a random subset, with random replica counts and extra call edges); their pods
  ``us-east/pod/<svc>-<i>``; CPU and GPU hosts ``us-east/host/h<n>``; GPUs ``us-east/host/h<n>/gpu<i>``;
  and the GPU interconnect of each host as ``link`` nodes: one per NVLink-connected GPU pair
  (``us-east/host/h<n>/nvl-<i>-<j>``) or one per PCIe switch (``us-east/host/h<n>/pcie-sw<k>``).

Edges: ``calls`` (service -> service it calls), ``runs_on`` (pod -> host, pod -> each GPU it uses),
``attached_to`` (GPU -> host, link -> each GPU it joins), ``member_of`` (pod -> service, host / infra /
service -> cluster), ``depends_on`` (service -> DNS / config agent / model registry / object storage /
WAN link, pod -> image mirror, host -> ToR switch, cluster infra -> global infra), ``hosted_on``
(cluster infra -> cluster).

``match`` labels (what :meth:`DependencyGraph.node_for_alert` compares with alert labels):
host ``{cluster, node}``; gpu ``{cluster, node, gpu}``; link ``{cluster, node, link}``; pod ``{cluster,
namespace, pod}``; service ``{cluster, service}``; cluster infra ``{cluster, component}``; global
infra ``{component}``; WAN ``{component: wan, peer_a, peer_b}``; cluster ``{cluster}``.

GPU hosts follow server templates (DGX-1 V100 hybrid cube-mesh, DGX A100 NV12 all-to-all, DGX H100
NV18 all-to-all, PCIe-only servers), from :func:`fleetmind.data.topology.rca_host_templates`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from fleetmind.data.errors import ConfigError
from fleetmind.data.graph import DependencyGraph, GraphEdge, GraphNode
from fleetmind.data.topology import HostTemplate, rca_host_templates

REGIONS: tuple[str, ...] = (
    "us-east",
    "us-west",
    "us-central",
    "eu-west",
    "eu-central",
    "eu-north",
    "ap-northeast",
    "ap-south",
    "ap-southeast",
    "sa-east",
)
"""Region names used as cluster names (one cluster per region in a graph)."""

GLOBAL_INFRA: tuple[tuple[str, str], ...] = (
    ("model-registry", "registry"),
    ("image-mirror", "registry"),
    ("config-store", "config"),
    ("dns", "dns"),
    ("object-storage", "storage"),
)
"""Cross-cluster shared infra: (component, node kind); node id ``global/<component>``."""

CLUSTER_INFRA: tuple[tuple[str, str, str | None], ...] = (
    ("apiserver", "infra", None),
    ("coredns", "dns", "dns"),
    ("image-mirror", "registry", "image-mirror"),
    ("config-agent", "config", "config-store"),
)
"""Per-cluster infra: (component, node kind, global component it depends on)."""


TEMPLATE_WEIGHTS: dict[str, float] = {
    "dgx-h100": 0.35,
    "dgx-a100": 0.3,
    "dgx1-v100": 0.1,
    "pcie-l40s-8": 0.15,
    "pcie-a10-4": 0.1,
}


def host_templates() -> dict[str, HostTemplate]:
    """The GPU server templates (:func:`fleetmind.data.topology.rca_host_templates`)."""
    return dict(rca_host_templates())


MODELS: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("llama-3-70b", (4, 8)),
    ("llama-3-8b", (1,)),
    ("mistral-7b", (1,)),
    ("mixtral-8x7b", (2, 4)),
    ("qwen2-72b", (4, 8)),
    ("gemma-2-27b", (2,)),
    ("deepseek-v2-lite", (2,)),
    ("phi-3-mini", (1,)),
)
"""Served models and the GPU counts a replica may use (tensor parallel degree)."""

NAMESPACES = {
    "gateway": "ingress",
    "tokenizer": "inference",
    "router": "inference",
    "model-server": "inference",
    "kv-cache": "inference",
    "safety-filter": "inference",
    "feature-store": "data",
    "vector-db": "data",
    "embedder": "data",
    "reranker": "data",
    "batch-trainer": "training",
    "eval-runner": "training",
}


MIN_NODES = 50
"""The smallest node budget the generator takes (:attr:`GraphGenConfig.min_nodes` and an explicit
``n_nodes`` of :func:`generate_graph`)."""

MAX_NODES = 200_000
"""The largest node budget the generator takes (a budget of 100,000 built 97,592 nodes in 0.7 s,
37 MB of JSON, 2026-12-04; the default budgets are 200-3,000): a larger one is a typo that would
exhaust memory."""


@dataclass
class GraphGenConfig:
    """Knobs of the graph generator.

    Attributes:
        min_clusters: fewest clusters (regions) in a graph.
        max_clusters: most clusters (at most ``len(REGIONS)``).
        min_nodes: smallest node budget drawn for a graph.
        max_nodes: largest node budget (sizes are drawn log-uniform in [min_nodes, max_nodes]).
            From a budget of about 500 nodes the built graph lands within about +-15 % of it
            (-17 % to +15 % over budgets 500-3,000 with 2-6 clusters; one cluster: -16 % to
            +28 %); a smaller budget can be overshot a lot, since every cluster gets at least 40
            nodes plus its fixed infrastructure (a budget of 200 builds up to about 460 nodes with
            6 clusters, 300 up to +55 %, 400 up to +25 %). See ``docs/rca-data.md``.
        cross_cluster_prob: chance that a pair of clusters has cross-region calls (router spill-over to
            a remote model server, feature-store replication) over a ``wan/<a>--<b>`` link.
        mixed_template_prob: chance that a cluster mixes two GPU server templates.
    """

    min_clusters: int = 2
    max_clusters: int = 6
    min_nodes: int = 200
    max_nodes: int = 3000
    cross_cluster_prob: float = 0.5
    mixed_template_prob: float = 0.3

    def check(self) -> None:
        if not 1 <= self.min_clusters <= self.max_clusters <= len(REGIONS):
            raise ConfigError(
                f"clusters must satisfy 1 <= min ({self.min_clusters}) <= max ({self.max_clusters}) <= {len(REGIONS)}"
            )
        if not MIN_NODES <= self.min_nodes <= self.max_nodes <= MAX_NODES:
            raise ConfigError(
                f"nodes must satisfy {MIN_NODES} <= min ({self.min_nodes}) <= max "
                f"({self.max_nodes}) <= {MAX_NODES:,}"
            )


@dataclass
class _Builder:
    name: str
    nodes: list[GraphNode] = field(default_factory=list)
    edges: list[GraphEdge] = field(default_factory=list)

    def node(
        self, nid: str, kind: str, cluster: str | None, match: dict[str, str], **attrs: object
    ) -> str:
        self.nodes.append(GraphNode(nid, kind, cluster, match, dict(attrs)))
        return nid

    def edge(self, src: str, dst: str, kind: str) -> None:
        self.edges.append(GraphEdge(src, dst, kind))

    def build(self) -> DependencyGraph:
        return DependencyGraph(self.name, self.nodes, self.edges)


def _pick_services(rng: np.random.Generator, n_gpu_total: int) -> list[dict]:
    """Choose the service set of one cluster: name, role, gpus per replica, replicas (CPU ones)."""
    svcs: list[dict] = [
        {"name": "gateway", "role": "gateway", "gpus": 0, "replicas": int(rng.integers(2, 7))},
        {"name": "tokenizer", "role": "tokenizer", "gpus": 0, "replicas": int(rng.integers(2, 5))},
        {"name": "router", "role": "router", "gpus": 0, "replicas": int(rng.integers(2, 5))},
        {"name": "kv-cache", "role": "kv-cache", "gpus": 0, "replicas": int(rng.integers(2, 5))},
    ]
    n_models = int(np.clip(rng.integers(1, 5), 1, max(1, n_gpu_total // 4)))
    for idx in rng.choice(len(MODELS), size=n_models, replace=False):
        model, tps = MODELS[int(idx)]
        svcs.append(
            {
                "name": f"model-server-{model}",
                "role": "model-server",
                "gpus": int(rng.choice(tps)),
                "replicas": 1,
                "model": model,
            }
        )
    optional = [
        ("feature-store", 0.7, 0),
        ("vector-db", 0.6, 0),
        ("embedder", 0.5, 1),
        ("reranker", 0.4, 1),
        ("safety-filter", 0.4, 0),
        ("eval-runner", 0.3, 1),
    ]
    for name, p, gpus in optional:
        if rng.random() < p:
            svcs.append(
                {"name": name, "role": name, "gpus": gpus, "replicas": int(rng.integers(1, 4))}
            )
    for t in range(int(rng.integers(0, 4))):
        svcs.append(
            {
                "name": f"batch-trainer-{t}",
                "role": "batch-trainer",
                "gpus": 8,
                "replicas": int(rng.integers(1, 4)),
            }
        )
    return svcs


def _calls(rng: np.random.Generator, svcs: list[dict]) -> list[tuple[str, str]]:
    """Service call edges (caller, callee) of one cluster, with random optional wiring."""
    names = {s["name"] for s in svcs}
    role = {s["name"]: s["role"] for s in svcs}
    ms = [s["name"] for s in svcs if s["role"] == "model-server"]
    out = [("gateway", "tokenizer"), ("gateway", "router")]
    if "safety-filter" in names:
        out.append(("gateway", "safety-filter"))
        if rng.random() < 0.5 and ms:
            out.append(("safety-filter", str(rng.choice(ms))))
    out += [("router", m) for m in ms]
    for m in ms:
        if rng.random() < 0.85:
            out.append((m, "kv-cache"))
    if "feature-store" in names:
        out.append(("router", "feature-store"))
    if "embedder" in names:
        out.append(("router", "embedder"))
        if "vector-db" in names:
            out.append(("embedder", "vector-db"))
    elif "vector-db" in names:
        out.append(("router", "vector-db"))
    if "reranker" in names:
        out.append(("router", "reranker"))
        if "vector-db" in names and rng.random() < 0.5:
            out.append(("reranker", "vector-db"))
    if "eval-runner" in names:
        out.append(("eval-runner", "router"))
    for s in svcs:
        if s["role"] == "batch-trainer":
            if "feature-store" in names and rng.random() < 0.7:
                out.append((s["name"], "feature-store"))
            if "vector-db" in names and rng.random() < 0.3:
                out.append((s["name"], "vector-db"))
    # a few extra edges for shape variety (no cycles: only towards data services)
    for caller in ("tokenizer", "kv-cache"):
        if caller == "tokenizer" and "feature-store" in names and rng.random() < 0.2:
            out.append((caller, "feature-store"))
    del role
    return out


def _check_int_arg(name: str, value: object, lo: int, hi: int) -> None:
    """ConfigError unless ``value`` is None or an int in ``[lo, hi]``."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not lo <= value <= hi:
        raise ConfigError(
            f"{name} must be an integer in [{lo}, {hi:,}] (or None to draw it), got {value!r}"
        )


def generate_graph(
    name: str,
    seed: int | np.random.Generator,
    config: GraphGenConfig | None = None,
    n_nodes: int | None = None,
    n_clusters: int | None = None,
) -> DependencyGraph:
    """Generate one topology.

    Args:
        name: graph name (datasets refer to it).
        seed: an int seed or a numpy Generator (same seed -> identical graph).
        config: generator knobs (:class:`GraphGenConfig`).
        n_nodes: node budget; drawn log-uniform in ``[config.min_nodes, config.max_nodes]`` when
            None, else an int in ``[MIN_NODES, MAX_NODES]`` (50-200,000).
        n_clusters: cluster count; drawn uniform in ``[config.min_clusters, config.max_clusters]``
            when None, else an int in ``[1, len(REGIONS)]`` (one region per cluster).

    Returns:
        the graph; ``graph.nodes[i].attrs`` carry ``role`` (services/pods), ``template`` (hosts),
        ``model`` (GPUs), ``level``/``bandwidth_gbps`` (links).

    Raises:
        ConfigError: when ``config``, ``n_nodes`` or ``n_clusters`` is out of range.
    """
    cfg = config or GraphGenConfig()
    cfg.check()
    _check_int_arg("n_nodes", n_nodes, MIN_NODES, MAX_NODES)
    _check_int_arg("n_clusters", n_clusters, 1, len(REGIONS))
    if not isinstance(seed, np.random.Generator) and (
        isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0
    ):
        raise ConfigError(f"seed must be an integer >= 0 or a numpy Generator, got {seed!r}")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    templates = host_templates()
    tnames = [t for t in TEMPLATE_WEIGHTS if t in templates] or list(templates)
    tw = np.array([TEMPLATE_WEIGHTS.get(t, 1.0) for t in tnames])
    tw /= tw.sum()
    C = int(n_clusters or rng.integers(cfg.min_clusters, cfg.max_clusters + 1))
    if n_nodes is None:
        n_nodes = int(
            round(math.exp(rng.uniform(math.log(cfg.min_nodes), math.log(cfg.max_nodes))))
        )
    regions = [str(r) for r in rng.choice(REGIONS, size=C, replace=False)]
    share = rng.uniform(0.6, 1.4, size=C)
    share /= share.sum()
    b = _Builder(name)
    for comp, kind in GLOBAL_INFRA:
        b.node(f"global/{comp}", kind, None, {"component": comp}, role=comp)
    global_overhead = len(GLOBAL_INFRA) + C
    per_cluster_svcs: dict[str, dict[str, dict]] = {}
    for ci, c in enumerate(regions):
        budget = max(40, int(share[ci] * (n_nodes - global_overhead)))
        per_cluster_svcs[c] = _build_cluster(b, rng, c, budget, templates, tnames, tw, cfg)
    # cross-cluster calls over WAN links
    for i in range(C):
        for j in range(i + 1, C):
            if rng.random() >= cfg.cross_cluster_prob and not (
                C == 2 or j == i + 1 and rng.random() < 0.5
            ):
                continue
            a, z = regions[i], regions[j]
            wan = b.node(
                f"wan/{a}--{z}",
                "network",
                None,
                {"component": "wan", "peer_a": a, "peer_b": z},
                role="wan",
            )
            pairs = [(a, z), (z, a)]
            used = False
            for src, dst in pairs:
                remote_ms = [
                    s for s in per_cluster_svcs[dst].values() if s["role"] == "model-server"
                ]
                if remote_ms and rng.random() < 0.7:
                    tgt = remote_ms[int(rng.integers(len(remote_ms)))]
                    b.edge(f"{src}/svc/router", f"{dst}/svc/{tgt['name']}", "calls")
                    b.edge(f"{src}/svc/router", wan, "depends_on")
                    used = True
                if (
                    "feature-store" in per_cluster_svcs[src]
                    and "feature-store" in per_cluster_svcs[dst]
                    and rng.random() < 0.5
                ):
                    b.edge(f"{src}/svc/feature-store", f"{dst}/svc/feature-store", "calls")
                    b.edge(f"{src}/svc/feature-store", wan, "depends_on")
                    used = True
            if not used:
                src, dst = pairs[int(rng.integers(2))]
                remote_ms = [
                    s for s in per_cluster_svcs[dst].values() if s["role"] == "model-server"
                ]
                tgt = remote_ms[int(rng.integers(len(remote_ms)))]
                b.edge(f"{src}/svc/router", f"{dst}/svc/{tgt['name']}", "calls")
                b.edge(f"{src}/svc/router", wan, "depends_on")
    return b.build()


def _build_cluster(
    b: _Builder,
    rng: np.random.Generator,
    c: str,
    budget: int,
    templates: dict[str, HostTemplate],
    tnames: list[str],
    tw: np.ndarray,
    cfg: GraphGenConfig,
) -> dict[str, dict]:
    """Add cluster ``c`` of about ``budget`` nodes; return its services by name.

    The steps draw from ``rng`` in a fixed order (templates, services, GPU placement, CPU hosts,
    racks, pods, calls), which the seeded datasets depend on.
    """
    cl = b.node(f"{c}/cluster", "cluster", c, {"cluster": c}, role="cluster")
    for comp, kind, gdep in CLUSTER_INFRA:
        nid = b.node(f"{c}/infra/{comp}", kind, c, {"cluster": c, "component": comp}, role=comp)
        b.edge(nid, cl, "hosted_on")
        if gdep is not None:
            b.edge(nid, f"global/{gdep}", "depends_on")
    host_tpl = _gpu_host_templates(rng, budget, templates, tnames, tw, cfg)
    n_gpu_hosts = len(host_tpl)
    gpus_total = sum(templates[t].n_gpus for t in host_tpl)
    svcs = _pick_services(rng, gpus_total)
    placements = _place_gpu_services(rng, svcs, [templates[t].n_gpus for t in host_tpl])
    svcs = [s for s in svcs if s["gpus"] == 0 or placements[s["name"]]]
    # --- CPU hosts for CPU pods
    cpu_pods = sum(s["replicas"] for s in svcs if s["gpus"] == 0)
    n_cpu_hosts = max(2, math.ceil(cpu_pods / rng.integers(4, 9)))
    host_ids = _add_hosts(b, rng, c, [templates[t] for t in host_tpl], n_cpu_hosts)
    # --- services and pods
    n_hosts = n_gpu_hosts + n_cpu_hosts
    cpu_slots = [int(x) for x in rng.permutation(np.arange(n_gpu_hosts, n_hosts).repeat(8))]
    out: dict[str, dict] = {}
    for s in svcs:
        if s["gpus"] > 0:
            pl = placements[s["name"]]
        else:
            pl = [
                (cpu_slots.pop() if cpu_slots else int(rng.integers(n_gpu_hosts, n_hosts)), [])
                for _ in range(s["replicas"])
            ]
        _add_service(b, c, s, pl, host_ids)
        out[s["name"]] = s
    for src, dst in _calls(rng, svcs):
        b.edge(f"{c}/svc/{src}", f"{c}/svc/{dst}", "calls")
    return out


def _gpu_host_templates(
    rng: np.random.Generator,
    budget: int,
    templates: dict[str, HostTemplate],
    tnames: list[str],
    tw: np.ndarray,
    cfg: GraphGenConfig,
) -> list[str]:
    """Template name of each GPU host of a cluster: one template, or a mix of two, sized so that
    the hosts with their GPUs, links and pods fill about ``budget`` nodes."""
    t1 = str(rng.choice(tnames, p=tw))
    mix = [t1]
    if rng.random() < cfg.mixed_template_prob and len(tnames) > 1:
        t2 = str(rng.choice([t for t in tnames if t != t1]))
        mix.append(t2)
    per_host = np.mean([1 + templates[t].n_gpus + len(templates[t].links) + 2.5 for t in mix])
    overhead = 40
    n_gpu_hosts = max(1, int(round((budget - overhead) / per_host)))
    return [mix[0] if (len(mix) == 1 or rng.random() < 0.6) else mix[1] for _ in range(n_gpu_hosts)]


def _place_gpu_services(
    rng: np.random.Generator, svcs: list[dict], gpus_per_host: list[int]
) -> dict[str, list[tuple[int, list[int]]]]:
    """Replicas of the GPU services on the GPU hosts: ``{service: [(host index, GPU indices)]}``.

    First fit over the hosts in a shuffled order: the mandatory replicas first (a model server
    that does not fit asks for one GPU; trainers may be dropped), then more model-server replicas
    until a drawn utilisation (55-95 %) is reached. May lower a model server's ``gpus`` in place.
    """
    free: list[list[int]] = [list(range(n)) for n in gpus_per_host]
    order = rng.permutation(len(gpus_per_host))
    placements: dict[str, list[tuple[int, list[int]]]] = {s["name"]: [] for s in svcs}

    def place(k: int) -> tuple[int, list[int]] | None:
        for h in order:
            fr = free[h]
            if len(fr) >= k:
                taken, free[h] = fr[:k], fr[k:]
                return int(h), taken
        return None

    gpu_svcs = [s for s in svcs if s["gpus"] > 0]
    # mandatory replicas first (trainers may be dropped when they do not fit)
    for s in sorted(gpu_svcs, key=lambda s: (s["role"] != "model-server", -s["gpus"])):
        want = s["replicas"] if s["role"] != "model-server" else 1
        for _ in range(want):
            p = place(s["gpus"])
            if p is None and s["gpus"] > 1 and s["role"] == "model-server":
                s["gpus"] = 1
                p = place(1)
            if p is None:
                break
            placements[s["name"]].append(p)
    gpus_total = sum(gpus_per_host)
    target_util = rng.uniform(0.55, 0.95)
    ms = [s for s in gpu_svcs if s["role"] == "model-server"]
    guard = 0
    while ms and guard < 1000:
        guard += 1
        used = gpus_total - sum(len(f) for f in free)
        if used / max(1, gpus_total) >= target_util:
            break
        s = ms[int(rng.integers(len(ms)))]
        p = place(s["gpus"])
        if p is None:
            if all(len(f) < min(x["gpus"] for x in ms) for f in free):
                break
            continue
        placements[s["name"]].append(p)
    return placements


def _add_hosts(
    b: _Builder,
    rng: np.random.Generator,
    c: str,
    gpu_hosts: list[HostTemplate],
    n_cpu_hosts: int,
) -> list[str]:
    """Add racks (ToR switches), the GPU hosts (with GPUs and links) then the CPU hosts; return the
    host ids in that order. Racks mix GPU and CPU hosts."""
    cl = f"{c}/cluster"
    n_gpu_hosts = len(gpu_hosts)
    n_hosts = n_gpu_hosts + n_cpu_hosts
    rack_size = int(rng.integers(4, 9))
    n_racks = math.ceil(n_hosts / rack_size)
    for r in range(n_racks):
        tor = b.node(
            f"{c}/net/tor-{r}", "network", c, {"cluster": c, "component": f"tor-{r}"}, role="tor"
        )
        b.edge(tor, cl, "member_of")
    host_ids: list[str] = []
    host_order = rng.permutation(n_hosts)  # racks mix GPU and CPU hosts
    for hi in range(n_hosts):
        hname = f"h{hi}"
        rack = int(np.where(host_order == hi)[0][0]) // rack_size
        if hi < n_gpu_hosts:
            hid = _add_gpu_host(b, c, hname, gpu_hosts[hi], rack)
        else:
            hid = b.node(
                f"{c}/host/{hname}",
                "host",
                c,
                {"cluster": c, "node": hname},
                role="cpu-host",
                template="cpu",
                rack=rack,
            )
        b.edge(hid, cl, "member_of")
        b.edge(hid, f"{c}/net/tor-{rack}", "depends_on")
        host_ids.append(hid)
    return host_ids


def _add_gpu_host(b: _Builder, c: str, hname: str, tpl: HostTemplate, rack: int) -> str:
    """Add a GPU host of template ``tpl`` with its GPUs and links; return the host id."""
    hid = b.node(
        f"{c}/host/{hname}",
        "host",
        c,
        {"cluster": c, "node": hname},
        role="gpu-host",
        template=tpl.name,
        rack=rack,
    )
    for gi in range(tpl.n_gpus):
        gid = b.node(
            f"{hid}/gpu{gi}",
            "gpu",
            c,
            {"cluster": c, "node": hname, "gpu": str(gi)},
            model=tpl.gpu_model,
            index=gi,
            numa=int(gi >= tpl.n_gpus // 2),
        )
        b.edge(gid, hid, "attached_to")
    for label, gpus, level, bw in tpl.links:
        lid = b.node(
            f"{hid}/{label}",
            "link",
            c,
            {"cluster": c, "node": hname, "link": label},
            level=level,
            bandwidth_gbps=bw,
        )
        for gi in gpus:
            b.edge(lid, f"{hid}/gpu{gi}", "attached_to")
    return hid


def _add_service(
    b: _Builder, c: str, s: dict, pods: list[tuple[int, list[int]]], host_ids: list[str]
) -> None:
    """Add service ``s`` with its dependencies and one pod per ``(host index, GPU indices)``."""
    ns = NAMESPACES[s["role"]]
    cl = f"{c}/cluster"
    sid = b.node(
        f"{c}/svc/{s['name']}",
        "service",
        c,
        {"cluster": c, "service": s["name"]},
        role=s["role"],
        namespace=ns,
        model=s.get("model"),
    )
    b.edge(sid, cl, "member_of")
    b.edge(sid, f"{c}/infra/coredns", "depends_on")
    b.edge(sid, f"{c}/infra/config-agent", "depends_on")
    if s["role"] in ("model-server", "embedder", "reranker"):
        b.edge(sid, "global/model-registry", "depends_on")
    if s["role"] in ("batch-trainer", "vector-db", "eval-runner"):
        b.edge(sid, "global/object-storage", "depends_on")
    for i, (h, gpus) in enumerate(pods):
        pname = f"{s['name']}-{i}"
        pid = b.node(
            f"{c}/pod/{pname}",
            "pod",
            c,
            {"cluster": c, "namespace": ns, "pod": pname},
            role=s["role"],
            service=s["name"],
            namespace=ns,
        )
        b.edge(pid, sid, "member_of")
        b.edge(pid, host_ids[h], "runs_on")
        for gi in gpus:
            b.edge(pid, f"{host_ids[h]}/gpu{gi}", "runs_on")
        b.edge(pid, f"{c}/infra/image-mirror", "depends_on")


def generate_graphs(
    n: int,
    seed: int,
    config: GraphGenConfig | None = None,
    prefix: str = "g",
    start: int = 0,
    **kw: object,
) -> list[DependencyGraph]:
    """``n`` graphs named ``<prefix><index:04d>``; graph ``i`` uses seed ``(seed, i)`` (order-independent)."""
    return [
        generate_graph(f"{prefix}{i:04d}", np.random.default_rng([seed, i]), config, **kw)  # type: ignore[arg-type]
        for i in range(start, start + n)
    ]
