"""``fleetmind serve``: run the inference service (FastAPI on uvicorn) on the embedded defaults.

Options override the matching ``FLEETMIND_*`` environment variables (see ``docs/serving/settings.md``).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
from collections.abc import Iterator
from typing import Any

from fleetmind.data.errors import ConfigError
from fleetmind.http_client import check_proxies
from fleetmind.redact import safe_uri

_ENV_OPTIONS = {
    "graph": "FLEETMIND_GRAPH",
    "database_url": "FLEETMIND_DATABASE_URL",
    "telemetry": "FLEETMIND_TELEMETRY",
    "host": "FLEETMIND_BIND_HOST",
    "prometheus_url": "FLEETMIND_PROMETHEUS_URL",
    "rca_model": "FLEETMIND_RCA_MODEL",
    "placement_model": "FLEETMIND_PLACEMENT_MODEL",
    "rca_processes": "FLEETMIND_RCA_PROCESSES",
    "keep_warm": "FLEETMIND_KEEP_WARM_S",
}


MAX_WORKERS = 256
"""The most worker processes ``fleetmind serve --workers`` (or ``FLEETMIND_WORKERS``) starts: each
is a full copy of the service (models, database pool), so more than a few per core only adds
memory; a larger value is a typo (``--workers 10^20`` began starting that many processes)."""


SIGHUP_NOTE = (
    "SIGHUP received: ignored (FleetMind reloads nothing on SIGHUP; models: POST "
    "/api/v1/models/reload; the graph: FLEETMIND_GRAPH_REFRESH_S; settings: a restart)"
)


def _ignore_sighup() -> None:
    """Log and ignore SIGHUP in a single-process server. Its default action ends the process at
    once, dropping the requests in flight (a systemd ``ExecReload=kill -HUP`` was an outage);
    with ``--workers N`` uvicorn's supervisor handles SIGHUP itself (it restarts the workers)."""
    import logging
    import signal

    def note(_signum: int, _frame: Any) -> None:
        logging.getLogger("fleetmind.serving").warning(SIGHUP_NOTE)

    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, note)


class _Terminated(SystemExit):
    """SIGTERM, raised where the process was (:func:`_cleanup_on_sigterm`)."""


@contextlib.contextmanager
def _cleanup_on_sigterm(active: bool) -> Iterator[None]:
    """While the block runs, let SIGTERM unwind it (its ``finally`` removes the metrics directory)
    before the signal ends the process, by the signal as before (status 143 in a shell).

    uvicorn's single-process server puts the handler it found back after its graceful shutdown
    and raises the signal again (``Server.capture_signals`` in ``uvicorn/server.py``): left to its
    default action, that ended the process inside ``uvicorn.run``, and the ``finally`` after it
    never ran. Installed only when ``active`` and SIGTERM has its default action in the main
    thread: as PID 1, :func:`fleetmind.cli.runner._end_serve_as_pid1` already ends the command
    by ``SystemExit`` (status 143); uvicorn's ``--workers`` supervisor replaces the handler and
    returns after SIGTERM."""
    import signal
    import threading

    if (
        not active
        or threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    ):
        yield
        return

    def stop(signum: int, _frame: Any) -> None:
        raise _Terminated(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    try:
        yield
    except _Terminated:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.raise_signal(signal.SIGTERM)  # ends the process (PID 1 ignores it: status 143)
        raise
    finally:
        if signal.getsignal(signal.SIGTERM) is stop:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


def register(subparsers: argparse._SubParsersAction, name: str, help_text: str) -> None:
    p = subparsers.add_parser(name, help=help_text, description=help_text)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="TCP port (default: 8000)")
    p.add_argument(
        "--insecure",
        action="store_true",
        help="allow a non-loopback --host without any FLEETMIND_*_TOKEN (anyone who reaches the "
        "port can then read, ingest and replace the graph)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="uvicorn worker processes, each with its own models and ranking thread "
        "(default: FLEETMIND_WORKERS or 1; about one per core for RCA throughput)",
    )
    p.add_argument(
        "--rca-processes",
        type=int,
        default=None,
        help="ranking processes for POST /api/v1/rca, fed request by request "
        "(default: FLEETMIND_RCA_PROCESSES or 0, ranking in the server process)",
    )
    p.add_argument(
        "--keep-warm",
        type=float,
        default=None,
        metavar="SECONDS",
        help="keep the CPUs busy at idle priority until SECONDS after the last request, so a VM's "
        "vCPUs do not halt between requests (default: FLEETMIND_KEEP_WARM_S or 0, off)",
    )
    p.add_argument("--graph", help="dependency graph JSON (default: the committed example graph)")
    p.add_argument(
        "--database-url", help="SQLAlchemy URL (default: sqlite:///fleetmind.db, WAL mode)"
    )
    p.add_argument(
        "--telemetry",
        choices=["sim", "nvml", "prometheus"],
        help="where the fleet's GPU state comes from: sim (a simulated fleet, the default), nvml "
        "(this host's GPUs) or prometheus (dcgm-exporter and kube-state-metrics series; see "
        "--prometheus-url); default: FLEETMIND_TELEMETRY or sim",
    )
    p.add_argument(
        "--prometheus-url",
        help="needs --telemetry prometheus (refused without it): the Prometheus server (e.g. "
        "http://prometheus:9090), queried "
        "for every node's dcgm-exporter and kube-state-metrics series; a URL ending in /metrics "
        "reads one dcgm-exporter directly",
    )
    p.add_argument("--rca-model", help="RCA model: path, MLflow URI, or baseline:<name>")
    p.add_argument(
        "--placement-model", help="placement model: path, MLflow URI, or heuristic:<name>"
    )
    p.add_argument(
        "--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"]
    )
    p.set_defaults(func=run)


