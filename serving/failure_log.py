"""Logging for a loop that retries (the notifier, the incident worker): a database outage logs
one traceback, not one a second; and for the API requests that fail on the database
(:class:`RequestFailureLog`): one line, then one a minute at most per server process, with a
count."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Hashable

from sqlalchemy.exc import DBAPIError

from fleetmind.serving.db import is_input_error
from fleetmind.serving.metrics import HTTP_METHODS


class FailureLog:
    """Logs a retried loop's failures without flooding the log while, say, the database restarts.

    The first failure of a run (and the first of each other exception class in it) is logged with
    its traceback; later ones of a class already shown add one line at most every ``every_s``
    seconds, with how many failed since; the first success after failures logs one INFO line
    saying how long it failed (``"the database is reachable again after 4.2 s"`` when a database
    error was among them). The incident worker and the notifier each keep one.

    Args:
        logger: where the lines go.
        what: what failed, as the log names it (``"notifier"``).
        every_s: least seconds between two lines about failures already shown.
        clock: monotonic seconds (tests pass a fake one).
    """

    def __init__(
        self,
        logger: logging.Logger,
        what: str,
        every_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger, self.what, self.every_s, self.clock = logger, what, every_s, clock
        self._since: float | None = None  # when the current run of failures began
        self._shown: set[str] = set()  # exception classes of this run already logged in full
        self._last_line = 0.0  # when a line about this run was last logged
        self._count = 0  # failures of this run
        self._quiet = 0  # failures since the last line
        self._database = False  # whether a database error was among them

    def failed(self, err: BaseException) -> None:
        """Log failure ``err`` of the loop (or count it, when one like it was just logged)."""
        now, kind = self.clock(), type(err).__name__
        if self._since is None:
            self._since, self._count, self._quiet = now, 0, 0
        self._count += 1
        self._database = self._database or isinstance(err, DBAPIError)
        if kind not in self._shown:
            self._shown.add(kind)
            self._last_line, self._quiet = now, 0
            self.logger.error("%s failed; retrying", self.what, exc_info=err)
            return
        self._quiet += 1
        if not 0 <= now - self._last_line < self.every_s:
            first = (str(err).strip().splitlines() or [""])[0]
            self.logger.error(
                "%s still failing (%s: %s): %d failures in the last %.0f s, %d since %.0f s ago",
                self.what,
                kind,
                first,
                self._quiet,
                now - self._last_line,
                self._count,
                now - self._since,
            )
            self._last_line, self._quiet = now, 0

    def succeeded(self) -> None:
        """Note a loop that ran without error: one line when it ends a run of failures."""
        if self._since is None:
            return
        took = self.clock() - self._since
        again = "the database is reachable again" if self._database else "works again"
        self.logger.info(  # a recovery, as "refreshing works again" and "answers again" are
            "%s: %s after %.1f s (%d failed attempt%s)",
            self.what,
            again,
            took,
            self._count,
            "" if self._count == 1 else "s",
        )
        self._since, self._shown, self._database = None, set(), False

    def forget(self) -> None:
        """End the current run of failures without a line: the loop stopped running here (the
        notifier of a process that lost the leader lock), so no later success, perhaps hours
        on, reports a recovery of it."""
        self._since, self._shown, self._database = None, set(), False


def first_line(err: BaseException) -> str:
    """The first line of the driver's message of ``err`` (``err.orig`` for a SQLAlchemy error),
    without SQLAlchemy's ``[SQL: ...]``, ``[parameters: ...]`` and ``(Background on this error
    ...)`` lines, so never a value of the request (at most 200 characters)."""
    cause = getattr(err, "orig", None) or err
    text = (str(cause).strip().splitlines() or [""])[0].strip()
    return text if len(text) <= 200 else text[:199] + "…"


class LineThrottle:
    """At most one log line per key every ``every_s`` seconds, counting the events in between
    (thread-safe; the keys are few: a route, status and error class, say).

    Args:
        every_s: least seconds between two lines about one key.
        clock: monotonic seconds (tests pass a fake one).
    """

    def __init__(self, every_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.every_s, self.clock = every_s, clock
        self._last: dict[Hashable, float] = {}  # key -> when its last line was logged
        self._quiet: dict[Hashable, int] = {}  # key -> events since that line
        self._lock = threading.Lock()

    def due(self, key: Hashable) -> tuple[int, float] | None:
        """``None`` while ``key``'s last line is younger than ``every_s`` (the event is counted);
        else ``(events counted since that line, its age in seconds)``, ``(0, 0.0)`` for a first
        line, and the line is taken as logged now."""
        with self._lock:
            now, last = self.clock(), self._last.get(key)
            if last is not None and 0 <= now - last < self.every_s:
                self._quiet[key] = self._quiet.get(key, 0) + 1
                return None
            quiet, self._quiet[key], self._last[key] = self._quiet.get(key, 0), 0, now
        return quiet, (now - last if last is not None else 0.0)


class RequestFailureLog:
    """Logs the requests that failed on an unavailable database as one line each, and while the
    failures go on, one line at most every ``every_s`` seconds per exception class, with how many
    failed since (the request path's counterpart of :class:`FailureLog`): a database outage
    under load is then a few lines a minute, not several lines per request.

    A line names the exception class, the first line of the driver's message
    (:func:`first_line`), the method and the route template (``/api/v1/incidents/{incident_id}``),
    never the SQL or its parameters, and the ID of the process that logs it: the throttle is per
    server process, so ``fleetmind serve --workers N`` logs up to N such lines a minute, one per
    worker (``database error on GET /api/v1/incidents: OperationalError: connection refused
    (worker pid 1234; 412 more failed like it in the last 60 s)``).

    Args:
        logger: where the lines go.
        every_s: least seconds between two lines about one exception class.
        clock: monotonic seconds (tests pass a fake one).
    """

    def __init__(
        self,
        logger: logging.Logger,
        every_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self._throttle = LineThrottle(every_s, clock)  # per exception class

    def failed(self, err: BaseException, method: str, route: str) -> None:
        """Log (or count) the failure ``err`` of a ``method`` request to ``route``."""
        kind = type(err).__name__
        if (seen := self._throttle.due(kind)) is None:
            return
        quiet, age = seen
        since = f"; {quiet} more failed like it in the last {age:.0f} s" if quiet else ""
        self.logger.error(
            "database error on %s %s: %s: %s (worker pid %d%s)",
            method,
            route,
            kind,
            first_line(err),
            os.getpid(),
            since,
        )

    def answer(self, err: BaseException, method: str, route: str) -> tuple[int, str]:
        """The status and ``detail`` of a request that failed on the database with ``err``, the
        failure logged: a value the database refused (:func:`fleetmind.serving.db.is_input_error`)
        is the client's input, a 422 and one warning; anything else (an outage, a table gone) a
        503 through :meth:`failed` (a method outside the usual ones is named ``other``)."""
        if is_input_error(err):
            reason = type(getattr(err, "orig", None) or err).__name__
            self.logger.warning("database refused a value: %s", reason)
            return 422, f"the database refused a value of this request ({reason})"
        self.failed(err, method if method in HTTP_METHODS else "other", route)
        if method in ("GET", "HEAD"):  # a read stores nothing: say only what failed
            return 503, "database unavailable; try again"
        return 503, "database unavailable; nothing was stored"
