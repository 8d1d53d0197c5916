"""The fault catalog: where faults start, how they spread over the dependency graph, what alerts they raise.

Model. A fault starts at an **origin** node with a **root effect** (e.g. ``gpu_failed``). An effect at a
node raises that node's alerts (:data:`EFFECT_ALERTS`, keyed by effect and node kind, each alert with a
probability) and spreads over **hops** (:data:`HOPS`): from a node with effect E, each neighbour reached
over an edge of kind K in a direction D (``down`` = along the edge, towards the dependency; ``up`` =
against it, towards the dependents) with a node kind/role filter gets the hop's new effect with the hop's
probability, after a log-normal delay (median seconds, sigma). Most faults travel ``up`` (a GPU's
dependents are its pods and links, a service's dependents its callers).

Grounding (``/work/shared/references/gpu-fleet-failures-and-alerting.md``):

* The **prior** over fault types follows the failure mix of Meta's Llama 3 pre-training run (419
  unexpected interruptions on 16,384 H100s): faulty GPU incl. NVLink 30.1 %, HBM3 17.2 %, SRAM 4.5 %,
  network switch/cable 8.4 %, GPU-related 58.7 % in all; the rest (software, host, config) is split over
  the platform faults. See :data:`FAULT_TYPES` ``prior``.
* **XIDs** as NVIDIA documents them: 79 fallen off the bus, 43 GPU stopped processing, 119/120 GSP errors,
  48 double-bit ECC, 63/64 row remapping, 94/95 contained/uncontained ECC, 74 NVLink error; 13 and 31 are
  usually application faults and appear as background noise.
* Alert names are the kube-prometheus / node-exporter / CoreDNS mixin names where one exists
  (``KubeNodeNotReady``, ``KubePodCrashLooping``, ``KubeDeploymentReplicasMismatch``, ``CoreDNSDown``,
  ``TargetDown``, ...) with their ``for:`` durations; GPU alerts are DCGM-exporter based
  (``GPUXidError`` with an ``xid`` label from ``DCGM_FI_DEV_XID_ERRORS``, ``GPUThermalThrottling`` from
  ``DCGM_FI_DEV_GPU_TEMP`` ...); application alerts use the thresholds of the reference (p99 inference
  latency > 1.8 s, token-throughput std > 47 % of mean over 3 min, queue backlog > 5,000, weight-load
  failure rate > 7 %, cross-cluster RT > 280 ms with jitter > 40 % over 3 windows).
"""

from __future__ import annotations

from dataclasses import dataclass

SEVERITIES: tuple[str, ...] = ("critical", "warning", "info", "none")


@dataclass(frozen=True)
class AlertRule:
    """An alerting rule that fires at a node with a given effect.

    Attributes:
        alertname: Prometheus alert name.
        severity: ``critical`` / ``warning`` / ``info`` / ``none``.
        for_s: the rule's ``for:`` duration in seconds (condition must hold this long before firing).
        prob: chance the rule fires when its node has the effect (rules are imperfect; thresholds
            are not always crossed).
        job: the Prometheus job that exports the series (becomes the ``job`` label).
        labels: extra static labels (e.g. ``(("xid", "74"),)``); a value with ``|`` picks one option
            per incident (``"79|43|119"``).
        roles: only at nodes whose ``attrs["role"]`` is one of these (empty: any role).
        summary: the ``summary`` annotation.
    """

    alertname: str
    severity: str
    for_s: float
    prob: float = 1.0
    job: str = "app"
    labels: tuple[tuple[str, str], ...] = ()
    roles: tuple[str, ...] = ()
    summary: str = ""


@dataclass(frozen=True)
class Hop:
    """A propagation rule.

    Attributes:
        effect: the effect at the current node this rule applies to.
        edge: edge kind followed (one of ``data.graph.EDGE_KINDS``).
        direction: ``"down"`` follows ``src -> dst`` (to dependencies), ``"up"`` goes ``dst -> src``
            (to dependents).
        to_kinds: node kinds the hop may reach.
        prob: chance that each eligible neighbour is affected.
        delay: ``(median_s, sigma)`` of the log-normal onset delay at the neighbour.
        new_effect: effect at the reached node.
        to_roles: optional role filter on the reached node.
    """

    effect: str
    edge: str
    direction: str
    to_kinds: tuple[str, ...]
    prob: float
    delay: tuple[float, float]
    new_effect: str
    to_roles: tuple[str, ...] = ()


@dataclass(frozen=True)
class FaultType:
    """One fault type of the catalog.

    Attributes:
        name: identifier (``fault_type`` of incidents).
        description: one line.
        origins: ``(node kind, roles, root effect)`` where the fault may start (roles empty: any)
            and the effect it has there; entries weighted by ``origin_weights``.
        origin_weights: relative weight of each origin entry.
        prior: default share among incidents (normalised over the catalog).
        silenceable: whether the origin may raise no alert of its own (silent root) while its
            neighbourhood still identifies it.
        grounding: where the fault and its signature come from.
    """

    name: str
    description: str
    origins: tuple[tuple[str, tuple[str, ...], str], ...]
    origin_weights: tuple[float, ...]
    prior: float
    silenceable: bool
    grounding: str


MIN = 60.0