PUBLIC_URL = "FLEETMIND_PUBLIC_URL"
"""Unset, ``fleetmind serve`` sets it to ``http://<--host>:<--port>`` (``https://`` with
``FLEETMIND_TLS_CERT``; 127.0.0.1 for a wildcard host,
:func:`fleetmind.serving.settings.default_public_url`) for itself and its workers."""


def _notifies(settings: Any) -> bool:
    """Whether settled root causes are sent out (an Alertmanager or a webhook is configured)."""
    return bool(settings.notify_alertmanager_url or settings.notify_webhook_url)


def _from_env(name: str) -> bool:
    """Whether the variable ``name`` is set (the settings read names case-insensitively:
    :func:`fleetmind.serving.settings.env_value`)."""
    from fleetmind.serving.settings import env_value

    return env_value(name) is not None


def _own_tls() -> bool:
    """Whether ``FLEETMIND_TLS_CERT`` is set to a file (the service then serves HTTPS itself)."""
    from fleetmind.serving.settings import env_value

    return bool(env_value("FLEETMIND_TLS_CERT"))


SECRET_SUFFIXES = ("_TOKEN", "_SECRET", "_PASSWORD")
"""Settings whose values are never printed: an error names the variable and the rule only."""
SECRET_SETTINGS = frozenset({"FLEETMIND_NOTIFY_WEBHOOK_URL", "FLEETMIND_PROMETHEUS_HEADERS"})
"""Secrets by another name: a Slack or receiver webhook URL carries its secret in the path; extra
Prometheus headers may carry an ``Authorization`` or API key."""


def shown_setting(name: str, value: object) -> str:
    """How a setting error shows ``FLEETMIND_<NAME>=value``: a secret (:data:`SECRET_SUFFIXES`,
    :data:`SECRET_SETTINGS`) as ``(value hidden)``, any other value with the credentials of the
    URLs in it masked (:func:`fleetmind.redact.safe_uri`)."""
    if name.endswith(SECRET_SUFFIXES) or name in SECRET_SETTINGS:
        return f"{name} (value hidden)"
    if name == PUBLIC_URL and "@" in str(value):
        # its only @ refusal is a user part, which safe_uri does not mask when it holds whitespace
        return f"{name} (value hidden: it holds a user name or password)"
    if name == "FLEETMIND_DATABASE_URL":
        from fleetmind.serving.settings import database_url_problem

        if database_url_problem(str(value)) is not None:
            # the mask ends at the last @ of a run without whitespace: a password holding an @
            # and a space would show its tail
            return f"{name} (value hidden: it holds a password)"
    return f"{name}={safe_uri(repr(value))}"


