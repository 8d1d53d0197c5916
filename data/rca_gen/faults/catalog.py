"""The fault types: :data:`FAULT_TYPES` (where each fault starts), its prior and which types fit a node.

The **prior** over fault types follows the failure mix of Meta's Llama 3 pre-training run (419
unexpected interruptions on 16,384 H100s): faulty GPU incl. NVLink 30.1 %, HBM3 17.2 %, SRAM 4.5 %,
network switch/cable 8.4 %, GPU-related 58.7 % in all; the rest (software, host, config) is split over
the platform faults (``/work/shared/references/gpu-fleet-failures-and-alerting.md``).
"""

from __future__ import annotations

from fleetmind.data.rca_gen.faults.rules import FaultType

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