# ----------------------------------------------------------------------------------------------------
# Alerts raised by an effect at a node, keyed by (effect, node kind).
# ----------------------------------------------------------------------------------------------------
_SVC_ERR = AlertRule(
    "ServiceErrorRateHigh", "critical", 5 * MIN, 0.6, "app", summary="5xx ratio above 5 % for 5m"
)
_SVC_LAT = AlertRule(
    "ServiceLatencyHigh", "warning", 5 * MIN, 0.35, "app", summary="p99 latency above SLO for 5m"
)
_INF_LAT = AlertRule(
    "InferenceLatencyHigh",
    "warning",
    3 * MIN,
    0.6,
    "app",
    roles=("model-server", "router", "gateway"),
    summary="p99 inference latency > 1.8 s for 3m",
)
_TOK_UNSTABLE = AlertRule(
    "TokenThroughputUnstable",
    "warning",
    3 * MIN,
    0.35,
    "app",
    roles=("model-server",),
    summary="token-throughput std > 47 % of mean over 3 min",
)
_GW_5XX = AlertRule(
    "GatewayHTTP5xxHigh",
    "critical",
    2 * MIN,
    0.7,
    "ingress-nginx",
    roles=("gateway",),
    summary="gateway 5xx above 2 % for 2m",
)
_REPLICAS = AlertRule(
    "KubeDeploymentReplicasMismatch",
    "warning",
    15 * MIN,
    0.5,
    "kube-state-metrics",
    summary="deployment has not matched the expected replicas for 15m",
)
_POD_NOT_READY = AlertRule(
    "KubePodNotReady",
    "warning",
    15 * MIN,
    0.6,
    "kube-state-metrics",
    summary="pod not ready for 15m",
)
_CRASHLOOP = AlertRule(
    "KubePodCrashLooping",
    "warning",
    15 * MIN,
    0.7,
    "kube-state-metrics",
    summary="pod is restarting repeatedly",
)

