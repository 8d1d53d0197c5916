"""``fleetmind doctor --prometheus URL``: are the metrics FleetMind needs there, and do they look right?

It asks a live Prometheus (instant queries to ``/api/v1/query``) what the ``prometheus`` telemetry
source (:mod:`fleetmind.serving.telemetry.prometheus`) would read, and reports findings, each ``ok``,
``info``, ``warn`` or ``error``:

| check | looks for |
| --- | --- |
| ``metrics`` | every series FleetMind reads exists (DCGM: framebuffer used/free, utilisation as ``DCGM_FI_DEV_GPU_UTIL`` or, for MIG, ``DCGM_FI_PROF_GR_ENGINE_ACTIVE``; kube-state-metrics: node allocatable, pod requests, pod info, pod phase); the optional ones (last XID ``DCGM_FI_DEV_XID_ERRORS``, absent until a GPU has had an XID; windowed ``DCGM_EXP_XID_ERRORS_COUNT``; GPU-sharing annotations; node cordons ``kube_node_spec_unschedulable`` and conditions ``kube_node_status_condition``) are named when absent |
| ``targets`` | dcgm-exporter scrape targets that are down (``up == 0`` in a job named like ``*dcgm*``; each once, however many replicas of an HA Prometheus pair report it); federation targets that are down (``up == 0`` in a job named like ``*federat*``): the clusters behind them |
| ``stale`` | DCGM and kube-state-metrics series whose newest sample is older than the bound the service applies (``FLEETMIND_TELEMETRY_MAX_AGE_S``), by cluster: a federated cluster or a remote-write sender that stopped; Prometheus keeps answering such timestamped series for its 5-minute lookback, the service leaves them out |
| ``layout`` | the scrape style (the chart's default ``honorLabels: false`` puts workloads in ``exported_pod``; ``honor_labels: true`` keeps ``pod``) and what named each GPU's node in the snapshot the service would serve (``node``, ``kubernetes_node``, ``Hostname``/``hostname``, the exporter pod's node from ``kube_pod_info``, or the scrape target's address ``instance``: a warning when kube-state-metrics does not name that node, the usual cause a ``Hostname`` that is an exporter pod name nothing places, or none); a ``Hostname`` that several scrape targets carry over different GPUs (dcgm-exporter reading a remote DCGM host engine) is an error |
| ``occupancy`` | every GPU looks occupied (the symptom of reading the exporter's own ``pod`` as a workload) |
| ``xid`` | GPUs out for a hardware XID; last-XID values that have not changed for an hour (the gauge never resets; application XIDs are ignored) |
| ``graph`` | the dependency graph the service serves (``FLEETMIND_GRAPH`` of the doctor's environment): unset or the embedded example (whose clusters are no fleet's: every alert maps to nothing), a file that does not load, clusters of the series that the graph does not hold, series without a ``cluster`` label while the graph holds several clusters |
| ``nodes`` | GPU nodes kube-state-metrics does not name; nodes whose DCGM series report fewer GPUs than their ``nvidia.com/gpu`` capacity (divided by the time-slicing replicas); GPUs the device plugin took out of allocatable ``nvidia.com/gpu`` though dcgm-exporter reports them; nodes whose exporter reports ``DCGM_FI_DEV_FB_USED`` but not ``DCGM_FI_DEV_FB_FREE`` (a custom counters CSV); nodes cordoned or not Ready (``kube_node_spec_unschedulable``, ``kube_node_status_condition``), which placements leave out |

A partial answer (Thanos with a store down, ``warnings`` in the answer) is refused as the service
refuses it: the doctor stops with that message.

Returns the findings; :func:`has_errors` says whether any is an ``error``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Annotated, Any, Literal

from fleetmind.data.errors import ConfigError, DataError, NotAvailableError
from fleetmind.data.graph import DependencyGraph, instance_address
from fleetmind.redact import safe_uri, terminal_safe
from fleetmind.serving.defaults import DEFAULT_GRAPH
from fleetmind.serving.health import REPLICA_LABELS
from fleetmind.serving.settings import Settings, env_value, parse_prometheus_headers
from fleetmind.serving.telemetry.prometheus import (
    _GPU_KEY,
    DEFAULT_MAX_AGE_S,
    HARDWARE_XIDS,
    PrometheusApiSource,
    _node_name,
    _read_ksm,
    fresh,
)

Level = Literal["ok", "info", "warn", "error"]
REQUIRED = {
    "DCGM_FI_DEV_FB_USED": "dcgm-exporter",
    "DCGM_FI_DEV_FB_FREE": "dcgm-exporter",
    "DCGM_FI_DEV_GPU_UTIL|DCGM_FI_PROF_GR_ENGINE_ACTIVE": "dcgm-exporter",
    "kube_node_status_allocatable": "kube-state-metrics",
    "kube_pod_container_resource_requests": "kube-state-metrics",
    "kube_pod_info": "kube-state-metrics",
    "kube_pod_status_phase": "kube-state-metrics",
}
"""Series the ``prometheus`` source reads, and the exporter that serves each; ``A|B``: either
(MIG instances export ``DCGM_FI_PROF_GR_ENGINE_ACTIVE``, not ``DCGM_FI_DEV_GPU_UTIL``)."""
OPTIONAL = {
    "DCGM_FI_DEV_XID_ERRORS": "absent: no XID yet (dcgm-exporter 4.5.3 and later skip blank "
    "values, and the last XID is blank until a GPU has had one; NVIDIA/dcgm-exporter#700, #646)",
    "DCGM_EXP_XID_ERRORS_COUNT": "windowed XID counts let a GPU come back once its hardware XID "
    "leaves the window (dcgm-exporter: add it to the counters CSV, --xid-count-window-size)",
    "kube_pod_annotations": "GPU shares of the GPU-sharing scheduler (kube-state-metrics "
    "--metric-annotations-allowlist=pods=[alibabacloud.com/gpu-milli,alibabacloud.com/gpu-index])",
    "kube_node_spec_unschedulable": "cordoned nodes cannot be told apart: placements may choose "
    "them (kube-state-metrics' node collector)",
    "kube_node_status_condition": "nodes that are not Ready cannot be told apart: placements may "
    "choose them (kube-state-metrics' node collector)",
}
STALE_XID_WINDOW = "1h"


@dataclass(frozen=True)
class Finding:
    """One result: ``level`` (ok, info, warn, error), the ``check`` it belongs to, one line."""

    level: Level
    check: str
    message: str

    def line(self) -> str:
        """The finding as printed: label values from Prometheus (instance, node, pod) show their
        control characters escaped, so none moves the cursor or forges another finding's line."""
        return terminal_safe(f"{self.level:<5}  {self.check}: {self.message}")