def _settings_error(err: Any) -> str:
    """One line naming every bad ``FLEETMIND_*`` variable, its value and what is wrong with it.

    ``err``: pydantic's ``ValidationError`` from ``Settings()``; each error's location is the
    field name, whose variable is ``FLEETMIND_<NAME>``. Each variable the line names, including
    one a check compares with (``FLEETMIND_NOTIFY_CRITICAL_SCORE=0.2`` in the warning score's
    message), says whether it came from the environment or is the default, so that the line does
    not blame a variable the operator never set.
    """
    import re

    from fleetmind.serving.settings import env_value

    def source(match: re.Match[str]) -> str:
        return f"{match[0]} ({'from the environment' if _from_env(match[1]) else 'default'})"

    parts = []
    for e in err.errors(include_url=False):
        name = "FLEETMIND_" + "_".join(str(p) for p in e.get("loc", ())).upper()
        value = env_value(name)
        value = e.get("input") if value is None else value
        msg = re.sub(r"\b(FLEETMIND_[A-Z0-9_]+)=[^\s,;]+", source, str(e.get("msg", "invalid")))
        msg = safe_uri(msg)
        shown = shown_setting(name, value)
        if not _from_env(name):
            shown += " (default)"
        parts.append(f"{shown}: {msg}")
    return "invalid setting " + "; ".join(parts)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or a name) binds only the loopback interface (the rule the
    service's DNS-rebinding check uses too: :func:`fleetmind.serving.origin_guard.binds_loopback`)."""
    from fleetmind.serving.origin_guard import binds_loopback

    return binds_loopback(host)


def bind_host(host: str) -> str:
    """``--host`` as uvicorn must get it: without surrounding spaces
    and one pair of brackets (``[::1]`` -> ``::1``; uvicorn passes the value to ``getaddrinfo``,
    which reads no brackets), so the checks, ``FLEETMIND_BIND_HOST`` and the server see one
    address."""
    host = host.strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1].strip()
    return host


