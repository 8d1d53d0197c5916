"""Alert simulator: one incident = a fault cascade over a graph rendered as Alertmanager v4 alerts.

How an incident is made (all randomness from one ``numpy.random.Generator``):

1. Draw a fault type from the prior (:func:`fleetmind.data.rca_gen.faults.fault_prior`, Llama 3 failure mix),
   an origin node of an allowed kind/role, and whether the root is **silent** (raises nothing itself).
2. Spread the fault breadth-first over :data:`fleetmind.data.rca_gen.faults.HOPS` (probability per neighbour,
   log-normal onset delays) up to ``max_depth`` hops. A cascade with fewer than
   ``min_symptom_nodes`` alerting nodes besides the root is redrawn (nobody runs RCA on one alert).
3. Each affected node raises the alerts of its effect (:data:`EFFECT_ALERTS`), each with its own
   probability. An alert fires at ``onset + U(0, scrape) + for_scale * for + U(0, eval) + N(0, jitter)``
   (Prometheus: scrape, then the rule must hold for ``for:`` and is seen at the next evaluation), so
   symptoms with short ``for:`` often fire before a root with a long one (``KubeNodeNotReady`` waits 15
   minutes). Only alerts that fired before the end of the window are kept; some symptoms resolve.
4. **Storms:** alerts at hub services (gateway, router, or >= ``hub_min_callers`` callers) are repeated
   per route and per pod.
5. **Noise:** background alerts on random nodes (``noise_per_node`` x |V|, at least ``noise_min``):
   long-firing warnings that started hours earlier and flapping alerts that fire and resolve
   repeatedly; some share alert names with fault signatures (``GPUXidError`` xid 13/31,
   ``KubePodCrashLooping`` of a batch job, ``GPUHighTemperature``).
6. **Second incident** (``second_incident_rate``): an unrelated, older and shallower cascade (onset 10-40
   minutes before the main one, at most 2 hops) in the same window; ground truth stays the main root
   and the secondary root is recorded under ``secondary``.
7. **Concurrent low-severity faults** (``concurrent_faults``, Poisson): faults of any type whose origin
   raises its usual alerts while their spread stays within one hop; recorded under ``concurrent``.

Together with propagation that carries origin alert names to other nodes (a dead host's GPUs log XID
79, a dead ToR makes its hosts NotReady and the NCCL jobs on them and on their peers time out, a DNS
failure raises lookup errors at every dependent service) and noise rules that share those names, no
alert name identifies the root by itself: ``docs/rca-data.md`` lists each name's root share.

The incident dict (dataset contract)::

    {"id", "graph", "alerts": [alert, ...], "root_cause", "fault_type", "silent_root": bool,
     "secondary": {"root_cause", "fault_type"} | None,
     "concurrent": [{"root_cause", "fault_type"}, ...], "window": {"start", "end"}}

``window.start`` is 1-10 minutes before the (hidden) fault onset; ``window.end`` (the moment the RCA runs
and the cut-off for alerts) is ``window_s`` +-10 % after it.

An alert (Alertmanager webhook v4 ``alerts[]`` entry)::

    {"status": "firing"|"resolved", "labels": {"alertname", "severity", ...}, "annotations": {...},
     "startsAt": RFC3339, "endsAt": RFC3339 ("0001-01-01T00:00:00Z" while firing),
     "generatorURL": "http://prometheus.<cluster>...", "fingerprint": 16 hex digits}
"""

from __future__ import annotations

import hashlib
import math
from collections import deque
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from typing import Any

import numpy as np

from fleetmind.data.errors import ConfigError
from fleetmind.data.graph import DependencyGraph
from fleetmind.data.rca_gen.faults import (
    EFFECT_ALERTS,
    FAULT_TYPES,
    NOISE_RULES,
    AlertRule,
    fault_prior,
    hops_by_effect,
)

ZERO_TIME = "0001-01-01T00:00:00Z"
"""``endsAt`` of a firing alert in Alertmanager webhooks."""

ROUTES = (
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/embeddings",
    "/v1/models",
    "/generate",
    "/healthz",
)