EFFECT_ALERTS: dict[tuple[str, str], tuple[AlertRule, ...]] = {
    # --- GPU faults
    ("gpu_failed", "gpu"): (
        AlertRule(
            "GPUXidError",
            "critical",
            0.0,
            1.0,
            "dcgm-exporter",
            (("xid", "79|79|43|119"),),
            summary="XID error reported by DCGM",
        ),
        AlertRule(
            "GPUFallenOffBus",
            "critical",
            1 * MIN,
            0.4,
            "dcgm-exporter",
            summary="GPU no longer visible on the PCIe bus",
        ),
    ),
    ("gpu_ecc", "gpu"): (
        AlertRule(
            "GPUXidError",
            "critical",
            0.0,
            0.85,
            "dcgm-exporter",
            (("xid", "48|63|64|94|95"),),
            summary="ECC-related XID reported by DCGM",
        ),
        AlertRule(
            "GPUEccDoubleBitError",
            "critical",
            0.0,
            0.6,
            "dcgm-exporter",
            summary="DCGM_FI_DEV_ECC_DBE_VOL_TOTAL increased",
        ),
        AlertRule(
            "GPURowRemapFailure",
            "warning",
            5 * MIN,
            0.3,
            "dcgm-exporter",
            summary="row remapping failed; GPU needs reset",
        ),
    ),
    ("gpu_nvlink_err", "gpu"): (
        AlertRule(
            "GPUXidError",
            "warning",
            0.0,
            0.8,
            "dcgm-exporter",
            (("xid", "74"),),
            summary="NVLink XID 74",
        ),
        AlertRule(
            "GPUNVLinkBandwidthLow",
            "warning",
            10 * MIN,
            0.45,
            "dcgm-exporter",
            summary="DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL dropped",
        ),
    ),
    ("link_degraded", "link"): (
        AlertRule(
            "NVLinkDown",
            "warning",
            2 * MIN,
            0.35,
            "nvlink-exporter",
            summary="NVLink state inactive (nvidia-smi nvlink -s)",
        ),
    ),
    ("link_lost", "link"): (
        AlertRule(
            "NVLinkDown",
            "warning",
            2 * MIN,
            0.15,
            "nvlink-exporter",
            summary="NVLink state inactive",
        ),
    ),
    ("gpu_thermal", "gpu"): (
        AlertRule(
            "GPUThermalThrottling",
            "warning",
            5 * MIN,
            0.8,
            "dcgm-exporter",
            summary="clocks throttled by temperature for 5m",
        ),
        AlertRule(
            "GPUHighTemperature",
            "warning",
            10 * MIN,
            0.55,
            "dcgm-exporter",
            summary="DCGM_FI_DEV_GPU_TEMP above 85 C for 10m",
        ),
        AlertRule(
            "GPUXidError",
            "critical",
            0.0,
            0.08,
            "dcgm-exporter",
            (("xid", "79|43"),),
            summary="an overheated GPU stops or falls off the bus",
        ),
    ),
    ("host_thermal", "host"): (
        AlertRule(
            "NodeHardwareFanFailure",
            "critical",
            2 * MIN,
            0.6,
            "ipmi-exporter",
            summary="fan speed below threshold (IPMI)",
        ),
        AlertRule(
            "NodeHighInletTemperature",
            "warning",
            5 * MIN,
            0.5,
            "ipmi-exporter",
            summary="inlet temperature above 35 C",
        ),
    ),
    ("gpu_fb_high", "gpu"): (
        AlertRule(
            "GPUFramebufferHigh",
            "warning",
            5 * MIN,
            0.9,
            "dcgm-exporter",
            summary="FB_USED / (FB_USED + FB_FREE) above 95 % for 5m",
        ),
    ),
    ("gpu_unreachable", "gpu"): (
        AlertRule(
            "GPUMetricsAbsent",
            "warning",
            10 * MIN,
            0.5,
            "dcgm-exporter",
            summary="absent(DCGM_FI_DEV_GPU_UTIL) for 10m",
        ),
        # a host that loses power or its PCIe root complex takes its GPUs off the bus
        AlertRule(
            "GPUXidError",
            "critical",
            0.0,
            0.3,
            "dcgm-exporter",
            (("xid", "79"),),
            summary="XID 79 while the host fails",
        ),
        AlertRule(
            "GPUFallenOffBus",
            "critical",
            1 * MIN,
            0.2,
            "dcgm-exporter",
            summary="GPU no longer visible on the PCIe bus",
        ),
        AlertRule(
            "TargetDown", "warning", 10 * MIN, 0.3, "dcgm-exporter", summary="dcgm-exporter down"
        ),
    ),
    # a peer of a failed GPU: its collective kernels hang (XID 43 / 45 follow other errors)
    ("gpu_peer_hang", "gpu"): (
        AlertRule(
            "GPUXidError",
            "critical",
            0.0,
            0.45,
            "dcgm-exporter",
            (("xid", "43|43|45"),),
            summary="XID 43/45 after a peer failed mid-collective",
        ),
        AlertRule(
            "GPUXidError",
            "warning",
            0.0,
            0.5,
            "dcgm-exporter",
            (("xid", "74"),),
            summary="NVLink XID 74",
        ),
    ),
    # a ToR port goes down because the host behind it died
    ("tor_port_down", "network"): (
        AlertRule(
            "SwitchPortsDown",
            "critical",
            2 * MIN,
            0.45,
            "snmp-exporter",
            summary="ToR switch ports down / unreachable",
        ),
    ),
    # a training pod whose collective peers vanished: NCCL watchdog timeout, job restarts
    ("pod_nccl_timeout", "pod"): (
        AlertRule(
            "TrainingJobNCCLError",
            "critical",
            1 * MIN,
            0.75,
            "app",
            roles=("batch-trainer",),
            summary="NCCL watchdog timeout in training job",
        ),
        AlertRule(
            "KubePodCrashLooping",
            "warning",
            15 * MIN,
            0.3,
            "kube-state-metrics",
            summary="pod is restarting repeatedly",
        ),
    ),
    ("svc_collective_stall", "service"): (
        AlertRule(
            "TrainingStepTimeHigh",
            "warning",
            5 * MIN,
            0.5,
            "app",
            roles=("batch-trainer",),
            summary="step time 30 % above baseline",
        ),
    ),
    # weights come from the registry mirror: a mirror outage fails weight loads and stalls rollouts
    ("svc_weights_unavailable", "service"): (
        AlertRule(
            "ModelWeightLoadFailures",
            "critical",
            2 * MIN,
            0.55,
            "app",
            summary="weight-load failure rate above 7 %",
        ),
        AlertRule(
            "KubeDeploymentRolloutStuck",
            "warning",
            15 * MIN,
            0.4,
            "kube-state-metrics",
            summary="rollout not progressing",
        ),
        _REPLICAS,
    ),
    # a backed-up router / model server fills the KV-cache tier behind it
    ("svc_kv_pressure", "service"): (
        AlertRule(
            "KVCacheUtilizationHigh",
            "warning",
            5 * MIN,
            0.55,
            "app",
            summary="KV cache usage above 95 % for 5m",
        ),
        AlertRule(
            "KVCacheEvictionRateHigh",
            "warning",
            5 * MIN,
            0.3,
            "app",
            summary="KV cache evictions above baseline",
        ),
    ),
    # --- hosts and network
    ("host_down", "host"): (
        AlertRule(
            "KubeNodeNotReady",
            "warning",
            15 * MIN,
            0.9,
            "kube-state-metrics",
            summary="node has been unready for more than 15 minutes",
        ),
        AlertRule(
            "KubeNodeUnreachable",
            "warning",
            15 * MIN,
            0.4,
            "kube-state-metrics",
            summary="node is unreachable",
        ),
        AlertRule(
            "TargetDown",
            "warning",
            10 * MIN,
            0.5,
            "node-exporter",
            summary="node-exporter target down",
        ),
    ),
    ("host_unreachable", "host"): (
        AlertRule(
            "KubeNodeNotReady",
            "warning",
            15 * MIN,
            0.6,
            "kube-state-metrics",
            summary="node has been unready for more than 15 minutes (kubelet heartbeats lost)",
        ),
        AlertRule(
            "KubeNodeUnreachable",
            "warning",
            15 * MIN,
            0.55,
            "kube-state-metrics",
            summary="node is unreachable",
        ),
        AlertRule(
            "TargetDown",
            "warning",
            10 * MIN,
            0.5,
            "node-exporter",
            summary="node-exporter target down",
        ),
        AlertRule(
            "NodeNetworkReceiveErrs",
            "warning",
            2 * MIN,
            0.35,
            "node-exporter",
            summary="network interface reports receive errors",
        ),
    ),
    ("tor_down", "network"): (
        AlertRule(
            "SwitchPortsDown",
            "critical",
            2 * MIN,
            0.5,
            "snmp-exporter",
            summary="ToR switch ports down / unreachable",
        ),
    ),
    ("wan_partition", "network"): (
        AlertRule(
            "CrossClusterLatencyHigh",
            "warning",
            3 * MIN,
            0.6,
            "blackbox",
            summary="cross-cluster RT > 280 ms with jitter > 40 % for 3 windows",
        ),
        AlertRule(
            "CrossClusterProbeFailed",
            "critical",
            2 * MIN,
            0.5,
            "blackbox",
            summary="probe_success == 0 for 2m",
        ),
    ),
    # --- pods
    ("pod_gpu_error", "pod"): (
        AlertRule(
            "ModelServerEngineDead",
            "critical",
            1 * MIN,
            0.55,
            "app",
            roles=("model-server", "embedder", "reranker", "eval-runner"),
            summary="inference engine died with a CUDA error",
        ),
        AlertRule(
            "TrainingJobNCCLError",
            "critical",
            1 * MIN,
            0.7,
            "app",
            roles=("batch-trainer",),
            summary="NCCL/CUDA error in training job",
        ),
        _CRASHLOOP,
    ),
    ("pod_slow", "pod"): (
        AlertRule(
            "TrainingStepTimeHigh",
            "warning",
            5 * MIN,
            0.6,
            "app",
            roles=("batch-trainer",),
            summary="step time 30 % above baseline",
        ),
        AlertRule(
            "ModelServerThroughputLow",
            "warning",
            5 * MIN,
            0.45,
            "app",
            roles=("model-server", "embedder", "reranker", "eval-runner"),
            summary="tokens/s per GPU 30 % below baseline",
        ),
    ),
    ("pod_vram_leak", "pod"): (
        AlertRule(
            "ModelServerCUDAOOM",
            "warning",
            2 * MIN,
            0.7,
            "app",
            summary="CUDA out-of-memory errors in the server log",
        ),
        AlertRule(
            "KubePodCrashLooping",
            "warning",
            15 * MIN,
            0.3,
            "kube-state-metrics",
            summary="pod is restarting repeatedly",
        ),
    ),
    ("pod_evicted", "pod"): (_POD_NOT_READY,),
    ("pod_crash", "pod"): (
        AlertRule(
            "KubePodCrashLooping",
            "warning",
            15 * MIN,
            0.95,
            "kube-state-metrics",
            summary="pod is restarting repeatedly",
        ),
        AlertRule(
            "KubeContainerRestartsHigh",
            "warning",
            5 * MIN,
            0.4,
            "kube-state-metrics",
            summary="container restarted > 3 times in 10m",
        ),
    ),
    ("pod_weight_load_fail", "pod"): (
        AlertRule(
            "ModelWeightLoadError",
            "critical",
            1 * MIN,
            0.5,
            "app",
            summary="model weights failed to load",
        ),
        AlertRule(
            "KubePodCrashLooping",
            "warning",
            15 * MIN,
            0.5,
            "kube-state-metrics",
            summary="pod is restarting repeatedly",
        ),
    ),
    ("pod_image_pull", "pod"): (
        AlertRule(
            "KubePodImagePullBackOff",
            "warning",
            5 * MIN,
            0.8,
            "kube-state-metrics",
            (("reason", "ImagePullBackOff"),),
            summary="container waiting in ImagePullBackOff",
        ),
    ),
    ("pod_overloaded", "pod"): (
        AlertRule(
            "PodReadinessProbeFailing",
            "warning",
            3 * MIN,
            0.55,
            "kubelet",
            summary="readiness probe failing under load",
        ),
        AlertRule(
            "CPUThrottlingHigh",
            "info",
            15 * MIN,
            0.3,
            "kube-state-metrics",
            summary="CPU throttling above 25 %",
        ),
        AlertRule(
            "ModelServerCUDAOOM",
            "warning",
            2 * MIN,
            0.2,
            "app",
            roles=("model-server", "embedder", "reranker"),
            summary="CUDA out-of-memory errors under a load surge",
        ),
    ),
    # --- services
    ("svc_errors", "service"): (_SVC_ERR, _SVC_LAT, _GW_5XX),
    ("svc_latency", "service"): (
        _INF_LAT,
        _SVC_LAT,
        _TOK_UNSTABLE,
        AlertRule(
            "RequestQueueBacklog",
            "warning",
            3 * MIN,
            0.25,
            "app",
            roles=("router", "model-server"),
            summary="pending requests > 5,000 or queue latency > 2 s",
        ),
    ),
    ("svc_capacity", "service"): (_REPLICAS, _INF_LAT, _SVC_LAT),
    ("svc_rollout_bad", "service"): (
        AlertRule(
            "ModelWeightLoadFailures",
            "critical",
            2 * MIN,
            0.75,
            "app",
            summary="weight-load failure rate above 7 %",
        ),
        AlertRule(
            "KubeDeploymentRolloutStuck",
            "warning",
            15 * MIN,
            0.5,
            "kube-state-metrics",
            summary="rollout not progressing",
        ),
    ),
    ("svc_kv_saturated", "service"): (
        AlertRule(
            "KVCacheUtilizationHigh",
            "warning",
            5 * MIN,
            0.7,
            "app",
            summary="KV cache usage above 95 % for 5m",
        ),
        AlertRule(
            "KVCacheEvictionRateHigh",
            "warning",
            5 * MIN,
            0.4,
            "app",
            summary="KV cache evictions above baseline",
        ),
    ),
    ("svc_backlog", "service"): (
        AlertRule(
            "RequestQueueBacklog",
            "warning",
            3 * MIN,
            0.7,
            "app",
            summary="pending requests > 5,000 or queue latency > 2 s",
        ),
        AlertRule(
            "KubeHpaMaxedOut",
            "warning",
            15 * MIN,
            0.5,
            "kube-state-metrics",
            summary="HPA running at max replicas",
        ),
    ),
    ("svc_dns_errors", "service"): (
        AlertRule(
            "ServiceDNSLookupFailures",
            "warning",
            5 * MIN,
            0.8,
            "app",
            summary="upstream name resolution failures",
        ),
        _SVC_ERR,
    ),
    ("svc_config_errors", "service"): (
        AlertRule(
            "ServiceConfigReloadFailed",
            "warning",
            2 * MIN,
            0.45,
            "app",
            summary="config reload rejected",
        ),
        _SVC_ERR,
    ),
    ("svc_remote_errors", "service"): (
        AlertRule(
            "CrossClusterRequestErrors",
            "warning",
            3 * MIN,
            0.6,
            "app",
            summary="remote-region calls failing",
        ),
        _SVC_ERR,
    ),
    # --- infra
    ("dns_down", "dns"): (
        AlertRule(
            "CoreDNSDown",
            "critical",
            15 * MIN,
            0.4,
            "coredns",
            summary="CoreDNS has disappeared from Prometheus target discovery",
        ),
        AlertRule(
            "CoreDNSErrorsHigh",
            "warning",
            5 * MIN,
            0.55,
            "coredns",
            summary="CoreDNS SERVFAIL ratio above 3 %",
        ),
    ),
    ("dns_upstream", "dns"): (
        AlertRule(
            "CoreDNSForwardErrorsHigh",
            "warning",
            5 * MIN,
            0.5,
            "coredns",
            summary="CoreDNS forward requests failing",
        ),
        AlertRule(
            "CoreDNSErrorsHigh",
            "warning",
            5 * MIN,
            0.5,
            "coredns",
            summary="CoreDNS SERVFAIL ratio above 3 % (upstream failing)",
        ),
    ),
    ("registry_down", "registry"): (
        AlertRule(
            "RegistryMirrorDown",
            "critical",
            5 * MIN,
            0.6,
            "blackbox",
            summary="image mirror probe failing",
        ),
    ),
    ("registry_degraded", "registry"): (
        AlertRule(
            "RegistryMirrorUpstreamErrors",
            "warning",
            5 * MIN,
            0.5,
            "registry",
            summary="mirror cannot fetch from upstream",
        ),
        AlertRule(
            "RegistryMirrorDown",
            "critical",
            5 * MIN,
            0.3,
            "blackbox",
            summary="image pull probe through the mirror failing",
        ),
    ),
    ("config_bad", "config"): (
        AlertRule(
            "ConfigPushValidationFailed",
            "warning",
            0.0,
            0.3,
            "config-store",
            summary="pushed config failed post-validation",
        ),
    ),
    ("config_agent_bad", "config"): (
        AlertRule(
            "ConfigAgentSyncErrors",
            "warning",
            5 * MIN,
            0.4,
            "config-agent",
            summary="config agent cannot apply latest config",
        ),
        AlertRule(
            "ConfigPushValidationFailed",
            "warning",
            0.0,
            0.3,
            "config-agent",
            summary="pulled config failed local validation",
        ),
    ),
}