def bind_error(host: str, port: int) -> OSError | None:
    """Why a server could not listen on ``host``:``port`` now (``None``: it can), found by binding
    a socket there and closing it again, with ``SO_REUSEADDR`` as uvicorn binds (so a port that
    only has connections in TIME_WAIT counts as free)."""
    import socket

    try:
        infos = socket.getaddrinfo(
            host.strip("[]") or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except OSError as err:
        return err
    family, kind, proto, _, addr = infos[0]
    try:
        with socket.socket(family, kind, proto) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(addr)
    except OSError as err:
        return err
    return None


def _check_port(host: str, port: int) -> None:
    """Raise :class:`ConfigError` (one line) when the server could not listen on ``host``:``port``:
    before the database is migrated, not uvicorn's ``[Errno 98]`` log line after it."""
    import errno

    err = bind_error(host, port)
    if err is None:
        return
    if err.errno == errno.EADDRINUSE:
        raise ConfigError(f"port {port} on {host} is in use (pick another with --port)")
    raise ConfigError(f"cannot listen on {host} port {port}: {err.strerror or err}")


def _check_model_refs(settings: Any) -> None:
    """Raise :class:`ConfigError` (one line naming the variable and the known names) when
    ``FLEETMIND_RCA_MODEL`` is ``baseline:<name>`` or ``FLEETMIND_PLACEMENT_MODEL`` is
    ``heuristic:<name>`` with a name the server's startup could not build (it raised there, in
    uvicorn's lifespan: a traceback and uvicorn's exit status)."""
    from fleetmind.envs.policies import POLICIES
    from fleetmind.serving.registry import make_heuristic, make_rca_baseline

    rca, placement = settings.rca_model, settings.placement_model
    if rca and rca.startswith("baseline:"):
        try:
            make_rca_baseline(rca.split(":", 1)[1])
        except ConfigError as err:  # its message lists the known baselines
            raise ConfigError(f"FLEETMIND_RCA_MODEL={rca!r} (--rca-model): {err}") from None
    if placement and placement.startswith("heuristic:"):
        name = placement.split(":", 1)[1]
        try:
            make_heuristic(name)
        except ConfigError:
            known = ", ".join(sorted({*POLICIES, "builtin"}, key=str.lower))
            raise ConfigError(
                f"FLEETMIND_PLACEMENT_MODEL={placement!r} (--placement-model): unknown placement "
                f"heuristic {name!r}; known: {known}"
            ) from None


def _check_sqlite_writable(db: Any) -> None:
    """Raise :class:`ConfigError` (one line) when the SQLite file of ``FLEETMIND_DATABASE_URL``,
    or its folder, cannot be written: the service would start and report ready while every
    webhook, reservation and login failed with 503. SQLite creates the ``-wal`` and ``-shm``
    files and the service its lock files in that folder. A missing folder is left to the
    migration's own message."""
    url = db.engine.url
    path = url.database if db.is_sqlite else None
    if not path or path == ":memory:" or url.query.get("uri") or path.startswith("file:"):
        return
    from fleetmind.argtypes import write_problem

    folder = os.path.dirname(os.path.abspath(path))
    problem = write_problem(path) if os.path.exists(path) else None
    if problem:
        remedy = (
            "use a writable copy on a writable file system"
            if problem == "read-only file system"
            else "give the service's user write access to it, or use a writable copy"
        )
        raise ConfigError(
            f"the SQLite database {path} (FLEETMIND_DATABASE_URL) is not writable ({problem}): "
            f"every write would fail; {remedy}"
        )
    problem = write_problem(folder, os.W_OK | os.X_OK) if os.path.isdir(folder) else None
    if problem:
        remedy = (
            "move the database to a writable file system"
            if problem == "read-only file system"
            else "give the service's user write access to the folder, or move the database to a "
            "writable one"
        )
        raise ConfigError(
            f"the folder of the SQLite database {path} (FLEETMIND_DATABASE_URL) is not writable "
            f"({problem}): SQLite creates its -wal and -shm files there; {remedy}"
        )


def weak_token_refusal(settings: Any, weak: list[str]) -> str:
    """The one-line refusal for the ``weak`` tokens of ``settings`` (their
    ``FLEETMIND_<NAME>_TOKEN`` names, :meth:`Settings.weak_tokens`), with why each is refused: a
    placeholder or under 16 characters, or made of fewer than 5 different characters (a token of
    32 zeros is long enough but guessable). Never quotes a token."""
    from fleetmind.serving.settings import (
        MIN_TOKEN_CHARS,
        MIN_TOKEN_DISTINCT_CHARS,
        PLACEHOLDER_PREFIX,
    )

    short, few = [], []
    for var in weak:
        token = getattr(settings, var.removeprefix("FLEETMIND_").lower()) or ""
        if token.lower().startswith(PLACEHOLDER_PREFIX) or len(token) < MIN_TOKEN_CHARS:
            short.append(var)
        else:
            few.append(var)
    parts = [f"a placeholder or short token in {', '.join(short)}"] if short else []
    if few:
        parts.append(
            f"a token made of fewer than {MIN_TOKEN_DISTINCT_CHARS} different characters in "
            f"{', '.join(few)}"
        )
    return (
        f"refusing to start with {'; '.join(parts)}: use at least {MIN_TOKEN_CHARS} random "
        "characters (e.g. openssl rand -hex 32)"
    )


def _check_token_file(path: str) -> None:
    """Refuse to start with a Prometheus bearer token file every request would fail on
    (unreadable, empty, or holding characters a header cannot carry); the token is never shown.

    Raises:
        ConfigError: what is wrong with the file.
    """
    from fleetmind.data.errors import NotAvailableError
    from fleetmind.serving.telemetry.prometheus import bearer_headers

    try:
        bearer_headers(path)
    except NotAvailableError as err:
        raise ConfigError(str(err)) from None


def _checked_settings(args: argparse.Namespace) -> Any:
    """The service's settings from the environment, checked as the server would check them at
    start (tokens, TLS files, the Prometheus CA and token files, public bind, a free port, graph, a
    writable database and its schema). Raises
    :class:`fleetmind.errors.ConfigError` or :class:`fleetmind.errors.DataError`, one line, when
    it would not start."""
    from pydantic import ValidationError

    from fleetmind.serving.app import load_graph
    from fleetmind.serving.db import Database, DatabaseReadOnly
    from fleetmind.serving.settings import (
        Settings,
        ca_bundle_problem,
        env_value,
        unknown_variable_warnings,
    )

    for line in unknown_variable_warnings():  # a misspelled name is ignored, e.g. a token's
        print(f"fleetmind: warning: {line}", file=sys.stderr)
    try:
        settings = Settings()
    except ValidationError as err:
        raise ConfigError(_settings_error(err)) from None
    if (
        env_value("FLEETMIND_PROMETHEUS_URL")
        and not env_value("FLEETMIND_TELEMETRY")
        and settings.telemetry == "sim"
    ):  # the URL alone left the service on the simulated fleet, with placements that look real
        raise ConfigError(
            "--prometheus-url (FLEETMIND_PROMETHEUS_URL) is set but telemetry is sim, the "
            "default: add --telemetry prometheus (FLEETMIND_TELEMETRY=prometheus) to read it"
        )
    weak = settings.weak_tokens()
    if weak:
        raise ConfigError(weak_token_refusal(settings, weak))
    tls_problem = settings.tls_problem()
    if tls_problem:
        raise ConfigError(tls_problem)
    if settings.telemetry == "prometheus" and settings.prometheus_ca_file:
        ca_problem = ca_bundle_problem("FLEETMIND_PROMETHEUS_CA_FILE", settings.prometheus_ca_file)
        if ca_problem:  # the telemetry source would refuse it, only as a warning at start
            raise ConfigError(ca_problem)
    if settings.telemetry == "prometheus" and settings.prometheus_bearer_token_file:
        _check_token_file(settings.prometheus_bearer_token_file)
    if not settings.tokens() and not is_loopback(args.host) and not args.insecure:
        raise ConfigError(
            f"refusing to serve on {args.host} without a token: set FLEETMIND_API_TOKEN (or "
            "FLEETMIND_READ_TOKEN / FLEETMIND_INGEST_TOKEN / FLEETMIND_SCHEDULE_TOKEN / "
            "FLEETMIND_ADMIN_TOKEN), bind 127.0.0.1, or pass --insecure"
        )
    _check_model_refs(settings)
    check_proxies()  # the telemetry and notify clients would stop the server with a traceback
    _check_port(args.host, args.port)
    # a bad graph or database is a one-line error here, not a traceback in the server's startup
    load_graph(settings, keep=args.workers == 1)  # one worker: the app takes it, unparsed again
    db = Database(
        settings.database_url,
        settings.sqlite_synchronous,
        settings.db_connect_timeout_s,
        settings.db_statement_timeout_s,
    )
    try:
        _check_sqlite_writable(db)
        before = db.migrate(apply=settings.migrate_on_start)  # what the server's startup does first
        try:  # what /readyz checks (a PostgreSQL standby may be promoted: not ready, not fatal)
            if db.is_sqlite:
                db.ping()
        except DatabaseReadOnly as err:
            raise ConfigError(
                f"database {db.engine.url!r}: {err}; every write would fail"
            ) from None
    finally:
        db.dispose()
    from fleetmind.serving.migrations import head

    if before != head():  # the server's own log line would only see the upgraded schema
        print(f"fleetmind: database schema upgraded from {before} to {head()}", file=sys.stderr)
    return settings


def _supervisor_options(uvicorn: Any, startup_timeout_s: float) -> dict[str, Any]:
    """uvicorn's supervisor options for ``--workers N``: ``timeout_worker_healthcheck`` (whole
    seconds, rounded up) from ``FLEETMIND_WORKER_STARTUP_TIMEOUT_S``.

    uvicorn's default of 5 s (``uvicorn/supervisors/multiprocess.py``: a new worker must answer the
    supervisor's ping, and on SIGHUP finish starting, within it) is shorter than a worker's start
    (torch, both models, the schema check): the supervisor killed workers at start-up on a busy host
    and aborted every SIGHUP restart. A uvicorn without the parameter gets nothing (its default)."""
    import inspect

    if "timeout_worker_healthcheck" not in inspect.signature(uvicorn.Config).parameters:
        return {}
    return {"timeout_worker_healthcheck": math.ceil(startup_timeout_s)}


def _restore_env(saved: dict[str, str | None]) -> None:
    """Put back the variables ``saved`` (name -> value, ``None``: unset): in-process callers
    (tests, notebooks) keep their environment when serve refuses to start."""
    from fleetmind.serving.settings import get_settings

    for env, old in saved.items():
        if old is None:
            os.environ.pop(env, None)
        else:
            os.environ[env] = old
    get_settings.cache_clear()


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from fleetmind.serving.metrics import prepare_multiprocess_dir
    from fleetmind.serving.settings import (
        default_public_url,
        env_value,
        get_settings,
        is_wildcard_host,
        public_url_problem,
    )

    if not 0 < args.port < 65536:
        raise ConfigError(f"--port must be within 1..65535, got {args.port}")
    args.host = bind_host(args.host)  # "[::1]": checks and uvicorn see one address
    if args.workers is None:
        raw = env_value("FLEETMIND_WORKERS")
        raw = "1" if raw is None else raw
        try:
            args.workers = int(raw)
        except ValueError:
            raise ConfigError(f"FLEETMIND_WORKERS must be an integer, got {raw!r}") from None
    if not 1 <= args.workers <= MAX_WORKERS:
        raise ConfigError(
            f"--workers (FLEETMIND_WORKERS) must lie in [1, {MAX_WORKERS}], got {args.workers}"
        )
    saved = {env: os.environ.get(env) for env in (*_ENV_OPTIONS.values(), PUBLIC_URL)}
    for attr, env in _ENV_OPTIONS.items():
        value = getattr(args, attr, None)
        if value is not None:
            os.environ[env] = str(value)
    # unset, the links sent out name the port (and address) the service really listens on; a
    # --host that makes no URL is left to the bind check's own error
    # (https:// when the service serves TLS itself)
    default = default_public_url(args.host, args.port, tls=_own_tls())
    derived = not _from_env(PUBLIC_URL) and not public_url_problem(default)
    if derived:
        os.environ[PUBLIC_URL] = default
    get_settings.cache_clear()
    try:
        settings = _checked_settings(args)
    except BaseException:
        _restore_env(saved)
        raise
    if derived and is_wildcard_host(args.host) and _notifies(settings):
        print(
            f"fleetmind: warning: incident links sent to Alertmanager and chat point at "
            f"{settings.public_url}, as {args.host or 'the wildcard address'} names no address "
            f"to link to: set {PUBLIC_URL} to the address operators open",
            file=sys.stderr,
        )
    if args.workers == 1:
        _ignore_sighup()
    # several workers: /metrics merges them through prometheus-client's multiprocess mode, whose
    # directory must be set (and empty) before the workers import it
    # (one worker too when the operator set the directory: it may be shared with other instances)
    # (and with room: a full one crashed every worker; prepare_multiprocess_dir checks it)
    multi = args.workers > 1 or bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
    try:
        shared = prepare_multiprocess_dir(args.workers) if multi else None
    except ConfigError:
        _restore_env(saved)
        raise
    with _cleanup_on_sigterm(shared is not None):
        _serve(uvicorn, args, settings, derived, shared)
    return 0


def _serve(
    uvicorn: Any, args: argparse.Namespace, settings: Any, derived: bool, shared: Any
) -> None:
    """``uvicorn.run`` the service; then put back ``FLEETMIND_PUBLIC_URL`` when ``derived`` and
    remove the metrics directory ``shared`` (the answer of
    :func:`fleetmind.serving.metrics.prepare_multiprocess_dir`, or ``None``)."""
    from fleetmind.serving.app import uvicorn_log_config
    from fleetmind.serving.http_guard import server_options
    from fleetmind.serving.metrics import cleanup_multiprocess_dir
    from fleetmind.serving.settings import get_settings
    from fleetmind.serving.tls import uvicorn_options

    try:
        uvicorn.run(
            "fleetmind.serving.app:create_app",
            factory=True,
            host=args.host,
            port=args.port,
            workers=args.workers,
            log_level=args.log_level,
            # the service's warnings on stderr too; FLEETMIND_ACCESS_LOG: which access lines
            log_config=uvicorn_log_config(args.log_level, settings.access_log),
            access_log=settings.access_log != "off",
            # header timeout and size limit, connection limits; then HTTPS and kube-scheduler's
            # client certificate (whose protocol keeps those limits: it subclasses the guarded one)
            **{**server_options(settings), **uvicorn_options(settings)},
            **_supervisor_options(uvicorn, settings.worker_startup_timeout_s),
            # whose X-Forwarded-Proto/-For to believe (FLEETMIND_TRUSTED_PROXIES; None: uvicorn's
            # default); part of the config every --workers process loads its app with
            forwarded_allow_ips=settings.forwarded_allow_ips(),
        )
    finally:
        if derived:  # an in-process caller (a test) keeps its environment
            os.environ.pop(PUBLIC_URL, None)
            get_settings.cache_clear()
        if shared is not None:
            cleanup_multiprocess_dir(*shared)