NOISE_KIND_WEIGHTS: dict[str, float] = {
    "pod": 0.3,
    "gpu": 0.25,
    "host": 0.2,
    "service": 0.1,
    "infra": 0.04,
    "dns": 0.04,
    "network": 0.04,
    "link": 0.03,
}


MAX_COUNT_KNOB = 10_000
"""The largest value an integer knob of :class:`AlertSimConfig` takes (copies, depths, alert counts:
the defaults are single digits; a larger value is a typo that would overflow NumPy's samplers)."""


@dataclass
class AlertSimConfig:
    """Realism knobs of the alert simulator (defaults = the ``default`` difficulty).

    Attributes:
        scrape_interval_s: Prometheus ``scrape_interval`` (default 30 s; Prometheus' own default is
            1 m, 15-30 s is common).
        eval_interval_s: rule ``evaluation_interval`` (30 s).
        for_scale: multiplier on every rule's ``for:`` duration (1.0 = the documented durations, 0 =
            alerts fire as soon as the condition is seen).
        jitter_s: std of Gaussian timestamp jitter (clock skew, delivery) in seconds.
        window_s: incident window: alerts that fired in the ``window_s`` (+-10 %) seconds after the
            fault onset (plus older noise still firing) form the incident.
        silent_root_rate: share of incidents whose root raises no alert (only fault types marked
            ``silenceable`` can be silent; must not exceed their prior share, about 0.49).
        noise_per_node: expected background alerts per graph node.
        noise_min: at least this many background alerts per incident.
        flap_fraction: share of background alerts that flap (fire and resolve 2-4 times in the window).
        resolve_prob: chance that a symptom alert already resolved when the window closes.
        storm_copies: a hub service's alert is repeated with up to this many extra ``route`` labels.
        storm_pod_prob: chance that each pod of a hub service repeats the hub's alert with its pod label.
        hub_min_callers: a service with at least this many callers counts as a hub (gateway and router
            always do).
        second_incident_rate: chance of an unrelated older incident in the same window.
        concurrent_faults: expected number (Poisson) of unrelated low-severity faults active in the
            window: a fault of any type whose origin raises its usual alerts but whose spread stays
            small (1 hop, hop probabilities times ``concurrent_hop_scale``), started up to an hour
            before the onset and up to 5 minutes before the window ends; some resolve. A fleet of
            16k GPUs sees an interruption every ~3 hours (Llama 3) and automation handles most
            faults without an incident, so several are open at any time.
        concurrent_hop_scale: factor on hop probabilities of the concurrent faults.
        max_depth: longest propagation chain in hops.
        min_symptom_nodes: fewest alerting nodes besides the root.
        fault_prior: fault type -> weight (default: :func:`fleetmind.data.rca_gen.faults.fault_prior`).
        start_time: ISO date of the first incident; incidents are spaced 2 hours apart.
    """

    scrape_interval_s: float = 30.0
    eval_interval_s: float = 30.0
    for_scale: float = 1.0
    jitter_s: float = 5.0
    window_s: float = 1800.0
    silent_root_rate: float = 0.2
    noise_per_node: float = 0.006
    noise_min: int = 2
    flap_fraction: float = 0.3
    resolve_prob: float = 0.1
    storm_copies: int = 4
    storm_pod_prob: float = 0.3
    hub_min_callers: int = 3
    second_incident_rate: float = 0.1
    concurrent_faults: float = 1.5
    concurrent_hop_scale: float = 0.3
    max_depth: int = 8
    min_symptom_nodes: int = 2
    fault_prior: dict[str, float] | None = None
    start_time: str = "2026-01-05T00:00:00Z"

    @classmethod
    def preset(cls, difficulty: str = "default", **overrides: Any) -> AlertSimConfig:
        """``default`` or ``hard`` (more silent roots, 2.5x noise, more second incidents, more jitter)."""
        if difficulty == "default":
            base: dict[str, Any] = {}
        elif difficulty == "hard":
            base = {
                "silent_root_rate": 0.35,
                "noise_per_node": 0.015,
                "noise_min": 5,
                "second_incident_rate": 0.3,
                "jitter_s": 20.0,
                "storm_copies": 8,
                "concurrent_faults": 3.0,
            }
        else:
            raise ConfigError(f"unknown difficulty {difficulty!r} (use 'default' or 'hard')")
        base.update({k: v for k, v in overrides.items() if v is not None})
        cfg = cls(**base)
        cfg.check()
        return cfg

    def check(self) -> None:
        """Raise ConfigError naming the first invalid knob."""
        for f in fields(self):
            v = getattr(self, f.name)
            if not isinstance(v, int | float) or isinstance(v, bool):
                continue
            if not math.isfinite(v):  # nan passes `v < 0`; inf overflows a timestamp later
                raise ConfigError(
                    f"alert simulator knob {f.name} must be a finite number (got {v})"
                )
            if v < 0:
                raise ConfigError(f"alert simulator knob {f.name} must be >= 0 (got {v})")
            if isinstance(v, int) and v > MAX_COUNT_KNOB:
                raise ConfigError(
                    f"alert simulator knob {f.name} must be <= {MAX_COUNT_KNOB} (got {v})"
                )
        for name in ("scrape_interval_s", "eval_interval_s"):
            if getattr(self, name) <= 0:
                raise ConfigError(
                    f"alert simulator knob {name} must be > 0 (got {getattr(self, name)})"
                )
        for name in (
            "silent_root_rate",
            "flap_fraction",
            "resolve_prob",
            "storm_pod_prob",
            "second_incident_rate",
        ):
            if getattr(self, name) > 1:
                raise ConfigError(
                    f"alert simulator knob {name} is a probability (got {getattr(self, name)})"
                )
        prior = self.prior()
        share = sum(p for k, p in prior.items() if FAULT_TYPES[k].silenceable)
        if self.silent_root_rate > share + 1e-9:
            raise ConfigError(
                f"silent_root_rate {self.silent_root_rate} exceeds the share of silenceable fault types ({share:.2f})"
            )
        if self.window_s <= 0:
            raise ConfigError("window_s must be > 0")

    def prior(self) -> dict[str, float]:
        """The normalised fault-type prior."""
        if self.fault_prior is None:
            return fault_prior()
        unknown = set(self.fault_prior) - set(FAULT_TYPES)
        if unknown:
            raise ConfigError(f"unknown fault type(s) in fault_prior: {', '.join(sorted(unknown))}")
        tot = float(sum(self.fault_prior.values()))
        if tot <= 0:
            raise ConfigError("fault_prior weights must sum to > 0")
        return {k: float(v) / tot for k, v in self.fault_prior.items() if v > 0}

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def fingerprint(labels: dict[str, str]) -> str:
    """16 hex digits identifying a label set (Alertmanager uses a 64-bit FNV hash; we use 64-bit BLAKE2b)."""
    key = "\xff".join(f"{k}\xfe{labels[k]}" for k in sorted(labels))
    return hashlib.blake2b(key.encode(), digest_size=8).hexdigest()


