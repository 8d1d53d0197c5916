"""The model registry: which RCA analyzer and placement policy serve, and atomic hot reload.

A :class:`ModelSet` is immutable; :class:`ModelRegistry` holds the current one behind a single
reference. :meth:`ModelRegistry.reload` builds a complete new set first and swaps the reference only
when it is ready, so a request (which reads ``registry.current`` once) always sees one consistent set
and never fails because of a reload in progress.

References (``FLEETMIND_RCA_MODEL`` / ``FLEETMIND_PLACEMENT_MODEL``):

* unset: the released artifact (``models/rca/``, ``models/placement/``) through the peer loaders
  ``rca.gat_analyzer.GATAnalyzer.load(None)`` and ``rl.policy_adapter.load_ppo_policy(None)``;
* a local path or an MLflow URI (``models:/fleetmind-rca@champion``): passed to the same loaders;
* ``baseline:<name>`` / ``heuristic:<name>``: serve that baseline or heuristic on purpose;
* a local folder written by ``fleetmind rca fit`` (``config.json`` format ``fleetmind-rca-fit``):
  served as the method ``gat_fit`` (:class:`FittedProbabilityAnalyzer`), whose scores are a
  softmax over the graph's nodes, not calibrated (``calibrated: false``).

When the model cannot be loaded (loader module absent, artifact missing or corrupt) the registry falls
back to the best baseline (RCA) or heuristic (placement) and records ``fallback_reason``; responses
carry the method and the reason.

Every worker process (``fleetmind serve --workers N``) and every replica holds its own registry. A
reload request (:meth:`ModelRegistry.request_reload`) counts one more *reload generation* in the
database (table ``model_reloads``), and a registry that follows the database
(:meth:`ModelRegistry.follow`) looks at that generation at most every :data:`FOLLOW_S` seconds,
when a request reads its models, in a background thread (a request never waits for it), and
reloads from its own references when it is behind: so one ``POST /api/v1/models/reload`` reaches
every worker and replica, each within :data:`FOLLOW_S` seconds of its next request plus its load
time. A registry alias (``models:/fleetmind-rca@champion``) is resolved once, by the process that
got the request: the generation records the versions it loaded (``models:/fleetmind-rca/3``), and
the others load those, so every process serves the same version even when the alias moves
meanwhile. Each applies the rule of :meth:`ModelRegistry.reload` on its own (a model that would
become a fallback keeps the served set, ``reload_error`` says why).
"""

from __future__ import annotations

import importlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from fleetmind.data.errors import ConfigError, FleetMindError, ModelLoadError
from fleetmind.data.mlflow_store import safe_uri
from fleetmind.rca import baselines
from fleetmind.rca.base import BaseAnalyzer, RCAResult
from fleetmind.rca.fit_model import (
    FittedGATAnalyzer,
    fit_node_overlap,
    is_fit_artifact,
    ranked_causes,
)
from fleetmind.serving.fallback import UpstreamCoverageAnalyzer
from fleetmind.serving.scheduler.placement import (
    BestFitPlacer,
    PeerPolicyPlacer,
    Placer,
    peer_heuristic,
)

if TYPE_CHECKING:
    from fleetmind.serving.db import Database

log = logging.getLogger("fleetmind.serving")

FOLLOW_S = 2.0
"""How often, at most, a registry that follows the database checks its reload generation (s)."""

RCA_BASELINE_PREFERENCE = ("deepest", "pagerank", "most_alerts")
"""Peer baselines (``rca.baselines``) tried in order when the GAT is unavailable: best first by
``benchmarks/results/rca/rca_baselines_default.json`` (1,000 simulated incidents: deepest AC@1 0.332,
MRR 0.486; pagerank 0.153 / 0.312; most_alerts 0.078 / 0.223, level with random's 0.076 / 0.222).
pagerank costs 13 ms per incident there against most_alerts' 2 ms, little for a fallback."""