# ----------------------------------------------------------------------------------------------------
# Propagation rules.
# ----------------------------------------------------------------------------------------------------
_GPU_ROLES = ("model-server", "embedder", "reranker", "eval-runner", "batch-trainer")
HOPS: tuple[Hop, ...] = (
    # GPU failed: its pods die, its NVLinks drop (peers log XID 74)
    Hop("gpu_failed", "runs_on", "up", ("pod",), 0.95, (20, 0.5), "pod_gpu_error"),
    Hop("gpu_failed", "attached_to", "up", ("link",), 0.6, (5, 0.5), "link_lost"),
    Hop("link_lost", "attached_to", "down", ("gpu",), 0.5, (5, 0.5), "gpu_peer_hang"),
    Hop("gpu_peer_hang", "runs_on", "up", ("pod",), 0.6, (30, 0.5), "pod_nccl_timeout"),
    Hop("gpu_ecc", "runs_on", "up", ("pod",), 0.85, (30, 0.6), "pod_gpu_error"),
    Hop(
        "pod_gpu_error",
        "member_of",
        "down",
        ("service",),
        0.85,
        (60, 0.5),
        "svc_collective_stall",
        ("batch-trainer",),
    ),
    Hop("pod_gpu_error", "member_of", "down", ("service",), 0.85, (60, 0.5), "svc_capacity"),
    # a training job spans hosts: when one rank dies or loses its network, the others time out
    Hop("svc_collective_stall", "member_of", "up", ("pod",), 0.8, (60, 0.5), "pod_nccl_timeout"),
    Hop(
        "pod_nccl_timeout",
        "member_of",
        "down",
        ("service",),
        0.8,
        (60, 0.5),
        "svc_collective_stall",
        ("batch-trainer",),
    ),
    # NVLink degradation: both GPUs see XID 74; collective traffic slows the pods on them
    Hop("link_degraded", "attached_to", "down", ("gpu",), 0.95, (5, 0.5), "gpu_nvlink_err"),
    Hop("gpu_nvlink_err", "runs_on", "up", ("pod",), 0.6, (60, 0.5), "pod_slow"),
    Hop("pod_slow", "member_of", "down", ("service",), 0.6, (90, 0.5), "svc_latency"),
    # thermal: a host cooling failure throttles its GPUs; throttled GPUs slow their pods
    Hop("host_thermal", "attached_to", "up", ("gpu",), 0.7, (120, 0.5), "gpu_thermal"),
    Hop("gpu_thermal", "runs_on", "up", ("pod",), 0.75, (120, 0.5), "pod_slow"),
    # VRAM leak: the pod's GPUs fill up, the service slows
    Hop("pod_vram_leak", "runs_on", "down", ("gpu",), 0.95, (60, 0.5), "gpu_fb_high"),
    Hop("pod_vram_leak", "member_of", "down", ("service",), 0.7, (120, 0.5), "svc_latency"),
    # host down: pods evicted/unready, GPU metrics vanish
    Hop(
        "host_down",
        "runs_on",
        "up",
        ("pod",),
        0.9,
        (40, 0.5),
        "pod_nccl_timeout",
        ("batch-trainer",),
    ),
    Hop("host_down", "runs_on", "up", ("pod",), 0.9, (40, 0.5), "pod_evicted"),
    Hop("host_down", "attached_to", "up", ("gpu",), 0.6, (30, 0.5), "gpu_unreachable"),
    Hop("host_down", "depends_on", "down", ("network",), 0.4, (20, 0.5), "tor_port_down"),
    Hop(
        "host_unreachable",
        "runs_on",
        "up",
        ("pod",),
        0.85,
        (40, 0.5),
        "pod_nccl_timeout",
        ("batch-trainer",),
    ),
    Hop("host_unreachable", "runs_on", "up", ("pod",), 0.7, (40, 0.5), "pod_evicted"),
    Hop("pod_evicted", "member_of", "down", ("service",), 0.7, (60, 0.5), "svc_capacity"),
    # ToR switch: every host of the rack loses network
    Hop("tor_down", "depends_on", "up", ("host",), 0.85, (10, 0.5), "host_unreachable"),
    # pod crash-loop
    Hop("pod_crash", "member_of", "down", ("service",), 0.8, (60, 0.5), "svc_capacity"),
    # bad model / LoRA rollout: the service's pods fail to load weights, callers see errors
    Hop("svc_rollout_bad", "member_of", "up", ("pod",), 0.75, (30, 0.5), "pod_weight_load_fail"),
    Hop("svc_rollout_bad", "calls", "up", ("service",), 0.8, (60, 0.5), "svc_errors"),
    # image mirror outage: pods that (re)start cannot pull; a global outage degrades every cluster mirror
    Hop("registry_down", "depends_on", "up", ("registry",), 0.9, (30, 0.5), "registry_degraded"),
    Hop("registry_down", "depends_on", "up", ("pod",), 0.3, (120, 0.7), "pod_image_pull"),
    Hop("registry_degraded", "depends_on", "up", ("pod",), 0.15, (180, 0.7), "pod_image_pull"),
    Hop(
        "pod_image_pull",
        "member_of",
        "down",
        ("service",),
        0.5,
        (120, 0.5),
        "svc_weights_unavailable",
    ),
    Hop(
        "registry_down", "depends_on", "up", ("service",), 0.5, (90, 0.5), "svc_weights_unavailable"
    ),
    Hop("svc_weights_unavailable", "calls", "up", ("service",), 0.45, (60, 0.6), "svc_latency"),
    # config push error: agents apply the bad config, services reject it
    Hop("config_bad", "depends_on", "up", ("config",), 0.9, (30, 0.5), "config_agent_bad"),
    Hop("config_bad", "depends_on", "up", ("service",), 0.35, (60, 0.6), "svc_config_errors"),
    Hop("config_agent_bad", "depends_on", "up", ("service",), 0.3, (60, 0.6), "svc_config_errors"),
    # DNS failure: a global failure breaks each cluster's upstream; services fail lookups
    Hop("dns_down", "depends_on", "up", ("dns",), 0.85, (30, 0.5), "dns_upstream"),
    Hop("dns_down", "depends_on", "up", ("service",), 0.9, (45, 0.5), "svc_dns_errors"),
    Hop("dns_upstream", "depends_on", "up", ("service",), 0.7, (60, 0.5), "svc_dns_errors"),
    # cross-cluster partition: services calling across the link fail
    Hop("wan_partition", "depends_on", "up", ("service",), 0.95, (30, 0.5), "svc_remote_errors"),
    # KV-cache saturation: model servers slow down
    Hop("svc_kv_saturated", "calls", "up", ("service",), 0.9, (60, 0.5), "svc_latency"),
    Hop("svc_kv_saturated", "member_of", "up", ("pod",), 0.3, (60, 0.5), "pod_overloaded"),
    # request-queue backlog: pods fail readiness, callers slow down
    Hop("svc_backlog", "member_of", "up", ("pod",), 0.5, (60, 0.5), "pod_overloaded"),
    Hop("svc_backlog", "calls", "up", ("service",), 0.8, (60, 0.5), "svc_latency"),
    Hop(
        "svc_backlog",
        "calls",
        "down",
        ("service",),
        0.6,
        (90, 0.5),
        "svc_kv_pressure",
        ("kv-cache",),
    ),
    # generic service-level spread to callers (incl. across regions)
    Hop("svc_errors", "calls", "up", ("service",), 0.6, (45, 0.6), "svc_errors"),
    Hop("svc_latency", "calls", "up", ("service",), 0.55, (45, 0.6), "svc_latency"),
    Hop("svc_capacity", "calls", "up", ("service",), 0.45, (60, 0.6), "svc_latency"),
    Hop("svc_dns_errors", "calls", "up", ("service",), 0.45, (45, 0.6), "svc_errors"),
    Hop("svc_config_errors", "calls", "up", ("service",), 0.45, (45, 0.6), "svc_errors"),
    Hop("svc_remote_errors", "calls", "up", ("service",), 0.55, (45, 0.6), "svc_errors"),
)