@dataclass
class _Alert:
    node: int
    rule: AlertRule
    start: float
    end: float | None = None
    extra: dict[str, str] = field(default_factory=dict)


class IncidentSimulator:
    """Simulates incidents on one graph.

    Args:
        graph: the topology.
        config: the knobs (:class:`AlertSimConfig`).

    Example:
        >>> sim = IncidentSimulator(graph, AlertSimConfig())            # doctest: +SKIP
        >>> inc = sim.simulate(np.random.default_rng(0), "inc-0")       # doctest: +SKIP
    """

    def __init__(self, graph: DependencyGraph, config: AlertSimConfig | None = None) -> None:
        self.graph = graph
        self.cfg = config or AlertSimConfig()
        self.cfg.check()
        n = graph.num_nodes
        self.kinds = [nd.kind for nd in graph.nodes]
        self.roles = [nd.attrs.get("role") for nd in graph.nodes]
        self.adj: dict[tuple[str, str], list[list[int]]] = {}
        src, dst = graph.edge_index
        for ekind in {e.kind for e in graph.edges}:
            self.adj[(ekind, "down")] = [[] for _ in range(n)]
            self.adj[(ekind, "up")] = [[] for _ in range(n)]
        for e, (s, d) in enumerate(zip(src.tolist(), dst.tolist(), strict=True)):
            kind = graph.edges[e].kind
            self.adj[(kind, "down")][s].append(d)
            self.adj[(kind, "up")][d].append(s)
        self._empty: list[list[int]] = [[] for _ in range(n)]
        self.hops = hops_by_effect()
        self.by_kind: dict[str, np.ndarray] = {}
        self.by_kind_role: dict[tuple[str, str], np.ndarray] = {}
        for i, (k, r) in enumerate(zip(self.kinds, self.roles, strict=True)):
            self.by_kind.setdefault(k, []).append(i)  # type: ignore[arg-type]
            self.by_kind_role.setdefault((k, str(r)), []).append(i)  # type: ignore[arg-type]
        self.by_kind = {k: np.array(v) for k, v in self.by_kind.items()}
        self.by_kind_role = {k: np.array(v) for k, v in self.by_kind_role.items()}
        callers = self.adj.get(("calls", "up"), self._empty)
        self.is_hub = [
            self.kinds[i] == "service"
            and (
                self.roles[i] in ("gateway", "router")
                or len(callers[i]) >= self.cfg.hub_min_callers
            )
            for i in range(n)
        ]
        self.pods_of = self.adj.get(("member_of", "up"), self._empty)
        self.base_labels = [self._labels(i) for i in range(n)]
        prior = self.cfg.prior()
        self.fault_names = [k for k in prior]
        self.fault_p = np.array([prior[k] for k in self.fault_names])
        share = sum(p for k, p in prior.items() if FAULT_TYPES[k].silenceable)
        self.silent_p = self.cfg.silent_root_rate / share if share > 0 else 0.0
        self.origin_cache: dict[str, list[tuple[np.ndarray, str, float]]] = {}

    # ------------------------------------------------------------------ labels
    def _labels(self, i: int) -> dict[str, str]:
        nd = self.graph.nodes[i]
        m = dict(nd.match)
        k = nd.kind
        if k == "gpu":
            m["Hostname"] = m["node"]
            m["instance"] = f"{m['node']}:9400"
            m["modelName"] = str(nd.attrs.get("model", ""))
            m["UUID"] = "GPU-" + hashlib.blake2b(nd.id.encode(), digest_size=16).hexdigest()
            m["pci_bus_id"] = f"00000000:{0x18 + 0x10 * int(m['gpu']):02X}:00.0"
        elif k == "host":
            m["instance"] = f"{m['node']}:9100"
        elif k == "link":
            m["instance"] = f"{m['node']}:9401"
        elif k == "pod":
            m["container"] = str(nd.attrs.get("service", ""))
            m["service"] = str(nd.attrs.get("service", ""))
        elif k == "service":
            m["namespace"] = str(nd.attrs.get("namespace", "default"))
        elif k == "network" and nd.attrs.get("role") == "wan":
            m["cluster"] = m["peer_a"]
        return m

    # ------------------------------------------------------------------ pieces
    def _origins(self, fault: str) -> list[tuple[np.ndarray, str, float]]:
        if fault not in self.origin_cache:
            ft = FAULT_TYPES[fault]
            out = []
            for (kind, roles, effect), w in zip(ft.origins, ft.origin_weights, strict=True):
                if roles:
                    parts = [self.by_kind_role.get((kind, r)) for r in roles]
                    cand = np.concatenate(
                        [p for p in parts if p is not None] or [np.array([], dtype=int)]
                    )
                else:
                    cand = self.by_kind.get(kind, np.array([], dtype=int))
                if len(cand):
                    out.append((np.sort(cand), effect, w))
            self.origin_cache[fault] = out
        return self.origin_cache[fault]

    def _pick_fault(self, rng: np.random.Generator, fault: str | None) -> tuple[str, int, str]:
        for _ in range(100):
            f = fault or self.fault_names[int(rng.choice(len(self.fault_names), p=self.fault_p))]
            origins = self._origins(f)
            if not origins:
                if fault is not None:
                    raise ConfigError(
                        f"graph {self.graph.name!r} has no node where fault {fault!r} can start"
                    )
                continue
            w = np.array([o[2] for o in origins])
            cand, effect, _ = origins[int(rng.choice(len(origins), p=w / w.sum()))]
            return f, int(cand[int(rng.integers(len(cand)))]), effect
        raise ConfigError(
            f"graph {self.graph.name!r} supports none of the fault types in the prior"
        )

    def _cascade(
        self,
        rng: np.random.Generator,
        root: int,
        effect: str,
        t0: float,
        max_depth: int,
        prob_scale: float = 1.0,
    ) -> dict[int, tuple[float, str]]:
        affected: dict[int, tuple[float, str]] = {root: (t0, effect)}
        depth = {root: 0}
        queue = deque([root])
        while queue:
            u = queue.popleft()
            t, eff = affected[u]
            if depth[u] >= max_depth:
                continue
            for hop in self.hops.get(eff, ()):
                nbrs = self.adj.get((hop.edge, hop.direction), self._empty)[u]
                for v in nbrs:
                    if v in affected or self.kinds[v] not in hop.to_kinds:
                        continue
                    if hop.to_roles and self.roles[v] not in hop.to_roles:
                        continue
                    if rng.random() < hop.prob * prob_scale:
                        med, sig = hop.delay
                        affected[v] = (
                            t + med * float(np.exp(sig * rng.standard_normal())),
                            hop.new_effect,
                        )
                        depth[v] = depth[u] + 1
                        queue.append(v)
        return affected

    def _fire_time(self, rng: np.random.Generator, onset: float, rule: AlertRule) -> float:
        c = self.cfg
        return (
            onset
            + rng.uniform(0, c.scrape_interval_s)
            + c.for_scale * rule.for_s
            + rng.uniform(0, c.eval_interval_s)
            + (c.jitter_s * rng.standard_normal() if c.jitter_s > 0 else 0.0)
        )

    def _node_alerts(
        self, rng: np.random.Generator, i: int, onset: float, effect: str, force: bool
    ) -> list[_Alert]:
        rules = [
            r
            for r in EFFECT_ALERTS.get((effect, self.kinds[i]), ())
            if not r.roles or self.roles[i] in r.roles
        ]
        out = [_Alert(i, r, self._fire_time(rng, onset, r)) for r in rules if rng.random() < r.prob]
        if force and not out and rules:
            r = max(rules, key=lambda r: (r.prob, -r.for_s))
            out.append(_Alert(i, r, self._fire_time(rng, onset, r)))
        return out

    def _storm(self, rng: np.random.Generator, alerts: list[_Alert]) -> list[_Alert]:
        c = self.cfg
        extra: list[_Alert] = []
        for a in alerts:
            if not self.is_hub[a.node]:
                continue
            n_routes = int(rng.integers(0, c.storm_copies + 1)) if c.storm_copies > 0 else 0
            for r in rng.choice(len(ROUTES), size=min(n_routes, len(ROUTES)), replace=False):
                extra.append(
                    _Alert(
                        a.node,
                        a.rule,
                        a.start + abs(rng.normal(0, 20)),
                        extra={"route": ROUTES[int(r)]},
                    )
                )
            for p in self.pods_of[a.node]:
                if self.kinds[p] == "pod" and rng.random() < c.storm_pod_prob:
                    extra.append(_Alert(p, a.rule, a.start + abs(rng.normal(0, 20))))
        return alerts + extra

    def _noise(self, rng: np.random.Generator, t_begin: float, t_end: float) -> list[_Alert]:
        c = self.cfg
        n = max(c.noise_min, int(rng.poisson(c.noise_per_node * self.graph.num_nodes)))
        kinds = [k for k in NOISE_KIND_WEIGHTS if k in self.by_kind and NOISE_RULES.get(k)]
        w = np.array([NOISE_KIND_WEIGHTS[k] for k in kinds])
        w /= w.sum()
        out: list[_Alert] = []
        for _ in range(n):
            k = kinds[int(rng.choice(len(kinds), p=w))]
            rule = NOISE_RULES[k][int(rng.integers(len(NOISE_RULES[k])))]
            cand = self._noise_nodes(k, rule)
            if len(cand) == 0:
                continue
            node = int(cand[int(rng.integers(len(cand)))])
            if rng.random() < c.flap_fraction:
                t = rng.uniform(t_begin - 600, t_end - 300)
                for _cycle in range(int(rng.integers(2, 5))):
                    dur = rng.uniform(60, 400)
                    end = t + dur
                    out.append(_Alert(node, rule, t, end if end < t_end else None))
                    t = end + rng.uniform(60, 600)
                    if t >= t_end:
                        break
            else:
                out.append(_Alert(node, rule, rng.uniform(t_begin - 6 * 3600, t_end)))
        for cl in self.by_kind.get("cluster", ()):
            if rng.random() < 0.5:
                out.append(
                    _Alert(
                        int(cl), NOISE_RULES["cluster"][0], t_begin - rng.uniform(3600, 30 * 86400)
                    )
                )
        return out

    def _noise_nodes(self, kind: str, rule: AlertRule) -> np.ndarray:
        """Nodes of ``kind`` a background ``rule`` can fire at (its ``roles`` filter applied)."""
        if not rule.roles:
            return self.by_kind[kind]
        parts = [self.by_kind_role[(kind, r)] for r in rule.roles if (kind, r) in self.by_kind_role]
        return np.concatenate(parts) if parts else np.array([], dtype=int)

    def _concurrent(
        self, rng: np.random.Generator, t0: float, t_end: float, exclude: set[int]
    ) -> tuple[list[_Alert], list[dict[str, str]]]:
        """Unrelated low-severity faults open during the window (see ``concurrent_faults``)."""
        c = self.cfg
        out: list[_Alert] = []
        meta: list[dict[str, str]] = []
        if c.concurrent_faults <= 0:
            return out, meta
        for _ in range(int(rng.poisson(c.concurrent_faults))):
            f, r, e = self._pick_fault(rng, None)
            if r in exclude:
                continue
            exclude.add(r)
            tc = rng.uniform(t0 - 3600.0, t_end - 300.0)
            aff = self._cascade(rng, r, e, tc, 1, c.concurrent_hop_scale)
            alerts: list[_Alert] = []
            for i, (onset, eff) in aff.items():
                alerts.extend(self._node_alerts(rng, i, onset, eff, force=(i == r)))
            for a in alerts:
                if rng.random() < 0.3:
                    a.end = a.start + rng.uniform(120, 1800)
            out.extend(alerts)
            meta.append({"root_cause": self.graph.nodes[r].id, "fault_type": f})
        return out, meta

    def _render(
        self, a: _Alert, choice: dict[tuple[int, str, str], str], t_end: float
    ) -> dict[str, Any]:
        labels = dict(self.base_labels[a.node])
        labels["alertname"] = a.rule.alertname
        labels["severity"] = a.rule.severity
        labels["job"] = a.rule.job
        for k, v in a.rule.labels:
            labels[k] = choice.get((a.node, a.rule.alertname, v), v)
        labels.update(a.extra)
        resolved = a.end is not None and a.end <= t_end
        cluster = labels.get("cluster", "global")
        return {
            "status": "resolved" if resolved else "firing",
            "labels": labels,
            "annotations": {
                "summary": a.rule.summary or a.rule.alertname,
                "description": f"{a.rule.alertname} on {self.graph.nodes[a.node].id}",
            },
            "startsAt": _iso(a.start),
            "endsAt": _iso(a.end) if resolved else ZERO_TIME,
            "generatorURL": f"http://prometheus.{cluster}.fleet.internal:9090/graph?g0.expr=ALERTS%7Balertname%3D%22{a.rule.alertname}%22%7D&g0.tab=1",
            "fingerprint": fingerprint(labels),
        }

    # ------------------------------------------------------------------ main entry
    def simulate(
        self,
        rng: np.random.Generator,
        incident_id: str,
        t_start: float | None = None,
        fault: str | None = None,
        silent: bool | None = None,
    ) -> dict[str, Any]:
        """Simulate one incident.

        Args:
            rng: the random generator (the only source of randomness).
            incident_id: the ``id`` of the incident.
            t_start: UNIX time of the fault onset (default: ``config.start_time``).
            fault: force a fault type (default: drawn from the prior).
            silent: force the root silent or not (default: drawn so the overall share is
                ``silent_root_rate``; only silenceable fault types can be silent).

        Returns:
            the incident dict (see the module docstring).
        """
        c = self.cfg
        t0 = (
            t_start
            if t_start is not None
            else datetime.fromisoformat(c.start_time.replace("Z", "+00:00")).timestamp()
        )
        # the RCA runs about window_s after the onset (+-10 %), so neither window edge reveals the onset
        t_end = t0 + c.window_s * rng.uniform(0.9, 1.1)
        # --- main cascade: redrawn until enough symptoms alert; a new origin after 4 failed draws
        # (a fault on an idle GPU or an unused link makes no incident anyone would analyse)
        main: list[_Alert] = []
        for attempt in range(40):
            if attempt % 4 == 0:
                fname, root, effect = self._pick_fault(rng, fault)
                is_silent = (
                    silent
                    if silent is not None
                    else FAULT_TYPES[fname].silenceable and rng.random() < self.silent_p
                )
            affected = self._cascade(rng, root, effect, t0, c.max_depth)
            main = []
            for i, (onset, eff) in affected.items():
                if i == root and is_silent:
                    continue
                main.extend(self._node_alerts(rng, i, onset, eff, force=(i == root)))
            main = [a for a in main if a.start <= t_end]
            if not is_silent and not any(a.node == root for a in main):
                continue
            if len({a.node for a in main} - {root}) >= c.min_symptom_nodes:
                break
        for a in main:
            if a.node != root and rng.random() < c.resolve_prob:
                a.end = a.start + rng.uniform(120, 900)
        alerts = self._storm(rng, main)
        # --- second, unrelated and older incident
        secondary = None
        if rng.random() < c.second_incident_rate:
            f2, r2, e2 = self._pick_fault(rng, None)
            if r2 != root:
                t2 = t0 - rng.uniform(600, 2400)
                aff2 = self._cascade(rng, r2, e2, t2, 2)
                sec = []
                for i, (onset, eff) in aff2.items():
                    sec.extend(self._node_alerts(rng, i, onset, eff, force=(i == r2)))
                sec = [a for a in sec if a.start <= t_end]
                if sec:
                    alerts.extend(self._storm(rng, sec))
                    secondary = {"root_cause": self.graph.nodes[r2].id, "fault_type": f2}
        conc, concurrent = self._concurrent(rng, t0, t_end, {root})
        alerts.extend(conc)
        alerts.extend(self._noise(rng, t0, t_end))
        alerts = [a for a in alerts if a.start <= t_end]
        # one option per '|' label and node (e.g. the XID of a failed GPU), shared by storm copies
        choice: dict[tuple[int, str, str], str] = {}
        for a in alerts:
            for _k, v in a.rule.labels:
                key = (a.node, a.rule.alertname, v)
                if "|" in v and key not in choice:
                    opts = v.split("|")
                    choice[key] = opts[int(rng.integers(len(opts)))]
        alerts.sort(key=lambda a: a.start)
        rendered = [self._render(a, choice, t_end) for a in alerts]
        # the reported window opens a random 1-10 min before the onset (the onset itself stays hidden)
        t_win = t0 - rng.uniform(60.0, 600.0)
        root_alerts = any(a.node == root for a in main)
        return {
            "id": incident_id,
            "graph": self.graph.name,
            "alerts": rendered,
            "root_cause": self.graph.nodes[root].id,
            "fault_type": fname,
            "silent_root": not root_alerts,
            "secondary": secondary,
            "concurrent": concurrent,
            "window": {"start": _iso(t_win), "end": _iso(t_end)},
        }