def printable(text: str | None) -> str | None:
    """``text`` with its credentials masked (:func:`fleetmind.data.mlflow_store.safe_uri`) and
    any character UTF-8 cannot encode (the lone surrogates by which Python decodes a path's
    non-UTF-8 bytes, e.g. ``\\udcff``) written as a backslash escape, so that it can go into a
    JSON response and a log line; ``None`` stays ``None``."""
    if text is None:
        return None
    return safe_uri(text).encode("utf-8", "backslashreplace").decode("utf-8")


@dataclass(frozen=True)
class LoadedModel:
    """One served model: ``impl`` is a BaseAnalyzer (rca) or a Placer (placement)."""

    kind: str
    impl: Any
    method: str
    version: str | None
    source: str | None
    fallback_reason: str | None
    loaded_at: float
    calibrated: bool | None = None
    """RCA: whether the model's top score is a calibrated probability (a GAT whose ``config.json``
    holds a fitted temperature); ``None`` where it does not apply (placement, baselines).
    "Calibrated" says only that a temperature was fitted, on simulated incidents: see
    :attr:`calibration_fitted_on`, not that a score is right that often on a real system."""
    calibration_fitted_on: dict[str, Any] | None = field(default=None, compare=False)
    """RCA: ``calibration.fitted_on`` of the model's ``config.json`` (the incidents its temperature
    was fitted on: ``data``, ``split``, ``n``, ``generator``), ``None`` without one."""

    def __post_init__(self) -> None:
        # paths with bytes that are not UTF-8 (os.fsdecode's lone surrogates) cannot be written
        # to a JSON response: every text field that may name a path is made printable once, here
        for name in ("version", "source", "fallback_reason"):
            object.__setattr__(self, name, printable(getattr(self, name)))

    def info(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "method": self.method,
            "version": self.version,
            "source": self.source,
            "fallback_reason": self.fallback_reason,
            "loaded_at": datetime.fromtimestamp(self.loaded_at, UTC).isoformat(),
            "calibrated": self.calibrated,
            "calibration_fitted_on": self.calibration_fitted_on,
        }


@dataclass(frozen=True)
class ModelSet:
    rca: LoadedModel
    placement: LoadedModel
    generation: int