def has_errors(findings: list[Finding]) -> bool:
    return any(f.level == "error" for f in findings)


def as_json(url: str, findings: list[Finding]) -> dict[str, Any]:
    """``{"prometheus", "errors", "findings": [{level, check, message}]}``."""
    return {
        "prometheus": safe_uri(url),
        "errors": sum(f.level == "error" for f in findings),
        "findings": [asdict(f) for f in findings],
    }


def diagnose(
    url: str,
    timeout_s: float = 10.0,
    cluster: str = "local",
    max_age_s: float | None = None,
    bearer_token_file: str | None = None,
    ca_file: str | None = None,
    graph: str | None = None,
    headers: str | None = None,
) -> list[Finding]:
    """Query the Prometheus at ``url`` and return the findings (see the module docstring).

    ``max_age_s`` (s), ``bearer_token_file``, ``ca_file``, ``graph`` (a graph file) and
    ``headers`` (``Name=value`` pairs separated by commas): as the service's
    ``FLEETMIND_TELEMETRY_MAX_AGE_S``, ``FLEETMIND_PROMETHEUS_BEARER_TOKEN_FILE``,
    ``FLEETMIND_PROMETHEUS_CA_FILE``, ``FLEETMIND_GRAPH`` and ``FLEETMIND_PROMETHEUS_HEADERS``, read
    from those variables when None.

    Raises:
        NotAvailableError: Prometheus cannot be reached, refuses a query or answers partially.
        ConfigError: ``ca_file`` is not a readable CA bundle, or the headers are refused (one
            line naming the header, never its value).
    """
    if max_age_s is None:
        max_age_s = _env_setting("telemetry_max_age_s", DEFAULT_MAX_AGE_S)
    bearer_token_file = (
        bearer_token_file or env_value("FLEETMIND_PROMETHEUS_BEARER_TOKEN_FILE") or None
    )
    if headers is None:
        headers = env_value("FLEETMIND_PROMETHEUS_HEADERS")
    try:
        header_map = parse_prometheus_headers(headers, bearer_token_file, url)
    except ValueError as err:  # the service's own check; its message never quotes a value
        raise ConfigError(f"invalid setting FLEETMIND_PROMETHEUS_HEADERS: {err}") from None
    src = PrometheusApiSource(
        url,
        default_cluster=cluster,
        timeout_s=timeout_s,
        ttl_s=0.0,
        max_age_s=max_age_s,
        bearer_token_file=bearer_token_file,
        ca_file=ca_file or env_value("FLEETMIND_PROMETHEUS_CA_FILE") or None,
        headers=header_map,
    )
    try:
        return _diagnose(src) + graph_findings(src, graph or env_value("FLEETMIND_GRAPH"))
    finally:
        src.close()


