"""The records of the fault catalog: an alerting rule, a propagation hop, a fault type.

The tables built from them are :data:`fleetmind.data.rca_gen.faults.EFFECT_ALERTS` (alerts per effect and
node kind), :data:`fleetmind.data.rca_gen.faults.HOPS` (propagation) and
:data:`fleetmind.data.rca_gen.faults.FAULT_TYPES` (where faults start).
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
"""One minute in seconds (``for:`` durations and delays are written in minutes)."""