# ----------------------------------------------------------------------------------------------------
# The catalog.
# ----------------------------------------------------------------------------------------------------
FAULT_TYPES: dict[str, FaultType] = {
    f.name: f
    for f in (
        FaultType(
            "gpu_xid_error",
            "GPU fails (XID 79 fallen off the bus, 43 stopped processing, 119 GSP error)",
            (("gpu", (), "gpu_failed"),),
            (1.0,),
            0.22,
            False,
            "Llama 3 run: faulty GPU (incl. NVLink) 30.1 % of 419 interruptions; XIDs 79/43/119",
        ),
        FaultType(
            "gpu_ecc_error",
            "HBM/SRAM ECC errors (XID 48, 63/64 row remapping, 94/95 contained/uncontained)",
            (("gpu", (), "gpu_ecc"),),
            (1.0,),
            0.17,
            False,
            "Llama 3 run: HBM3 17.2 % + SRAM 4.5 %; XIDs 48/63/64/94/95",
        ),
        FaultType(
            "nvlink_degradation",
            "one NVLink (or PCIe switch) degrades: XID 74 on the GPUs it joins, collectives slow",
            (("link", (), "link_degraded"),),
            (1.0,),
            0.08,
            True,
            "NVLink failures are part of 'faulty GPU' in the Llama 3 mix; XID 74; NVLink counters are off by default in DCGM",
        ),
        FaultType(
            "thermal_throttling",
            "GPU or host cooling fault: clocks throttle, throughput drops",
            (("gpu", (), "gpu_thermal"), ("host", ("gpu-host",), "host_thermal")),
            (0.5, 0.5),
            0.05,
            False,
            "DCGM_FI_DEV_GPU_TEMP / clock-throttle reasons; IPMI fan sensors",
        ),
        FaultType(
            "gpu_memory_leak",
            "a serving process leaks VRAM: framebuffer fills, CUDA OOMs, latency",
            (("pod", ("model-server", "embedder", "reranker"), "pod_vram_leak"),),
            (1.0,),
            0.04,
            True,
            "DCGM_FI_DEV_FB_USED / FB_FREE",
        ),
        FaultType(
            "host_not_ready",
            "a host goes NotReady (kernel, kubelet, CPU, maintenance)",
            (("host", (), "host_down"),),
            (1.0,),
            0.07,
            True,
            "Llama 3 run: host maintenance, CPU and software share of the ~41 % non-GPU interruptions; KubeNodeNotReady for 15m",
        ),
        FaultType(
            "pod_crashloop",
            "a pod crash-loops (software bug, bad input)",
            (("pod", (), "pod_crash"),),
            (1.0,),
            0.06,
            False,
            "KubePodCrashLooping (kube-prometheus, for 15m)",
        ),
        FaultType(
            "bad_model_rollout",
            "a bad model or LoRA version rolls out: weight loads fail",
            (("service", ("model-server", "embedder", "reranker"), "svc_rollout_bad"),),
            (1.0,),
            0.04,
            True,
            "reference threshold: weight-load failure rate > 7 %",
        ),
        FaultType(
            "image_mirror_outage",
            "a cluster image mirror or the global mirror is down: ImagePullBackOff",
            (("registry", ("image-mirror",), "registry_down"),),
            (1.0,),
            0.03,
            True,
            "KubeContainerWaiting / ImagePullBackOff",
        ),
        FaultType(
            "config_push_error",
            "a bad config push from the config store or a cluster config agent",
            (("config", (), "config_bad"),),
            (1.0,),
            0.03,
            True,
            "config pushes are a classic cause of multi-service outages",
        ),
        FaultType(
            "dns_failure",
            "cluster CoreDNS or global DNS fails",
            (("dns", (), "dns_down"),),
            (1.0,),
            0.03,
            True,
            "CoreDNS mixin alerts (CoreDNSDown for 15m, CoreDNSErrorsHigh)",
        ),
        FaultType(
            "cross_cluster_partition",
            "WAN latency spike or partition between two regions",
            (("network", ("wan",), "wan_partition"),),
            (1.0,),
            0.05,
            True,
            "reference threshold: cross-cluster RT > 280 ms, jitter > 40 % for 3 windows",
        ),
        FaultType(
            "network_switch_failure",
            "a top-of-rack switch or its cabling fails: the rack's hosts drop off",
            (("network", ("tor",), "tor_down"),),
            (1.0,),
            0.06,
            True,
            "Llama 3 run: network switch and cable 8.4 %",
        ),
        FaultType(
            "kv_cache_saturation",
            "the KV-cache tier saturates: evictions, model-server latency",
            (("service", ("kv-cache",), "svc_kv_saturated"),),
            (1.0,),
            0.03,
            True,
            "vLLM gpu_cache_usage_perc style saturation; reference: p99 latency > 1.8 s",
        ),
        FaultType(
            "request_queue_backlog",
            "a router or model server backs up: queue grows, callers time out",
            (("service", ("router", "model-server"), "svc_backlog"),),
            (1.0,),
            0.03,
            True,
            "reference threshold: pending > 5,000 or latency > 2 s",
        ),
    )
}
"""Fault types by name."""