def _env_setting(field: str, default: float) -> float:
    """The service setting ``field`` from its variable ``FLEETMIND_<FIELD>``, validated by the
    service's own field (:class:`fleetmind.serving.settings.Settings`: its type and bounds, e.g.
    ``FLEETMIND_TELEMETRY_MAX_AGE_S`` from 0 to a year, s), so the doctor accepts what
    ``fleetmind serve`` accepts and nothing else; unset or blank: ``default``.

    Raises:
        ConfigError: the variable is set to a value the service refuses (one line naming it).
    """
    from pydantic import ConfigDict, TypeAdapter, ValidationError

    name = f"FLEETMIND_{field.upper()}"
    raw = (env_value(name) or "").strip()  # any case, as the settings read it
    if not raw:
        return default
    info = Settings.model_fields[field]
    check = TypeAdapter(
        Annotated[info.annotation, info],
        config=ConfigDict(allow_inf_nan=Settings.model_config.get("allow_inf_nan", True)),
    )
    try:
        return check.validate_python(raw)
    except ValidationError as err:
        why = err.errors(include_url=False)[0]["msg"]
        raise ConfigError(f"invalid setting {name}={raw!r}: {why}") from None


def _as_count(value: float, promql: str) -> int:
    """A ``count(...)`` sample as an int; a NaN, infinite or negative one means the answer is not
    usable (not a Prometheus, or a broken proxy in front of it)."""
    if not math.isfinite(value) or value < 0:
        raise NotAvailableError(
            f"Prometheus answered {value} for {promql}, which is not a count; the server's "
            "answers cannot be used (is the URL a Prometheus server?)"
        )
    return int(value)


def _count(src: PrometheusApiSource, promql: str) -> int:
    query = f"count({promql})"
    got = src.query(query, "count")
    return _as_count(got[0][2], query) if got else 0


def _diagnose(src: PrometheusApiSource) -> list[Finding]:
    out: list[Finding] = []
    # ---- metrics
    names = "|".join([*REQUIRED, *OPTIONAL])
    by_name = f'count by (__name__) ({{__name__=~"{names}"}})'
    present = {
        lab.get("__name__", ""): _as_count(v, by_name) for _, lab, v in src.query(by_name, "count")
    }
    missing = [m for m in REQUIRED if not any(a in present for a in m.split("|"))]
    for exporter in dict.fromkeys(REQUIRED[m] for m in missing):
        gone = [m for m in missing if REQUIRED[m] == exporter]
        shown = ", ".join(m.replace("|", " or ") for m in gone)
        out.append(Finding("error", "metrics", f"missing {shown} (is {exporter} scraped?)"))
    if not missing:
        out.append(Finding("ok", "metrics", f"all {len(REQUIRED)} required series are there"))
    for m, why in OPTIONAL.items():
        if m not in present:
            out.append(Finding("info", "metrics", f"no {m}: {why}"))
    out += _targets_down(src)
    out += _stale(src)
    gpu_series = present.get("DCGM_FI_DEV_FB_USED", 0)
    snap = src.collect()
    if gpu_series:
        out += _layout(src, gpu_series, snap)
        out += _xids(src)
    gpus = [g for n in snap.nodes for g in n.gpus]
    if gpus:
        free = sum(g.free_milli > 0 for g in gpus)
        if free == 0:
            out.append(
                Finding(
                    "error",
                    "occupancy",
                    f"every one of {len(gpus)} GPUs looks occupied or unhealthy: the extender "
                    "would refuse every GPU pod; check the layout finding (the exporter's own "
                    "pod read as a workload) and the xid findings",
                )
            )
        else:
            out.append(Finding("ok", "occupancy", f"{free} of {len(gpus)} GPUs have room"))
        sick = [
            (n.name, g.index, g.xid_errors)
            for n in snap.nodes
            for g in n.gpus
            if not g.healthy and not g.missing and not g.unallocatable
        ]
        if sick:
            shown = ", ".join(f"{n}/{i} (XID {x:g})" for n, i, x in sick[:5] if x is not None)
            out.append(
                Finding("warn", "xid", f"{len(sick)} GPU(s) out for a hardware XID: {shown}")
            )
        if "kube_node_status_allocatable" in present:
            out += _unmatched(snap)
        out += _missing_gpus(snap) + _unschedulable(snap) + _unknown_memory(snap)
    return out