class ModelRegistry:
    """Loads and serves the models; thread-safe reloads with an atomic swap.

    Args:
        rca_ref: RCA model reference (see module docstring).
        placement_ref: placement model reference.
        on_load: optional callback ``(kind, ok: bool)`` for metrics.
    """

    def __init__(
        self,
        rca_ref: str | None = None,
        placement_ref: str | None = None,
        on_load: Any = None,
    ) -> None:
        self.rca_ref = rca_ref
        self.placement_ref = placement_ref
        self._on_load = on_load
        self._reload_lock = threading.Lock()
        self._current: ModelSet | None = None
        self._loaded_ts = 0.0  # Unix s when the initial load began
        # following the database's reload generation (follow())
        self.db: Database | None = None
        self.follow_s = FOLLOW_S
        self._on_reload: Callable[[ModelSet], None] | None = None
        self._follow_lock = threading.Lock()  # one read-and-decide (or request) at a time
        self._checking = threading.Lock()  # one background check at a time
        self._next_check = 0.0  # time.monotonic() of the next check
        self._follow_failing = False
        self.reload_generation: int | None = None
        """The service's reload generation this process has taken up (``None``: not known yet)."""
        self.reload_error: str | None = None
        """Why this process kept its models at the latest reload it took up, else ``None``."""

    @property
    def current(self) -> ModelSet:
        cur = self._current
        if cur is None:
            raise RuntimeError("model registry not loaded")  # lifespan always loads it
        if self.db is not None and time.monotonic() >= self._next_check:
            self._check_in_background()
        return cur

    def follow(
        self,
        db: Database,
        on_reload: Callable[[ModelSet], None] | None = None,
        interval_s: float = FOLLOW_S,
    ) -> None:
        """Follow the service's reload generation in ``db`` (see the module docstring).

        Args:
            db: the service database (table ``model_reloads``).
            on_reload: called with the new set after a reload another process requested (e.g.
                ``Metrics.set_models``).
            interval_s: the most often the generation is read (s).
        """
        self.db = db
        self._on_reload = on_reload
        self.follow_s = interval_s
        self._next_check = time.monotonic() + interval_s

    def request_reload(self) -> tuple[int | None, ModelSet]:
        """Reload this process's models (:meth:`reload`), then request a reload of every worker
        and replica (when following a database), with the registry versions this process
        resolved (:func:`_pins`): the others load those versions, not their alias again.

        Returns:
            the service's reload generation (``None`` without a database) and this process's set.

        Raises:
            ModelLoadError: this process kept its models, or a model stays on its fallback (the
                request stands for the others).
        """
        generation = None
        if self.db is None:
            attempt = self._reload(None)
        else:
            # the follow lock is held across the reload and its record, as sync() holds it across
            # its read and its reload: a follow-up of an older generation never swaps in after
            # this newer reload (which would leave this process on another version for good)
            with self._follow_lock:
                attempt = self._reload(None)
                try:
                    generation = self.db.request_model_reload(time.time(), attempt.pins or None)
                except Exception as err:  # a database outage must not stop this process reloading
                    log.warning("reload not recorded for the other workers: %s", safe_uri(str(err)))
                else:
                    self.reload_generation = generation
        self.reload_error = attempt.error
        if attempt.error is not None:
            if attempt.swapped and self._on_reload is not None:  # the route reports no set on 409
                self._on_reload(attempt.models)
            raise ModelLoadError(attempt.error)
        return generation, attempt.models

    def sync(self) -> ModelSet | None:
        """Read the service's reload generation and reload when this process is behind.

        Returns:
            the new set, or ``None`` (nothing to do, or the reload kept the served models:
            :attr:`reload_error` says why).
        """
        if self.db is None:
            return None
        # held across the reload too (see request_reload): the generation read is still the
        # newest this process knows when its models are swapped in
        with self._follow_lock:
            generation, requested_ts, pins = self.db.model_reload_record()
            if self.reload_generation is None:  # first look: a request after our load counts
                due = generation > 0 and requested_ts >= self._loaded_ts
            else:
                due = generation > self.reload_generation
            self.reload_generation = generation
            if not due:
                return None
            attempt = self._reload(pins)
        self.reload_error = attempt.error
        if not attempt.swapped:
            return None
        models = attempt.models
        log.info(
            "models reloaded for reload generation %d (generation %d)",
            generation,
            models.generation,
        )
        if self._on_reload is not None:
            self._on_reload(models)
        return models

    def _check_in_background(self) -> None:
        """Start :meth:`sync` in a thread unless one runs; failures are logged, not raised."""
        if not self._checking.acquire(blocking=False):
            return
        self._next_check = time.monotonic() + self.follow_s

        def run() -> None:
            try:
                self.sync()
                if self._follow_failing:
                    log.info("model reload generation readable again")
                self._follow_failing = False
            except Exception as err:  # the database down: serve on, look again later
                if not self._follow_failing:
                    log.warning("cannot read the model reload generation: %s", err)
                self._follow_failing = True
            finally:
                self._checking.release()

        threading.Thread(target=run, name="fleetmind-model-follow", daemon=True).start()

    @property
    def loaded(self) -> bool:
        return self._current is not None

    def load(self) -> ModelSet:
        """Initial load: fall back where the models cannot be loaded."""
        with self._reload_lock:
            self._loaded_ts = time.time()
            self._current = ModelSet(self._load_rca(), self._load_placement(), 1)
            _log_fallbacks(self._current)
            return self._current

    def reload(self) -> ModelSet:
        """Load the models again and swap atomically.

        A model that served before and now fails to load is kept (the swap never downgrades a served
        model to a fallback); in that case ModelLoadError is raised and nothing changes. A model
        that was on its fallback and still cannot load raises ModelLoadError with the reason too,
        after the swap (the other model is reloaded).
        """
        attempt = self._reload(None)
        if attempt.error is not None:
            raise ModelLoadError(attempt.error)
        return attempt.models

    def _reload(self, pins: dict[str, Any] | None) -> _Attempt:
        """:meth:`reload`'s work, as an outcome; ``pins`` (a reload record's, see :func:`_pins`):
        the registry version to load for each reference that equals this process's own."""
        with self._reload_lock:
            old = self._current  # not self.current: that may start a follow-up (sync) meanwhile
            if old is None:
                raise RuntimeError("model registry not loaded")  # lifespan always loads it
            rca = self._load_rca(_pinned(pins, "rca", self.rca_ref))
            placement = self._load_placement(_pinned(pins, "placement", self.placement_ref))
            tried = _pins(
                {"rca": (self.rca_ref, rca), "placement": (self.placement_ref, placement)}
            )
            kept, stays = [], []
            for was, now in ((old.rca, rca), (old.placement, placement)):
                if not now.fallback_reason:
                    continue
                if was.fallback_reason:
                    stays.append(
                        f"{now.kind} stays on its fallback {now.method}: {now.fallback_reason}"
                    )
                    continue
                kept.append(f"{now.kind}: {now.fallback_reason}")
                log.warning(
                    "%s reload failed, kept %s %s: %s",
                    _LABEL[now.kind],
                    was.method,
                    was.version or was.source,
                    now.fallback_reason,
                )
            if kept:
                error = "reload kept the served models; " + "; ".join(kept + stays)
                return _Attempt(old, False, error, tried)
            new = ModelSet(rca, placement, old.generation + 1)
            self._current = new  # the atomic swap: one reference assignment
            _log_fallbacks(new)
            error = "reload: " + "; ".join(stays) if stays else None
            return _Attempt(new, True, error, tried)

    def set_current(self, models: ModelSet) -> None:
        """Install a model set directly (tests, embedding)."""
        self._current = replace(models)

    # ------------------------------------------------------------------ RCA
    def _load_rca(self, pinned: str | None = None) -> LoadedModel:
        """The RCA model of :attr:`rca_ref` (loaded from ``pinned``, its registry version, when
        given), else the best baseline with the reason."""
        ref = self.rca_ref
        now = time.time()
        if ref and ref.startswith("baseline:"):
            analyzer = make_rca_baseline(ref.split(":", 1)[1])
            return LoadedModel("rca", analyzer, analyzer.name, None, ref, None, now)
        if not pinned and ref and _is_fit_folder(ref):
            return self._load_fitted_rca(ref, now)
        try:
            mod = importlib.import_module("fleetmind.rca.gat_analyzer")
            analyzer = mod.GATAnalyzer.load(pinned or ref)
            self._count("rca", True)
            calibration = getattr(analyzer, "meta", {}).get("calibration")
            calibrated = isinstance(calibration, dict)
            fitted_on = calibration.get("fitted_on") if calibrated else None
            if not calibrated:  # the notifier reads its top score as a probability
                log.warning(
                    "RCA model %s has no fitted temperature: its scores are not calibrated "
                    "probabilities, yet FLEETMIND_NOTIFY_CRITICAL_SCORE / _WARNING_SCORE read "
                    "them as such (fleetmind rca calibrate --write on its artifact folder)",
                    ref or "models/rca",
                )
            return LoadedModel(
                "rca",
                analyzer,
                getattr(analyzer, "name", "gat"),
                analyzer.version,
                ref or "models/rca",
                None,
                now,
                calibrated,
                fitted_on if isinstance(fitted_on, dict) else None,
            )
        except ImportError as err:
            reason = f"GAT analyzer not available (rca.gat_analyzer: {err})"
        except FleetMindError as err:
            reason = f"GAT model not loaded: {err}"
        except Exception as err:  # a broken artifact must not stop the service
            reason = f"GAT model not loaded: {type(err).__name__}: {err}"
        self._count("rca", False)
        analyzer = best_rca_baseline()
        return LoadedModel("rca", analyzer, analyzer.name, None, None, printable(reason), now)

    def _load_fitted_rca(self, ref: str, now: float) -> LoadedModel:
        """The ``gat_fit`` model of the ``fleetmind rca fit`` folder ``ref``, else the best
        baseline with the reason (a folder that cannot be loaded: another format version)."""
        try:
            analyzer = FittedProbabilityAnalyzer(FittedGATAnalyzer.load(ref))
        except FleetMindError as err:
            reason = f"fitted RCA model not loaded: {err}"
        except Exception as err:  # a broken artifact must not stop the service
            reason = f"fitted RCA model not loaded: {type(err).__name__}: {err}"
        else:
            self._count("rca", True)
            log.warning(
                "RCA model %s was fitted by 'fleetmind rca fit' on %r: its scores are a softmax "
                "over the graph's nodes, not calibrated probabilities; its causes notify as "
                "warnings only. It reads the metric detector's z_score / delta / baseline "
                "annotations; an alert without them counts as a plain alert",
                ref,
                analyzer.meta.get("graph") or "one system",
            )
            return LoadedModel(
                "rca", analyzer, analyzer.name, analyzer.version, ref, None, now, False
            )
        self._count("rca", False)
        analyzer = best_rca_baseline()
        return LoadedModel("rca", analyzer, analyzer.name, None, None, printable(reason), now)

    # ------------------------------------------------------------------ placement
    def _load_placement(self, pinned: str | None = None) -> LoadedModel:
        """The placement model of :attr:`placement_ref` (loaded from ``pinned``, its registry
        version, when given), else the best heuristic with the reason."""
        ref = self.placement_ref
        now = time.time()
        if ref and ref.startswith("heuristic:"):
            placer = make_heuristic(ref.split(":", 1)[1])
            return LoadedModel("placement", placer, placer.name, None, ref, None, now)
        try:
            mod = importlib.import_module("fleetmind.rl.policy_adapter")
            policy = mod.load_ppo_policy(pinned or ref)
            check = getattr(policy, "check_standalone", None)
            if check is not None:  # the service places without a trace: refuse what needs one
                check()
            placer = PeerPolicyPlacer(policy, name="ppo", version=_version_of(policy))
            self._count("placement", True)
            return LoadedModel(
                "placement",
                placer,
                placer.name,
                placer.version,
                ref or "models/placement",
                None,
                now,
            )
        except ImportError as err:
            reason = f"PPO policy not available (rl.policy_adapter: {err})"
        except FleetMindError as err:
            reason = f"PPO model not loaded: {err}"
        except Exception as err:
            reason = f"PPO model not loaded: {type(err).__name__}: {err}"
        self._count("placement", False)
        placer = best_heuristic()
        return LoadedModel("placement", placer, placer.name, None, None, printable(reason), now)

    def _count(self, kind: str, ok: bool) -> None:
        if self._on_load is not None:
            self._on_load(kind, ok)


