"""Two processes promoting versions of one model at once end with the better one as champion, and
each reports what really holds the alias (training/tracking.py ``promote_if_better``; docs/gat.md,
"Training").

MLflow's alias write simply overwrites (``set_registered_model_alias`` merges the alias row,
mlflow/store/model_registry/sqlalchemy_store.py), so a read-compare-set without a lock let two
promotions both read the old champion, both move the alias, and the last writer, possibly the
worse version, keep it. Threads stand in for the processes here, each with its own client, and
hooks around the two registry calls force the interleaving that lost: both read the champion
before either moves it, and the worse one moves it last.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tracking_helpers import FakeRegistry

from fleetmind.training.tracking import CHAMPION, Promotion, promote_if_better

Hook = Callable[[], None]
WAIT = 10.0  # seconds: a hook that waits longer means the interleaving did not happen


class Scripted:
    """A registry client whose ``get_model_version_by_alias`` / ``set_registered_model_alias``
    calls run hooks: ``before[(method, n)]`` and ``after[(method, n)]`` around its n-th call."""

    def __init__(
        self, inner: Any, before: dict[tuple[str, int], Hook], after: dict[tuple[str, int], Hook]
    ) -> None:
        self._inner, self._before, self._after = inner, before, after
        self._calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name not in ("get_model_version_by_alias", "set_registered_model_alias"):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            n = self._calls[name]
            self._calls[name] += 1
            self._before.get((name, n), lambda: None)()
            try:
                return attr(*args, **kwargs)
            finally:
                self._after.get((name, n), lambda: None)()

        return call


def _barrier_wait(barrier: threading.Barrier, timeout: float) -> Hook:
    """Wait at ``barrier``; a broken or timed-out barrier (the other thread is held off by the
    store's lock) lets the caller go on."""

    def hook() -> None:
        try:
            barrier.wait(timeout)
        except threading.BrokenBarrierError:
            pass

    return hook


def _waits(event: threading.Event) -> Hook:
    def hook() -> None:
        assert event.wait(WAIT), "the forced interleaving did not happen"

    return hook


def _race(
    a: Scripted,
    b: Scripted,
    version_a: str,
    version_b: str,
    a_done: threading.Event | None = None,
    a_read: threading.Event | None = None,
) -> dict[str, Promotion]:
    """Promote ``version_a`` (score 0.9) through ``a`` and ``version_b`` (0.5) through ``b`` at
    once (``a_done`` set once ``a``'s promotion returned; ``b`` started once ``a_read`` is set);
    their promotions."""
    out: dict[str, Any] = {}

    def run(key: str, client: Scripted, version: str, score: float) -> None:
        try:
            out[key] = promote_if_better(
                client, "m", version, tag="s", score=score, higher_is_better=True
            )
        except BaseException as err:  # reported by the assertion below
            out[key] = err
        finally:
            if key == "a" and a_done is not None:
                a_done.set()

    threads = [
        threading.Thread(target=run, args=("a", a, version_a, 0.9)),
        threading.Thread(target=run, args=("b", b, version_b, 0.5)),
    ]
    threads[0].start()
    if a_read is not None:  # b starts once a has read the champion
        assert a_read.wait(WAIT)
    threads[1].start()
    for t in threads:
        t.join(3 * WAIT)
    assert all(isinstance(v, Promotion) for v in out.values()) and len(out) == 2, out
    return out


def test_on_an_sqlite_store_promotions_take_turns(tmp_path: Path) -> None:
    """Both read the champion, then the worse version moves the alias last: on the store's lock
    the second promotion reads the first's result instead, and the better version stays champion."""
    import mlflow

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    setup = mlflow.MlflowClient(uri, registry_uri=uri)
    setup.create_registered_model("m")
    for i in range(3):
        setup.create_model_version("m", source=str(tmp_path / f"v{i}"))
    setup.set_model_version_tag("m", "1", "s", "0.100000")
    setup.set_registered_model_alias("m", CHAMPION, "1")

    both_read = threading.Barrier(2)
    a_set, a_read = threading.Event(), threading.Event()
    read = ("get_model_version_by_alias", 0)

    def a_has_read() -> None:
        a_read.set()
        _barrier_wait(both_read, 3.0)()

    a = Scripted(
        mlflow.MlflowClient(uri, registry_uri=uri),
        before={},
        after={read: a_has_read, ("set_registered_model_alias", 0): a_set.set},
    )
    b = Scripted(
        mlflow.MlflowClient(uri, registry_uri=uri),
        before={("set_registered_model_alias", 0): _waits(a_set)},
        after={read: _barrier_wait(both_read, 3.0)},
    )
    out = _race(a, b, "2", "3", a_read=a_read)  # a takes the lock first
    assert out["a"] == Promotion(True, "1")
    assert out["b"] == Promotion(False, "2")  # compared with version 2, not the old champion
    assert str(setup.get_registered_model("m").aliases[CHAMPION]) == "2"


def test_on_any_store_the_alias_is_read_again_and_won_back() -> None:
    """A tracking server has no lock: both read the old champion and both move the alias, the
    worse last. The better one, reading the alias again, finds it moved, compares, and moves it
    back; the worse one, reading it again afterwards, reports that it is not the champion."""
    reg = FakeRegistry()
    reg.set_model_version_tag("m", "1", "s", "0.100000")
    reg.alias = "1"
    both_read, a_set, b_set, a_done = (threading.Barrier(2),) + tuple(
        threading.Event() for _ in range(3)
    )
    get, put = "get_model_version_by_alias", "set_registered_model_alias"
    a = Scripted(
        reg,
        before={(get, 1): _waits(b_set)},
        after={(get, 0): _barrier_wait(both_read, WAIT), (put, 0): a_set.set},
    )
    b = Scripted(
        reg,
        before={(put, 0): _waits(a_set), (get, 1): _waits(a_done)},
        after={(get, 0): _barrier_wait(both_read, WAIT), (put, 0): b_set.set},
    )

    out = _race(a, b, "2", "3", a_done=a_done)
    assert out["a"] == Promotion(True, "1")
    assert out["b"] == Promotion(False, "2")  # says which version holds the alias
    assert reg.alias == "2"