def _unknown_memory(snap: Any) -> list[Finding]:
    """A warning naming the nodes whose GPUs report framebuffer used (``DCGM_FI_DEV_FB_USED``) but
    no size (neither ``DCGM_FI_DEV_FB_FREE`` nor ``DCGM_FI_DEV_FB_TOTAL``): a dcgm-exporter ``-f``
    counters CSV without FB_FREE, which the fleet-wide ``metrics`` check misses where other nodes
    export it. Their GPUs count free by utilisation and pods alone. The GPUs are those the service
    marks (``GpuState.memory_unknown``), as it logs them: an exported ``DCGM_FI_DEV_FB_FREE`` with
    DCGM's blank value is a GPU that cannot report, not a CSV without the field."""
    nodes = sorted(
        {f"{n.cluster}/{n.name}" for n in snap.nodes for g in n.gpus if g.memory_unknown}
    )
    if not nodes:
        return []
    return [
        Finding(
            "warn",
            "nodes",
            f"{len(nodes)} node(s) export DCGM_FI_DEV_FB_USED but not DCGM_FI_DEV_FB_FREE: "
            f"{', '.join(nodes[:5])}{', ...' if len(nodes) > 5 else ''}; their GPU memory is "
            "unknown, and a GPU no pod holds counts free when idle by utilisation alone. Add "
            "DCGM_FI_DEV_FB_FREE to that dcgm-exporter's counters CSV (-f; the default "
            "etc/default-counters.csv has it)",
        )
    ]


GRAPH_CLUSTERS = (
    'count by (cluster) ({__name__=~"DCGM_FI_DEV_FB_USED|kube_node_status_allocatable"})'
)
"""The clusters of the fleet's series (one GPU series, one node series), as alerts on them carry."""


def graph_findings(src: Any, path: str | None) -> list[Finding]:
    """The ``graph`` check: does the graph the service serves (the file ``path``, the service's
    ``FLEETMIND_GRAPH``; unset: the embedded example) hold the fleet that Prometheus reports?

    An alert maps onto the graph by its ``cluster`` label, or, without one, onto the graph's
    cluster when the graph holds exactly one (docs/graph.md); the embedded example's clusters
    (c0, c1) are no fleet's, so there every alert maps to nothing. ``src`` answers
    :meth:`PrometheusApiSource.query`.
    """
    if not path:
        return [
            Finding(
                "warn",
                "graph",
                "FLEETMIND_GRAPH is not set here: a service started with this environment serves "
                "the embedded example graph, whose clusters are no fleet's, so alerts map to no "
                "graph node and incidents get no ranked causes. Run the doctor with the service's "
                "environment (kubectl exec into its pod) or FLEETMIND_GRAPH=<its graph file>",
            )
        ]
    try:
        graph = DependencyGraph.load(path)
    except DataError as err:
        return [Finding("error", "graph", f"FLEETMIND_GRAPH: {err}; the service cannot load it")]
    if graph.name == DependencyGraph.load(DEFAULT_GRAPH).name:
        return [
            Finding(
                "error",
                "graph",
                f"FLEETMIND_GRAPH ({path}) holds the embedded example graph '{graph.name}', whose "
                "clusters are no fleet's: alerts map to no graph node and incidents get no ranked "
                "causes; build the fleet's graph with `fleetmind graph build` (docs/deploy.md)",
            )
        ]
    clusters = {str(n.match["cluster"]) for n in graph.nodes if "cluster" in n.match}
    series = src.query(GRAPH_CLUSTERS, "count")
    named = sorted({lab["cluster"] for _, lab, _ in series if lab.get("cluster")})
    out = []
    missing = [c for c in named if c not in clusters]
    if missing:
        out.append(
            Finding(
                "warn",
                "graph",
                f"series of cluster(s) {', '.join(missing[:5])}, which graph '{graph.name}' does "
                "not hold: their alerts map to no graph node (build the graph of each cluster, "
                "with the same --cluster name as the series' 'cluster' label)",
            )
        )
    if any(not lab.get("cluster") for _, lab, _ in series) and len(clusters) != 1:
        out.append(
            Finding(
                "warn",
                "graph",
                f"series without a 'cluster' label, and graph '{graph.name}' holds "
                f"{len(clusters)} clusters: alerts without one map to no graph node (set the "
                "'cluster' external label of each Prometheus, docs/graph.md)",
            )
        )
    if not out:
        shown = ", ".join(sorted(clusters)[:5]) or "none"
        out.append(
            Finding(
                "ok",
                "graph",
                f"graph '{graph.name}' ({graph.num_nodes} nodes, clusters {shown}) holds the "
                "clusters of the series",
            )
        )
    return out