_LABEL = {"rca": "RCA", "placement": "placement"}


def _is_fit_folder(ref: str) -> bool:
    """Whether ``ref`` is a local folder (or its ``config.json``) written by ``fleetmind rca fit``."""
    try:
        return is_fit_artifact(ref)
    except (OSError, ValueError):  # a path the OS refuses (too long, a NUL byte)
        return False


class FittedProbabilityAnalyzer(BaseAnalyzer):
    """A model of ``fleetmind rca fit`` (:class:`fleetmind.rca.fit_model.FittedGATAnalyzer`) as
    the service serves it: the same ranking, each score the softmax of the node's logit over
    every node of the graph it ranks (candidates sum to 1 before ``top_k`` cuts the list).

    The scores are probabilities in form only: no temperature was fitted (``calibrated:
    false``), and the method ``gat_fit`` is outside
    :data:`fleetmind.serving.notify.CALIBRATED_METHODS`, so its causes notify as warnings.
    """

    name: ClassVar[str] = "gat_fit"

    def __init__(self, fitted: Any) -> None:
        super().__init__(None)
        self.fitted = fitted
        self.meta: dict[str, Any] = dict(getattr(fitted, "meta", {}) or {})
        # (name, |V|, first id, last id) of the last graph checked against the fit's nodes
        self._checked: tuple[Any, ...] | None = None

    @property
    def version(self) -> str | None:
        return _version_of(self.fitted)

    def _check_nodes(self, graph: Any) -> None:
        """Log once per graph when few or none of its nodes are nodes the model was fitted on
        (:func:`fleetmind.rca.fit_model.fit_node_overlap`): those rank as unmonitored. Served on,
        not refused: the graph can be replaced at any time, the model is loaded once."""
        nodes = graph.nodes
        key = (
            graph.name,
            len(nodes),
            nodes[0].id if nodes else None,
            nodes[-1].id if nodes else None,
        )
        if key == self._checked:
            return
        self._checked = key
        level, message = fit_node_overlap(
            self.meta, [n.id for n in nodes], f"the served graph {graph.name!r}"
        )
        if level == "none":
            log.warning("RCA model gat_fit (every node ranks as unmonitored): %s", message)
        elif level == "few":
            log.warning("RCA model gat_fit %s", message)

    def find_root_causes(
        self, graph: Any, alerts: Sequence[dict[str, Any]], top_k: int | None = None
    ) -> RCAResult:
        """Rank every node of ``graph`` (``|V|`` nodes); scores: softmax over them, in [0, 1]."""
        self._check_nodes(graph)
        logits = np.asarray(self.fitted.scores(graph, alerts), dtype=float)
        if logits.size:
            finite = np.where(np.isfinite(logits), logits, -np.inf)
            top = finite.max() if np.isfinite(finite.max()) else 0.0
            e = np.exp(finite - top)
            total = e.sum()
            probs = e / total if total > 0 else np.full(logits.size, 1.0 / logits.size)
        else:
            probs = logits
        # the fitted model's own order (its logits), causes only for the top_k
        causes = ranked_causes(graph, logits, probs, top_k)
        return RCAResult(causes=causes, method=self.name, model_version=self.version)