def fault_prior() -> dict[str, float]:
    """The default fault-type distribution (normalised ``prior`` of :data:`FAULT_TYPES`)."""
    tot = sum(f.prior for f in FAULT_TYPES.values())
    return {k: f.prior / tot for k, f in FAULT_TYPES.items()}


def plausible_fault_types(kind: str, role: str | None = None) -> frozenset[str]:
    """Fault types of :data:`FAULT_TYPES` that can start at a node of ``kind`` (and ``role``).

    A type is plausible where one of its ``origins`` names the node's kind and, when the origin lists
    roles, the node's role is among them. A node without a known role (``role`` None or empty, as in
    graphs built from a live cluster) is held to its kind alone, since nothing says which role it has.
    The GAT's fault-type head is masked by this set, so a lone alert on an API server is never typed
    as an NVLink fault; a cause whose kind allows no type is typed ``unknown``.

    Args:
        kind: the node's kind (``gpu``, ``host``, ``service``, ...).
        role: the node's ``attrs["role"]`` where the graph carries one.
    """
    out = set()
    for name, ft in FAULT_TYPES.items():
        for o_kind, o_roles, _effect in ft.origins:
            if o_kind == kind and (not o_roles or not role or role in o_roles):
                out.add(name)
                break
    return frozenset(out)