def _targets_down(src: PrometheusApiSource) -> list[Finding]:
    """dcgm-exporter scrape targets Prometheus cannot scrape (``up == 0`` in a job named like
    ``*dcgm*``, as the chart's ServiceMonitor job ``serviceMonitor/<ns>/<name>-dcgm-exporter/0``),
    and federation targets down (a job named like ``*federat*``): a whole cluster's series.

    Each target counts once: the two replicas of an HA Prometheus pair seen through Thanos Query
    without deduplication each report its ``up`` (:data:`REPLICA_LABELS`), and a target is down
    when no replica scrapes it."""
    out = []
    down = src.query(f'max without ({REPLICA_LABELS}) (up{{job=~"(?i).*dcgm.*"}}) == 0', "up")
    if down:
        shown = ", ".join(
            lab.get("node") or lab.get("pod") or lab.get("instance", "?") for _, lab, _ in down[:5]
        )
        out.append(
            Finding(
                "warn",
                "targets",
                f"{len(down)} dcgm-exporter target(s) down ({shown}): their GPUs are shown "
                "unhealthy where kube-state-metrics counts them, else not at all",
            )
        )
    fed = src.query(f'max without ({REPLICA_LABELS}) (up{{job=~"(?i).*federat.*"}}) == 0', "up")
    if fed:
        shown = ", ".join(
            f"{lab.get('cluster', '?')} ({lab.get('instance', '?')})" for _, lab, _ in fed[:5]
        )
        out.append(
            Finding(
                "warn",
                "targets",
                f"{len(fed)} federation target(s) down: cluster {shown}; federated samples carry "
                "timestamps, so Prometheus marks none stale and answers them for 5 minutes; "
                f"the service leaves them out once older than {src.max_age_s:g} s "
                "(FLEETMIND_TELEMETRY_MAX_AGE_S)",
            )
        )
    return out


STALE_CHECKED = ("DCGM_FI_DEV_FB_USED", "kube_node_status_allocatable")
"""Series whose age the ``stale`` check reads (one GPU series, one node series)."""


def _stale(src: PrometheusApiSource) -> list[Finding]:
    """Series the service leaves out for their age (:data:`STALE_CHECKED`), by cluster."""
    if src.max_age_s <= 0:
        return [
            Finding(
                "info",
                "stale",
                "FLEETMIND_TELEMETRY_MAX_AGE_S is 0: series of a federated cluster that stopped "
                "stay for Prometheus's 5-minute lookback",
            )
        ]
    old: dict[str, int] = {}
    for metric in STALE_CHECKED:
        promql = (
            f"count by (cluster) ({metric} unless "
            f"(time() - timestamp({metric}) < {float(src.max_age_s)!r}))"
        )
        for _, lab, v in src.query(promql, "count"):
            cluster = lab.get("cluster") or src.default_cluster
            old[cluster] = old.get(cluster, 0) + _as_count(v, promql)
    if not old:
        return []
    shown = ", ".join(f"{c} ({n} series)" for c, n in sorted(old.items())[:5])
    return [
        Finding(
            "warn",
            "stale",
            f"series older than {src.max_age_s:g} s in cluster(s) {shown}: a federated cluster "
            "or remote-write sender that stopped sending (its samples carry timestamps, so "
            "Prometheus keeps them for 5 minutes); the service leaves them out. A live cluster "
            "here: raise FLEETMIND_TELEMETRY_MAX_AGE_S above its scrape plus federation interval",
        )
    ]


def _missing_gpus(snap: Any) -> list[Finding]:
    """Nodes whose DCGM series report fewer GPUs than the kubelet counts (placeholders)."""
    short = []
    for n in snap.nodes:
        lost = sum(g.missing for g in n.gpus)
        if lost:
            reps = f" x {n.gpu_replicas} replicas" if n.gpu_replicas > 1 else ""
            short.append(f"{n.name} ({len(n.gpus) - lost} of {len(n.gpus)} GPUs{reps})")
    if not short:
        return []
    return [
        Finding(
            "warn",
            "nodes",
            f"{len(short)} node(s) report fewer GPUs than kube-state-metrics counts "
            f"(nvidia.com/gpu capacity): {', '.join(short[:5])}; the others are shown unhealthy "
            "(fallen off the bus, exporter down, or their series name another node: see layout). "
            "Time-sliced, MPS or MIG nodes: export the replicas and MIG profile labels, and the "
            "GPU Operator's device-plugin label that marks a node paused for a MIG change "
            "(kube-state-metrics --metric-labels-allowlist=nodes=[nvidia.com/gpu.replicas,"
            "nvidia.com/gpu.product,nvidia.com/gpu.deploy.device-plugin,"
            "cloud.google.com/gke-max-shared-clients-per-gpu,"
            "cloud.google.com/gke-gpu-partition-size], the last two on GKE)",
        )
    ]


def _device_plugin_down(node: Any) -> bool:
    """Whether every GPU with MIG disabled on ``node`` (one at least) is out of allocatable: what
    :func:`~fleetmind.serving.telemetry.prometheus.mark_unallocatable_gpus` makes of an
    allocatable ``nvidia.com/gpu`` of 0 (the device plugin not serving; capacity 0 too only
    where no other GPU resource is served and the plugin is not turned off by label)."""
    plain = [g for g in node.gpus if g.mig_parent is None and not g.missing]
    return bool(plain) and all(g.unallocatable for g in plain)


