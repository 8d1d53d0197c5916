"""The analyzer interface shared by the GAT ranker and every baseline (PyRCA-style).

An analyzer pairs a config dataclass (``config_class``) with :meth:`BaseAnalyzer.find_root_causes`,
which takes a dependency graph and the alerts of one incident (Alertmanager v4 alert dicts) and returns an
:class:`RCAResult`: candidate root-cause nodes ranked by descending score, each with the propagation
path that explains it. The service, the CLI and the benchmarks only use this interface.
"""

from __future__ import annotations

import contextlib
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from fleetmind.data.graph import DependencyGraph


@dataclass(frozen=True)
class RankedCause:
    """One candidate root cause.

    Attributes:
        node: graph node id.
        kind: node kind (``gpu``, ``host``, ``service``, ...).
        cluster: the node's cluster, ``None`` for global infra.
        score: ranking score, higher is more likely (comparable within one result only).
        fault_type: predicted fault type, ``None`` when the method does not predict one.
        path: node ids from this cause to an alerting node along which the fault propagated
            (``[node]`` alone when the cause itself alerts or no path is known).
    """

    node: str
    kind: str
    cluster: str | None
    score: float
    fault_type: str | None = None
    path: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "kind": self.kind,
            "cluster": self.cluster,
            "score": float(self.score),
            "fault_type": self.fault_type,
            "path": list(self.path),
        }


@dataclass
class RCAResult:
    """Ranked root causes of one incident, best first, plus which method/version produced them."""

    causes: list[RankedCause]
    method: str
    model_version: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def ranked_nodes(self) -> list[str]:
        return [c.node for c in self.causes]


class BaseAnalyzer(ABC):
    """Base class of root-cause analyzers.

    Subclasses set ``name`` and ``config_class`` and take only their config in ``__init__``.
    """

    name: ClassVar[str] = "base"
    config_class: ClassVar[type] = object

    def __init__(self, config: Any | None = None) -> None:
        self.config = config if config is not None else self.config_class()

    @property
    def version(self) -> str | None:
        """Model version for trained analyzers; ``None`` for fixed heuristics."""
        return None

    def train(  # noqa: B027 - optional hook, heuristics need no training
        self, incidents: Sequence[dict[str, Any]], graphs: dict[str, DependencyGraph]
    ) -> None:
        """Fit on incidents (dicts of the dataset contract); heuristics need nothing."""

    @abstractmethod
    def find_root_causes(
        self, graph: DependencyGraph, alerts: Sequence[dict[str, Any]], top_k: int | None = None
    ) -> RCAResult:
        """Rank root-cause candidates for one incident.

        Args:
            graph: the dependency graph the alerts refer to.
            alerts: Alertmanager v4 alert objects (``labels``, ``startsAt``, ...).
            top_k: keep only the best ``top_k`` causes (all nodes when ``None``).
        """


_THREADS_LOCK = threading.Lock()
_threads_depth = 0
_threads_saved = 0


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run torch on ``n`` intra-op threads inside the block, and give the process its own number
    back after the last of overlapping blocks (from any thread) ends.

    ``torch.set_num_threads`` is process-wide: two threads that each saved and restored it around
    their own call left the process at the other's temporary value (1) for good. Overlapping
    blocks share the first one's ``n``.
    """
    global _threads_depth, _threads_saved
    import torch

    with _THREADS_LOCK:
        if _threads_depth == 0:
            _threads_saved = torch.get_num_threads()
            torch.set_num_threads(n)
        _threads_depth += 1
    try:
        yield
    finally:
        with _THREADS_LOCK:
            _threads_depth -= 1
            if _threads_depth == 0:
                torch.set_num_threads(_threads_saved)