def _log_fallbacks(models: ModelSet) -> None:
    """Log each model of a set now served that is a fallback, with the reason."""
    for m in (models.rca, models.placement):
        if m.fallback_reason:
            log.warning("%s falls back to %s: %s", _LABEL[m.kind], m.method, m.fallback_reason)


@dataclass(frozen=True)
class _Attempt:
    """The outcome of one reload: the set served after it, whether it was swapped in, why the
    reload did not fully succeed (one line, ``None``: it did), and the registry versions it
    loaded (:func:`_pins`)."""

    models: ModelSet
    swapped: bool
    error: str | None
    pins: dict[str, Any]


def _pins(loaded: dict[str, tuple[str | None, LoadedModel]]) -> dict[str, Any]:
    """``{kind: {"ref": ref, "pinned": "models:/<name>/<version>"}}`` for each model loaded from a
    registry alias (``models:/<name>@<alias>``), whose version the loader reports as
    ``<name>/<version>`` (it resolved the alias once: :func:`fleetmind.data.mlflow_store.download`)."""
    out: dict[str, Any] = {}
    for kind, (ref, m) in loaded.items():
        if not ref or not ref.startswith("models:/") or "@" not in ref or m.fallback_reason:
            continue
        name, _, number = (m.version or "").rpartition("/")
        if name and number.isdigit():
            out[kind] = {"ref": ref, "pinned": f"models:/{name}/{number}"}
    return out