def _unschedulable(snap: Any) -> list[Finding]:
    """GPUs out of their node's allocatable ``nvidia.com/gpu`` though their exporter reports them
    (the device plugin marked them unhealthy), and nodes cordoned or not Ready: placements use
    neither."""
    out = []
    idle = [n for n in snap.nodes if _device_plugin_down(n)]
    if idle:
        out.append(
            Finding(
                "warn",
                "nodes",
                f"{len(idle)} node(s) with allocatable nvidia.com/gpu 0: the NVIDIA device plugin "
                f"is not serving there (its pod restarting or crash-looping, or paused for a "
                f"driver upgrade: node label nvidia.com/gpu.deploy.device-plugin), or it "
                f"marked every GPU unhealthy: "
                f"{', '.join(n.name for n in idle[:5])}; their GPUs are shown unhealthy. A node "
                f"whose GPUs another driver serves (the NVIDIA DRA driver) reads so too, its "
                f"retired nvidia.com/gpu kept at 0: label it "
                f"nvidia.com/gpu.deploy.device-plugin=false and export that label "
                f"(kube-state-metrics --metric-labels-allowlist)",
            )
        )
    lost = [f"{n.name}/{g.index}" for n in snap.nodes if n not in idle
            for g in n.gpus if g.unallocatable]  # fmt: skip
    if lost:
        out.append(
            Finding(
                "warn",
                "nodes",
                f"{len(lost)} GPU(s) reported by dcgm-exporter are out of their node's "
                f"allocatable nvidia.com/gpu (the device plugin marked them unhealthy, for good "
                f"until it restarts): {', '.join(lost[:5])}; shown unhealthy",
            )
        )
    off = [f"{n.name} ({n.unschedulable_reason})" for n in snap.nodes if not n.schedulable]
    if off:
        out.append(
            Finding(
                "info",
                "nodes",
                f"{len(off)} node(s) cordoned, not Ready or being removed, left out of placements: "
                f"{', '.join(off[:5])}",
            )
        )
    return out


def _unmatched(snap: Any) -> list[Finding]:
    """GPU nodes that kube-state-metrics does not name under the same cluster, and node names two
    clusters share: the extender can place nothing on the first (no CPU or memory to give) and
    cannot tell the second apart."""
    out = []
    orphans = [f"{n.cluster}/{n.name}" for n in snap.nodes if n.gpus and n.cpu_milli <= 0]
    if orphans:
        out.append(
            Finding(
                "error",
                "nodes",
                f"{len(orphans)} GPU node(s) have no allocatable CPU or memory from "
                f"kube-state-metrics under the same cluster and name: {', '.join(orphans[:5])} "
                "(a 'cluster' label on the DCGM jobs only, an exporter pod name that "
                "kube_pod_info does not place on a node, or a Hostname that is the OS host name "
                "of an exporter on hostNetwork while the kubelet's --hostname-override names the "
                "node otherwise, e.g. EKS's ip-10-0-1-5 on node ip-10-0-1-5.ec2.internal, and "
                "kube_pod_info does not place the exporter pod); the extender can place nothing "
                "there",
            )
        )
    clusters: dict[str, set[str]] = {}
    for n in snap.nodes:
        clusters.setdefault(n.name, set()).add(str(n.cluster))
    shared = sorted(name for name, cs in clusters.items() if len(cs) > 1)
    if shared:
        out.append(
            Finding(
                "warn",
                "nodes",
                f"{len(shared)} node name(s) are in several clusters ({', '.join(shared[:5])}): "
                "set FLEETMIND_SCHEDULER_CLUSTER for the extender, or give every job the same "
                "'cluster' label",
            )
        )
    return out


def _layout(src: PrometheusApiSource, series: int, snap: Any) -> list[Finding]:
    """The scrape style (``exported_pod`` or ``pod``), a ``Hostname`` that several targets share
    (:func:`_shared_hostnames`) and how GPU nodes were named (:func:`_naming`)."""
    out = []
    exported = _count(src, 'DCGM_FI_DEV_FB_USED{exported_pod!=""}')
    with_pod = _count(src, 'DCGM_FI_DEV_FB_USED{pod!=""}')
    if exported:
        out.append(
            Finding(
                "ok",
                "layout",
                f"honorLabels false (dcgm-exporter chart's default): {exported} of {series} GPU "
                "series name their workload in exported_pod; 'pod' is the exporter's own",
            )
        )
    elif with_pod:
        out.append(
            Finding(
                "info",
                "layout",
                f"{with_pod} of {series} GPU series carry 'pod' and none 'exported_pod': "
                "honor_labels true, or no GPU is in use; FleetMind leaves out the exporter's own "
                "pods (DaemonSet pods in kube_pod_info, dcgm-exporter-xxxxx names)",
            )
        )
    for label in HOST_LABELS:
        out += _shared_hostnames(src, label)
    return out + _naming(src, snap)


