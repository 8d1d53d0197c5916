"""A reload request racing a stale follow-up of an older reload generation.

With ``--workers 2`` a worker idle for longer than the follow interval starts its background
follow-up (:meth:`ModelRegistry.sync`) when a reload request reads its models; the follow-up read
the older generation and its pinned version, then waited for the reload lock while the request
loaded the alias's new version and recorded a newer generation; the follow-up then swapped the
stale pinned version in, so the worker served another version than the others for good (and the
200 answer named a model that was replaced at once). The follow-up and the request are now one
read-decide-reload at a time, and a reload no longer starts a follow-up itself.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from fleetmind.serving.registry import LoadedModel, ModelRegistry

ALIAS = "models:/fleetmind-rca@champion"
WAIT_S = 30.0  # an upper bound only, never reached when the code is right


class FakeDB:
    """The two calls of ``Database`` the registry follows with (generation, ts, pins)."""

    def __init__(self) -> None:
        self.generation = 1
        self.pins: dict[str, Any] = {"rca": {"ref": ALIAS, "pinned": "models:/fleetmind-rca/3"}}
        self.read = threading.Event()

    def model_reload_record(self) -> tuple[int, float, dict[str, Any]]:
        self.read.set()
        return self.generation, 1e12, self.pins

    def request_model_reload(self, now: float, pins: dict[str, Any] | None = None) -> int:
        self.generation += 1
        self.pins = pins or {}
        return self.generation


class SpyLock:
    """A lock that signals when the thread named ``watch`` tries to take it."""

    def __init__(self, watch: str) -> None:
        self._lock = threading.Lock()
        self.watch = watch
        self.tried = threading.Event()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if threading.current_thread().name == self.watch:
            self.tried.set()
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _registry(alias_version: str) -> ModelRegistry:
    reg = ModelRegistry(rca_ref=ALIAS, placement_ref="heuristic:best_fit")

    def load_rca(pinned: str | None = None) -> LoadedModel:
        version = f"fleetmind-rca/{pinned.rsplit('/', 1)[1]}" if pinned else alias_version
        return LoadedModel("rca", object(), "gat", version, pinned or ALIAS, None, time.time())

    def load_placement(pinned: str | None = None) -> LoadedModel:
        return LoadedModel("placement", object(), "best_fit", None, None, None, time.time())

    reg._load_rca = load_rca  # type: ignore[method-assign]
    reg._load_placement = load_placement  # type: ignore[method-assign]
    reg.load()
    return reg


def test_stale_follow_up_never_replaces_a_newer_reload() -> None:
    """The follow-up read generation 1 (pinned version 3) before the request (alias now at
    version 1) records generation 2: the worker ends on version 1, the version it answered."""
    reg = _registry("fleetmind-rca/1")
    db = FakeDB()
    reg.db = db  # type: ignore[assignment]
    reg.reload_generation = 0  # this worker has not taken up generation 1 yet
    spy = SpyLock("request")
    reg._follow_lock = spy  # type: ignore[assignment]
    real_reload = reg._reload
    request_done = threading.Event()

    def follow_up_reload(pins: dict[str, Any] | None) -> Any:
        if threading.current_thread().name == "follow-up":
            # the follow-up has read generation 1: let the request run as far as it can
            while not (request_done.is_set() or spy.tried.is_set()):
                request_done.wait(0.01)
        return real_reload(pins)

    reg._reload = follow_up_reload  # type: ignore[method-assign]
    answered: dict[str, Any] = {}

    def request() -> None:
        answered["generation"], answered["models"] = reg.request_reload()
        request_done.set()

    follow_up = threading.Thread(target=reg.sync, name="follow-up")
    follow_up.start()
    assert db.read.wait(WAIT_S)  # the follow-up has read generation 1
    req = threading.Thread(target=request, name="request")
    req.start()
    follow_up.join(WAIT_S)
    req.join(WAIT_S)
    assert not follow_up.is_alive() and not req.is_alive()

    assert answered["models"].rca.version == "fleetmind-rca/1"
    assert reg._current is not None and reg._current.rca.version == "fleetmind-rca/1"
    assert reg.reload_generation == db.generation == 2
    assert reg.sync() is None  # nothing left to take up: the worker stays on version 1


def test_reload_starts_no_follow_up() -> None:
    """A reload reads the served set directly: it never starts a background follow-up."""
    reg = _registry("fleetmind-rca/1")
    reg.db = FakeDB()  # type: ignore[assignment]
    reg._next_check = 0.0  # a follow-up is due at the next read of ``current``
    started: list[bool] = []
    reg._check_in_background = lambda: started.append(True)  # type: ignore[method-assign]
    reg.reload()
    assert started == []
    reg.current  # noqa: B018 - a request's read does start one
    assert started == [True]
