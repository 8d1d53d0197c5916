"""Alerts raised by an effect at a node: :data:`EFFECT_ALERTS`, keyed by ``(effect, node kind)``.

Alert names are the kube-prometheus / node-exporter / CoreDNS mixin names where one exists
(``KubeNodeNotReady``, ``KubePodCrashLooping``, ``KubeDeploymentReplicasMismatch``, ``CoreDNSDown``,
``TargetDown``, ...) with their ``for:`` durations; GPU alerts are DCGM-exporter based
(``GPUXidError`` with an ``xid`` label from ``DCGM_FI_DEV_XID_ERRORS``, ``GPUThermalThrottling`` from
``DCGM_FI_DEV_GPU_TEMP`` ...); application alerts use the thresholds of the reference (p99 inference
latency > 1.8 s, token-throughput std > 47 % of mean over 3 min, queue backlog > 5,000, weight-load
failure rate > 7 %, cross-cluster RT > 280 ms with jitter > 40 % over 3 windows). XIDs as NVIDIA
documents them: 79 fallen off the bus, 43 GPU stopped processing, 119/120 GSP errors, 48 double-bit
ECC, 63/64 row remapping, 94/95 contained/uncontained ECC, 74 NVLink error.
"""

from __future__ import annotations

from fleetmind.data.rca_gen.faults.rules import MIN, AlertRule

# Rules that several effects raise.
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
"""Alert rules by ``(effect, node kind)``; each rule fires with its own ``prob`` when a node of that
kind has the effect."""