def hops_by_effect() -> dict[str, tuple[Hop, ...]]:
    """:data:`HOPS` grouped by the effect they leave from."""
    out: dict[str, list[Hop]] = {}
    for h in HOPS:
        out.setdefault(h.effect, []).append(h)
    return {k: tuple(v) for k, v in out.items()}


NOISE_RULES: dict[str, tuple[AlertRule, ...]] = {
    "gpu": (
        AlertRule(
            "GPUUtilizationLow",
            "info",
            15 * MIN,
            1.0,
            "dcgm-exporter",
            summary="GPU utilisation below 35 % for 15m",
        ),
        AlertRule(
            "GPUXidError",
            "warning",
            0.0,
            1.0,
            "dcgm-exporter",
            (("xid", "13|31"),),
            summary="application-level XID",
        ),
        AlertRule(
            "GPUHighTemperature",
            "warning",
            10 * MIN,
            1.0,
            "dcgm-exporter",
            summary="DCGM_FI_DEV_GPU_TEMP above 85 C for 10m",
        ),
        AlertRule(
            "GPUFramebufferHigh",
            "warning",
            5 * MIN,
            1.0,
            "dcgm-exporter",
            summary="framebuffer above 95 %",
        ),
        # routine HBM events on healthy-enough GPUs: row remaps and corrected errors awaiting a drain
        AlertRule(
            "GPUXidError",
            "critical",
            0.0,
            1.0,
            "dcgm-exporter",
            (("xid", "63|63|64|94|48"),),
            summary="ECC-related XID (GPU still in service, drain pending)",
        ),
        AlertRule(
            "GPUThermalThrottling",
            "warning",
            5 * MIN,
            1.0,
            "dcgm-exporter",
            summary="clocks throttled by temperature (hot aisle)",
        ),
    ),
    "host": (
        AlertRule(
            "NodeFilesystemSpaceFillingUp",
            "warning",
            1 * 3600,
            1.0,
            "node-exporter",
            summary="filesystem predicted to fill within 24h",
        ),
        AlertRule(
            "NodeClockNotSynchronising",
            "warning",
            10 * MIN,
            1.0,
            "node-exporter",
            summary="clock not synchronising",
        ),
        AlertRule(
            "NodeMemoryHighUtilization",
            "warning",
            15 * MIN,
            1.0,
            "node-exporter",
            summary="memory above 90 %",
        ),
        AlertRule(
            "NodeNetworkReceiveErrs",
            "warning",
            2 * MIN,
            1.0,
            "node-exporter",
            summary="receive errors",
        ),
        AlertRule(
            "NodeHighInletTemperature",
            "warning",
            5 * MIN,
            1.0,
            "ipmi-exporter",
            summary="inlet temperature above 35 C",
        ),
        AlertRule(
            "TargetDown",
            "warning",
            10 * MIN,
            1.0,
            "node-exporter",
            summary="node-exporter target down (exporter restart)",
        ),
        AlertRule(
            "KubeNodeNotReady",
            "warning",
            15 * MIN,
            1.0,
            "kube-state-metrics",
            summary="node unready (kubelet restart, cordon and drain)",
        ),
    ),
    "pod": (
        AlertRule(
            "CPUThrottlingHigh",
            "info",
            15 * MIN,
            1.0,
            "kube-state-metrics",
            summary="CPU throttling above 25 %",
        ),
        AlertRule(
            "KubePodNotReady",
            "warning",
            15 * MIN,
            1.0,
            "kube-state-metrics",
            summary="pod not ready for 15m",
        ),
        AlertRule(
            "KubePodCrashLooping",
            "warning",
            15 * MIN,
            1.0,
            "kube-state-metrics",
            summary="pod is restarting repeatedly",
        ),
        AlertRule(
            "KubeContainerRestartsHigh",
            "warning",
            5 * MIN,
            1.0,
            "kube-state-metrics",
            summary="container restarted > 3 times in 10m",
        ),
        AlertRule(
            "ModelServerCUDAOOM",
            "warning",
            2 * MIN,
            1.0,
            "app",
            roles=("model-server", "embedder", "reranker"),
            summary="CUDA OOM on an oversized request",
        ),
    ),
    "service": (
        AlertRule(
            "KubeHpaMaxedOut",
            "warning",
            15 * MIN,
            1.0,
            "kube-state-metrics",
            summary="HPA at max replicas",
        ),
        AlertRule(
            "ServiceLatencyHigh",
            "warning",
            5 * MIN,
            1.0,
            "app",
            summary="p99 latency above SLO for 5m",
        ),
        AlertRule(
            "KubeDeploymentReplicasMismatch",
            "warning",
            15 * MIN,
            1.0,
            "kube-state-metrics",
            summary="replica mismatch",
        ),
        AlertRule(
            "KVCacheUtilizationHigh",
            "warning",
            5 * MIN,
            1.0,
            "app",
            roles=("kv-cache",),
            summary="KV cache usage above 95 % at peak load",
        ),
        AlertRule(
            "RequestQueueBacklog",
            "warning",
            3 * MIN,
            1.0,
            "app",
            roles=("router", "model-server"),
            summary="queue backlog at peak load",
        ),
        AlertRule(
            "ModelWeightLoadFailures",
            "critical",
            2 * MIN,
            1.0,
            "app",
            roles=("model-server", "embedder", "reranker"),
            summary="weight loads retried during a routine rollout",
        ),
    ),
    "infra": (
        AlertRule(
            "KubeAPIErrorBudgetBurn",
            "warning",
            1 * 3600,
            1.0,
            "apiserver",
            summary="API server error budget burning",
        ),
        AlertRule(
            "KubeClientCertificateExpiration",
            "warning",
            5 * MIN,
            1.0,
            "apiserver",
            summary="client certificate expires soon",
        ),
    ),
    "dns": (
        AlertRule(
            "CoreDNSLatencyHigh",
            "warning",
            10 * MIN,
            1.0,
            "coredns",
            summary="CoreDNS p99 latency above 4 s",
        ),
        AlertRule(
            "CoreDNSErrorsHigh",
            "warning",
            5 * MIN,
            1.0,
            "coredns",
            summary="SERVFAIL burst for a broken external zone",
        ),
        AlertRule(
            "CoreDNSDown",
            "critical",
            15 * MIN,
            1.0,
            "coredns",
            summary="CoreDNS target missing during a rolling restart",
        ),
    ),
    "network": (
        AlertRule(
            "CrossClusterLatencyHigh",
            "warning",
            3 * MIN,
            1.0,
            "blackbox",
            roles=("wan",),
            summary="WAN jitter above 40 %",
        ),
        AlertRule(
            "SwitchPortsDown",
            "critical",
            2 * MIN,
            1.0,
            "snmp-exporter",
            roles=("tor",),
            summary="one flapping switch port",
        ),
    ),
    "link": (
        AlertRule(
            "NVLinkDown",
            "warning",
            2 * MIN,
            1.0,
            "nvlink-exporter",
            summary="NVLink state flaps (replay errors)",
        ),
    ),
    "cluster": (
        AlertRule(
            "Watchdog",
            "none",
            0.0,
            1.0,
            "prometheus",
            summary="always-firing alert that proves the pipeline works",
        ),
    ),
}
"""Background alert rules by node kind (fault-unrelated)."""


def alertnames() -> list[str]:
    """Every alert name the simulator can emit (faults, storms and noise), sorted."""
    names = {r.alertname for rules in EFFECT_ALERTS.values() for r in rules}
    names |= {r.alertname for rules in NOISE_RULES.values() for r in rules}
    return sorted(names)