NAMING = "count by (cluster, node, kubernetes_node, Hostname, hostname, instance) ({series})"
"""The labels that may name a GPU series' node, per scrape target (see :func:`_naming`), of the
series the service reads (``{series}``: ``DCGM_FI_DEV_FB_USED`` within its staleness bound,
:func:`~fleetmind.serving.telemetry.prometheus.fresh`)."""
KSM_NAMED = "kube_pod_info"
"""The source of a node name taken from the exporter pod's (or a workload pod's) node."""


def _naming(src: PrometheusApiSource, snap: Any) -> list[Finding]:
    """How the service named each GPU series' node (the service's own rule, :func:`_node_name`,
    on :data:`NAMING`'s label sets, checked against ``snap``, the snapshot it would serve), not
    merely which labels exist: ``node``/``kubernetes_node``; ``Hostname``/``hostname``; the exporter
    pod's node from ``kube_pod_info`` (a ``Hostname`` that is an exporter pod's name, one that
    several targets share, a host name that is no node, or no ``Hostname`` at all); else the scrape
    target's address (``instance``: no ``node`` label, and a ``Hostname`` that is missing or an
    exporter pod name, where ``kube_pod_info`` places no pod of the target), a warning where
    kube-state-metrics names no such node (kube-scheduler's node names match an address only
    where targets are addressed by node name)."""
    names = {(n.cluster, n.name) for n in snap.nodes if n.gpus}
    known = {(n.cluster, n.name) for n in snap.nodes if n.cpu_milli > 0}
    placed = _read_ksm(src.query(src.ksm_query), src.default_cluster).pod_by_name
    used: dict[str, int] = {}
    by_address: dict[str, set[str]] = {}
    unmatched = False
    hostless = 0  # series named from kube_pod_info that carry no Hostname at all
    naming = NAMING.format(series=fresh("DCGM_FI_DEV_FB_USED", src.max_age_s))
    for _, lab, v in src.query(naming, "count"):
        cluster = lab.get("cluster") or src.default_cluster
        name = _node_name(lab, placed, cluster)
        host_label = next((k for k in HOST_LABELS if lab.get(k)), None)
        host = lab.get(host_label or "", "")
        address = instance_address(lab.get("instance", ""))
        label = next((k for k in ("node", "kubernetes_node") if lab.get(k)), None)
        if label is None and (cluster, name) not in names:
            # a Hostname several targets share: each target's node, else its address
            label = "instance" if (cluster, address) in names else KSM_NAMED
        elif label is None and host_label and name == host:
            label = host_label
        elif label is None and host_label and placed.get((cluster, host)) == name:
            label = KSM_NAMED
        elif label is None:
            label = "instance"
        if label == "instance":
            by_address.setdefault(address or name, set()).add(host)
            unmatched |= (cluster, address or name) not in known
        count = _as_count(v, naming)
        hostless += count if label == KSM_NAMED and not host else 0
        used[label] = used.get(label, 0) + count
    out = []
    for label, n in used.items():
        if label == KSM_NAMED:
            why = (
                "GPU nodes named by their exporter pod's node from kube_pod_info ('Hostname' "
                "is no node: an exporter pod's name, one that several targets share, or the OS "
                "host name of an exporter on hostNetwork where the kubelet's --hostname-override "
                f"names the node otherwise; {n} series"
                + (f", {hostless} with no Hostname at all: dcgm-exporter -n)" if hostless else ")")
            )
            out.append(Finding("ok", "layout", why))
        elif label != "instance":
            out.append(
                Finding("ok", "layout", f"GPU nodes named by the '{label}' label ({n} series)")
            )
    if "instance" in used:
        shown = ", ".join(sorted(by_address)[:3]) + (", ..." if len(by_address) > 3 else "")
        hosts = sorted({h for hs in by_address.values() for h in hs if h})
        why = (
            f"their Hostname ({', '.join(hosts[:3])}) names no node: an exporter pod name that "
            "kube_pod_info does not place, or one that several targets share"
            if hosts
            else "they carry no Hostname (dcgm-exporter -n)"
        )
        out.append(
            Finding(
                "warn" if unmatched else "info",
                "layout",
                f"{used['instance']} GPU series are on nodes named by their scrape target's "
                f"address ('instance': {shown}): no node or kubernetes_node label, and {why}; "
                "kube-scheduler's node names match it only where targets are addressed by node "
                "name. Add a 'node' label from __meta_kubernetes_pod_node_name to the "
                "dcgm-exporter scrape, or scrape kube_pod_info",
            )
        )
    return out