def _pinned(pins: dict[str, Any] | None, kind: str, ref: str | None) -> str | None:
    """The registry URI a reload record pins for ``kind``, when it was resolved from ``ref``
    (this process's own reference), else ``None``: load ``ref`` itself."""
    pin = (pins or {}).get(kind)
    if not isinstance(pin, dict) or pin.get("ref") != ref:
        return None
    uri = pin.get("pinned")
    return uri if isinstance(uri, str) and uri.startswith("models:/") else None


_MODEL_OF = {"rca": "the GAT", "placement": "the PPO model"}


def fallback_warnings(models: ModelSet) -> list[str]:
    """One line per model of ``models`` served by a fallback, for ``/readyz``'s ``warnings``:
    the service is ready (it ingests and answers) but not with its model.

    The line names the fallback and why in words, not the reason's text, which names files and
    registry URIs (``/readyz`` answers without a token): ``GET /api/v1/models`` and the log give
    it in full."""
    out = []
    for m in (models.rca, models.placement):
        if not m.fallback_reason:
            continue
        why = "is not installed" if "not available" in m.fallback_reason else "failed to load"
        out.append(
            f"{m.kind}: serving the fallback {m.method}, because {_MODEL_OF[m.kind]} {why} "
            "(the reason: fallback_reason of GET /api/v1/models, and the service log)"
        )
    return out


