"""The feature matrix's vocabularies and column layout (:data:`FEATURE_NAMES`, :data:`FEATURE_VERSION`).

Vocabulary changes change :data:`FEATURE_VERSION`; a model stores the version it was trained with and
refuses features of another one. The blocks are described in :mod:`fleetmind.rca.features`.
"""

from __future__ import annotations

from fleetmind.data.graph import (
    EDGE_KINDS,
    NODE_KINDS,
)

FEATURE_VERSION = 2
"""Bumped whenever the feature layout or a vocabulary changes."""

SEVERITIES: tuple[str, ...] = ("critical", "warning", "info")
"""Known severities; anything else (``page``, ``none``, missing) counts as ``other``."""

ALERTNAME_VOCAB: tuple[str, ...] = (
    # GPU / DCGM
    "GPUEccDoubleBitError",
    "GPUFallenOffBus",
    "GPUFramebufferHigh",
    "GPUHighTemperature",
    "GPUMetricsAbsent",
    "GPUNVLinkBandwidthLow",
    "GPURowRemapFailure",
    "GPUThermalThrottling",
    "GPUUtilizationLow",
    "GPUXidError",
    "NVLinkDown",
    # node (node-exporter)
    "CPUThrottlingHigh",
    "NodeClockNotSynchronising",
    "NodeFilesystemSpaceFillingUp",
    "NodeHardwareFanFailure",
    "NodeHighInletTemperature",
    "NodeMemoryHighUtilization",
    "NodeNetworkReceiveErrs",
    "TargetDown",
    # Kubernetes
    "ImagePullBackOff",
    "KubeAPIErrorBudgetBurn",
    "KubeClientCertificateExpiration",
    "KubeContainerRestartsHigh",
    "KubeDeploymentReplicasMismatch",
    "KubeDeploymentRolloutStuck",
    "KubeHpaMaxedOut",
    "KubeNodeNotReady",
    "KubeNodeUnreachable",
    "KubePodCrashLooping",
    "KubePodImagePullBackOff",
    "KubePodNotReady",
    "PodReadinessProbeFailing",
    # services and model servers
    "GatewayHTTP5xxHigh",
    "InferenceLatencyHigh",
    "KVCacheEvictionRateHigh",
    "KVCacheUtilizationHigh",
    "ModelServerCUDAOOM",
    "ModelServerEngineDead",
    "ModelServerThroughputLow",
    "ModelWeightLoadError",
    "ModelWeightLoadFailures",
    "RequestQueueBacklog",
    "ServiceConfigReloadFailed",
    "ServiceDNSLookupFailures",
    "ServiceErrorRateHigh",
    "ServiceLatencyHigh",
    "TokenThroughputUnstable",
    "TrainingJobNCCLError",
    "TrainingStepTimeHigh",
    # shared infrastructure and WAN
    "ConfigAgentSyncErrors",
    "ConfigPushValidationFailed",
    "CoreDNSDown",
    "CoreDNSErrorsHigh",
    "CoreDNSForwardErrorsHigh",
    "CoreDNSLatencyHigh",
    "CrossClusterLatencyHigh",
    "CrossClusterProbeFailed",
    "CrossClusterRequestErrors",
    "RegistryMirrorDown",
    "RegistryMirrorUpstreamErrors",
    "SwitchPortsDown",
    # meta
    "Watchdog",
    # generic names (PetShop adapter and common Prometheus rules)
    "HighLatency",
    "HighErrorRate",
    "TrafficAnomaly",
    "HighCPU",
    "HighMemory",
)
"""Alert names with their own count column (the simulator's rule catalog, ``data/rca_gen``, plus generic
names); names in :data:`ALERTNAME_ALIASES` count in their vocabulary name's column, other unseen names go
to ``name:other``, and all still light up their :data:`KEYWORD_GROUPS`."""

KEYWORD_GROUPS: dict[str, tuple[str, ...]] = {
    "gpu": ("gpu", "xid", "dcgm", "cuda", "ecc"),
    "link": ("nvlink", "pcie", "link", "infiniband", "nccl"),
    "memory": ("memory", "oom", "mem"),
    "latency": ("latency", "slow", "timeout", "duration", "p99", "p95"),
    "error": ("error", "fail", "5xx", "availability", "unavailable", "exception"),
    "down": ("down", "unreachable", "notready", "lost", "absent", "offbus"),
    "restart": ("crash", "restart", "backoff", "killed", "evicted"),
    "disk": ("disk", "storage", "volume", "filesystem", "io"),
    "network": ("network", "packet", "dns", "wan", "connection"),
    "saturation": ("cpu", "load", "throttl", "saturat", "pressure", "queue", "util"),
    "thermal": ("temp", "thermal", "power"),
}
"""Keyword groups matched (case-insensitively, as substrings) against each alert name."""

ALERTNAME_ALIASES: dict[str, str] = {
    # deploy/fleetmind-rules.yml (users route on these names, so the rules keep them)
    "GpuXidError": "GPUXidError",
    "GpuLowUtilisation": "GPUUtilizationLow",
}
"""Alert names counted in the ``name:*`` column of another, vocabulary name: the names FleetMind's own
rules (``deploy/fleetmind-rules.yml``) give to an alert the vocabulary spells differently. Only the
name column follows the alias; :data:`KEYWORD_GROUPS` are still matched in the alert's own name.
Adding an alias changes no column, so it needs no new :data:`FEATURE_VERSION`."""

_NAME_INDEX = {n: i for i, n in enumerate(ALERTNAME_VOCAB)}
_NAME_INDEX.update({a: _NAME_INDEX[n] for a, n in ALERTNAME_ALIASES.items()})

_SEV_INDEX = {s: i for i, s in enumerate(SEVERITIES)}

_N_SEV = len(SEVERITIES) + 1

_N_NAME = len(ALERTNAME_VOCAB) + 1

_N_KW = len(KEYWORD_GROUPS)

_N_TIME = 9

_N_NBR = 4 * len(EDGE_KINDS)

_N_KIND = len(NODE_KINDS)

FEATURE_NAMES: tuple[str, ...] = (
    ("alert",)
    + tuple(f"sev:{s}" for s in (*SEVERITIES, "other"))
    + tuple(f"name:{n}" for n in (*ALERTNAME_VOCAB, "other"))
    + tuple(f"kw:{k}" for k in KEYWORD_GROUPS)
    + (
        "time:first_rel",
        "time:last_rel",
        "time:first_age_log_min",
        "time:last_age_log_min",
        "time:stale",
        "time:earliest",
        "time:first_rank",
        "time:duration_log_min",
        "time:firing_share",
    )
    + tuple(f"nbr:{d}:{k}:{w}" for k in EDGE_KINDS for d in ("out", "in") for w in ("share", "deg"))
    + tuple(f"kind:{k}" for k in NODE_KINDS)
    + ("deg:in", "deg:out")
)
"""Column names of the feature matrix, in order."""

NUM_FEATURES = len(FEATURE_NAMES)
"""F, the width of the feature matrix."""

_OFF_SEV = 1

_OFF_NAME = _OFF_SEV + _N_SEV

_OFF_KW = _OFF_NAME + _N_NAME

_OFF_TIME = _OFF_KW + _N_KW

_OFF_NBR = _OFF_TIME + _N_TIME

_OFF_KIND = _OFF_NBR + _N_NBR

_OFF_DEG = _OFF_KIND + _N_KIND

assert _OFF_DEG + 2 == NUM_FEATURES
