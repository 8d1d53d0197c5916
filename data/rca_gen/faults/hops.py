"""Propagation rules: :data:`HOPS`, how an effect at one node spreads to its neighbours.

From a node with effect E, each neighbour reached over an edge of kind K in a direction D (``down`` =
along the edge, towards the dependency; ``up`` = against it, towards the dependents) with a node
kind/role filter gets the hop's new effect with the hop's probability, after a log-normal delay
(median seconds, sigma). Most faults travel ``up`` (a GPU's dependents are its pods and links, a
service's dependents its callers).
"""

from __future__ import annotations

from fleetmind.data.rca_gen.faults.rules import Hop

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
"""Every propagation rule, in the order the simulator tries them."""


def hops_by_effect() -> dict[str, tuple[Hop, ...]]:
    """:data:`HOPS` grouped by the effect they leave from."""
    out: dict[str, list[Hop]] = {}
    for h in HOPS:
        out.setdefault(h.effect, []).append(h)
    return {k: tuple(v) for k, v in out.items()}