HOST_LABELS = ("Hostname", "hostname")
"""dcgm-exporter's own labels naming the node (``hostname`` in its newest code)."""


def _shared_hostnames(src: PrometheusApiSource, label: str) -> list[Finding]:
    """An error for each ``label`` value (``Hostname``) that several scrape targets carry over
    different GPUs (one ``gpu`` index with several ``UUID`` values): dcgm-exporter reading a remote
    DCGM host engine (``DCGM_REMOTE_HOSTENGINE_INFO``) reports the engine's host as ``Hostname``
    (``GetHostname`` in NVIDIA/dcgm-exporter ``internal/pkg/hostname/hostname.go``). Two targets
    with the same GPUs (an exporter rollout) are no error."""
    promql = (
        f"count by (cluster, {label}, instance, gpu, UUID) "
        f'(DCGM_FI_DEV_FB_USED{{node="",kubernetes_node="",{label}!=""}})'
    )
    targets: dict[tuple[str, str], set[str]] = {}
    uuids: dict[tuple[str, str, str], set[str]] = {}
    for _, lab, _ in src.query(promql, "count"):
        key = (lab.get("cluster", ""), lab.get(label, ""))
        targets.setdefault(key, set()).add(lab.get("instance", ""))
        if lab.get("UUID"):
            uuids.setdefault((*key, lab.get("gpu", "")), set()).add(lab["UUID"])
    mixed = {key[:2] for key, u in uuids.items() if len(u) > 1}
    out = []
    for key in sorted(k for k in mixed if len(targets[k]) > 1):
        shown = ", ".join(sorted(targets[key])[:3]) + (", ..." if len(targets[key]) > 3 else "")
        out.append(
            Finding(
                "error",
                "layout",
                f"{label} '{key[1]}' is on the GPUs of {len(targets[key])} scrape targets "
                f"({shown}): dcgm-exporter reads a remote DCGM host engine "
                "(DCGM_REMOTE_HOSTENGINE_INFO, e.g. the GPU Operator's standalone DCGM) and names "
                "every node after it; FleetMind places each target's GPUs on its exporter pod's "
                "node from kube_pod_info (else on the target's address), but alerts carry that "
                f"{label} and map to no host. Add a 'node' label to the dcgm-exporter scrape "
                "(relabel __meta_kubernetes_pod_node_name to node)",
            )
        )
    return out


def _xids(src: PrometheusApiSource) -> list[Finding]:
    """Application XIDs shown, and last XIDs kept for :data:`STALE_XID_WINDOW`, counted per GPU:
    its series as the service reads them (one per GPU identity, the ``max by`` of
    :func:`~fleetmind.serving.telemetry.prometheus.fleet_queries`), so the replicas of an HA
    Prometheus pair (:data:`REPLICA_LABELS`) do not count a GPU twice."""
    out = []
    hw = "|".join(str(x) for x in sorted(HARDWARE_XIDS))
    gpu = f"{_GPU_KEY}, UUID"
    last = src.query(
        f'count_values by ({gpu}) ("xid", max by ({gpu}) (DCGM_FI_DEV_XID_ERRORS != 0))', "xid"
    )
    app = sorted({lab.get("xid", "") for _, lab, _ in last} - {str(x) for x in HARDWARE_XIDS})
    if app:
        out.append(
            Finding(
                "info",
                "xid",
                f"{sum(lab.get('xid') in app for _, lab, _ in last)} GPU(s) show an application "
                f"XID as their last XID ({', '.join(app[:8])}); FleetMind ignores those",
            )
        )
    # "kept for 1h": unchanged over the window, and the series was there an hour ago (a new
    # series, e.g. after an exporter restart, has no change in its few samples either)
    stale = _count(
        src,
        f"max by ({gpu}) (((DCGM_FI_DEV_XID_ERRORS != 0) unless "
        f"(changes(DCGM_FI_DEV_XID_ERRORS[{STALE_XID_WINDOW}]) > 0)) "
        f"and (DCGM_FI_DEV_XID_ERRORS offset {STALE_XID_WINDOW}))",
    )
    if stale:
        out.append(
            Finding(
                "warn",
                "xid",
                f"{stale} GPU(s) have kept the same non-zero last XID for {STALE_XID_WINDOW} or "
                "more: DCGM_FI_DEV_XID_ERRORS never resets, so only hardware XIDs "
                f"({hw[:40]}...) keep a GPU out; export DCGM_EXP_XID_ERRORS_COUNT to let them "
                "clear after a repair",
            )
        )
    return out
