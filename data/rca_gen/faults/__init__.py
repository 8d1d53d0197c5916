"""``fleetmind.data.rca_gen.faults``, the folder ``data/rca_gen/faults/``.

The fault catalog: where faults start, how they spread over the dependency graph, what alerts they raise.

Model. A fault starts at an **origin** node with a **root effect** (e.g. ``gpu_failed``). An effect at a
node raises that node's alerts (:data:`EFFECT_ALERTS`, keyed by effect and node kind, each alert with a
probability) and spreads over **hops** (:data:`HOPS`) to neighbours, which get a new effect after a
delay. Alerts unrelated to any fault come from :data:`NOISE_RULES`.

One module per concern; every name is re-exported here, so callers import from this package:

* :mod:`fleetmind.data.rca_gen.faults.rules` - the records: :class:`AlertRule`, :class:`Hop`,
  :class:`FaultType`, and the constants :data:`SEVERITIES` and :data:`MIN`;
* :mod:`fleetmind.data.rca_gen.faults.catalog` - :data:`FAULT_TYPES` (origins and the Llama 3 prior),
  :func:`fault_prior`, :func:`plausible_fault_types`;
* :mod:`fleetmind.data.rca_gen.faults.hops` - propagation: :data:`HOPS`, :func:`hops_by_effect`;
* :mod:`fleetmind.data.rca_gen.faults.effect_alerts` - :data:`EFFECT_ALERTS`, the alerts per effect
  (kube-prometheus, node-exporter, CoreDNS mixin and DCGM-exporter names, NVIDIA XIDs);
* :mod:`fleetmind.data.rca_gen.faults.noise` - :data:`NOISE_RULES`, background alerts by node kind.

Grounding: ``/work/shared/references/gpu-fleet-failures-and-alerting.md``; each module's docstring
says which part of it it follows.
"""

from __future__ import annotations

from fleetmind.data.rca_gen.faults.catalog import FAULT_TYPES, fault_prior, plausible_fault_types
from fleetmind.data.rca_gen.faults.effect_alerts import EFFECT_ALERTS
from fleetmind.data.rca_gen.faults.hops import HOPS, hops_by_effect
from fleetmind.data.rca_gen.faults.noise import NOISE_RULES
from fleetmind.data.rca_gen.faults.rules import MIN, SEVERITIES, AlertRule, FaultType, Hop

__all__ = [
    "EFFECT_ALERTS",
    "FAULT_TYPES",
    "HOPS",
    "MIN",
    "NOISE_RULES",
    "SEVERITIES",
    "AlertRule",
    "FaultType",
    "Hop",
    "alertnames",
    "fault_prior",
    "hops_by_effect",
    "plausible_fault_types",
]


def alertnames() -> list[str]:
    """Every alert name the simulator can emit (faults, storms and noise), sorted."""
    names = {r.alertname for rules in EFFECT_ALERTS.values() for r in rules}
    names |= {r.alertname for rules in NOISE_RULES.values() for r in rules}
    return sorted(names)