def _version_of(obj: Any) -> str | None:
    v = getattr(obj, "version", None)
    return None if v is None else str(v)


# ---------------------------------------------------------------------- baselines and heuristics
def _peer_baselines() -> dict[str, type[BaseAnalyzer]]:
    """Analyzer classes of ``rca.baselines`` by name."""
    out: dict[str, type[BaseAnalyzer]] = {}
    for obj in vars(baselines).values():
        if isinstance(obj, type) and issubclass(obj, BaseAnalyzer) and obj is not BaseAnalyzer:
            name = getattr(obj, "name", None)
            if isinstance(name, str) and name != "base":
                out[name.lower()] = obj
    return out


def make_rca_baseline(name: str) -> BaseAnalyzer:
    """Build the baseline ``name``: a peer baseline from ``rca.baselines`` or ``upstream-coverage``."""
    key = name.strip().lower()
    if key in ("upstream-coverage", "builtin"):
        return UpstreamCoverageAnalyzer()
    peers = _peer_baselines()
    if key in peers:
        return peers[key]()
    known = sorted([*peers, "upstream-coverage"])
    raise ConfigError(f"unknown RCA baseline {name!r}; known: {', '.join(known)}")


def best_rca_baseline() -> BaseAnalyzer:
    """The preferred available baseline: a peer one in RCA_BASELINE_PREFERENCE order, else built-in."""
    peers = _peer_baselines()
    for name in RCA_BASELINE_PREFERENCE:
        if name in peers:
            try:
                return peers[name]()
            except Exception:  # pragma: no cover - a peer constructor that needs arguments
                continue
    return UpstreamCoverageAnalyzer()


def make_heuristic(name: str) -> Placer:
    """Build the placement heuristic ``name`` (``bestfit`` built in; others from ``envs.policies``)."""
    key = name.strip().lower().replace("_", "").replace("-", "")
    if key in ("builtinbestfit", "builtin"):
        return BestFitPlacer()

    placer = peer_heuristic(name)
    if placer is None:
        if key == "bestfit":
            return BestFitPlacer()
        raise ConfigError(f"unknown placement heuristic {name!r}")
    return placer


def best_heuristic() -> Placer:
    """The best available heuristic (BestFit from ``envs.policies``, else the built-in one)."""

    for name in ("BestFit",):
        placer = peer_heuristic(name)
        if placer is not None:
            return placer
    return BestFitPlacer()
