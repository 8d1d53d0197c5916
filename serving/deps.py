"""Dependencies injected into the routers (FastAPI ``Depends``), the services they hand out, and
authentication by token scope.

Authentication: each bearer token carries scopes (``FLEETMIND_READ_TOKEN``: ``read``,
``FLEETMIND_INGEST_TOKEN``: ``ingest``, ``FLEETMIND_SCHEDULE_TOKEN``: ``schedule``,
``FLEETMIND_ADMIN_TOKEN``: ``admin``, ``FLEETMIND_API_TOKEN``: all four). A client certificate
verified against ``FLEETMIND_SCHEDULER_CLIENT_CA`` carries ``schedule`` on ``/api/v1/scheduler/*``
(:mod:`fleetmind.serving.tls`). A route declares the scope it needs with
:func:`require_scope`::

    router = APIRouter(prefix="/api/v1/things", dependencies=[Depends(require_scope("read"))])

    @router.post("", dependencies=[Depends(require_scope("admin"))])  # or per route

When any token is set, :class:`AuthMiddleware` checks the ``Authorization`` header before the
request body is read or parsed: 401 without a known token, 403 with a token that lacks the scope
(RFC 6750 section 3 error codes in ``WWW-Authenticate``, :func:`www_authenticate`). A client
address past ``FLEETMIND_AUTH_FAILURE_LIMIT`` wrong tokens gets 429 before its token is checked
(:class:`AuthThrottle`).
Every route needs a token except :data:`PUBLIC_PATHS` (``/healthz``, ``/readyz``, ``/metrics``); the
API docs (``/docs``, ``/redoc``, ``/openapi.json``) need ``read`` (``admin`` reads them too); a
route that declares no scope needs ``admin`` (so a route added without one is closed, not open); an unknown path or a wrong
method needs any valid token before it gets its 404/405. With no token set, authentication is off
(``fleetmind serve`` then refuses a non-loopback address unless ``--insecure``).

Everything the routes use is built once in the app's lifespan and kept in :class:`Services` on
``app.state.services``; each accessor below is a dependency that tests can replace through
``app.dependency_overrides``. The accessors are ``async def`` although they never wait: FastAPI runs
a plain ``def`` dependency in its thread pool, a thread hand-off per dependency and request (about
25 per RCA request before), which cost more than the accessors themselves.
"""

from __future__ import annotations

import base64
import hmac
import inspect
import ipaddress
import json
import logging
import math
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Annotated, Any, TypeVar

from fastapi import Depends, HTTPException, Request, status
from sqlalchemy.exc import SQLAlchemyError
from starlette.concurrency import run_in_threadpool
from starlette.requests import cookie_parser

from fleetmind.data.errors import NotAvailableError
from fleetmind.serving.db import Database
from fleetmind.serving.failure_log import RequestFailureLog
from fleetmind.serving.graphstore import GraphStore
from fleetmind.serving.health import HealthService
from fleetmind.serving.incidents import IncidentManager
from fleetmind.serving.keepwarm import KeepWarm
from fleetmind.serving.metrics import Metrics
from fleetmind.serving.rca.batcher import RCABatcher
from fleetmind.serving.rca.pool import RankingPool
from fleetmind.serving.registry import ModelRegistry
from fleetmind.serving.scheduler.extender import ExtenderState
from fleetmind.serving.scheduler.placement import Reservations
from fleetmind.serving.settings import SCOPES, Settings, get_settings
from fleetmind.serving.telemetry.base import TelemetrySource
from fleetmind.serving.tls import scheduler_cert
from fleetmind.serving.ui.auth import session_of_cookies

log = logging.getLogger("fleetmind.serving")

_T = TypeVar("_T")


@dataclass
class Services:
    """The long-lived objects of one app instance."""

    settings: Settings
    db: Database
    graphs: GraphStore
    registry: ModelRegistry
    incidents: IncidentManager
    metrics: Metrics
    telemetry: TelemetrySource | None
    telemetry_error: str | None = None
    reservations: Reservations = field(default_factory=Reservations)
    place_lock: threading.Lock = field(default_factory=threading.Lock)
    rca_batcher: RCABatcher = field(default_factory=RCABatcher)
    rca_pool: RankingPool | None = None
    keep_warm: KeepWarm | None = None
    extender: ExtenderState | None = None  # built on the first extender call
    health: HealthService | None = None  # built on first use (health_service)


async def get_services(request: Request) -> Services:
    services = getattr(request.app.state, "services", None)
    if services is None:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, "service is starting")
    return services


ServicesDep = Annotated[Services, Depends(get_services)]


async def get_db(services: ServicesDep) -> Database:
    return services.db


async def get_registry(services: ServicesDep) -> ModelRegistry:
    return services.registry


async def get_graphs(services: ServicesDep) -> GraphStore:
    return services.graphs


async def get_incidents(services: ServicesDep) -> IncidentManager:
    return services.incidents


async def get_metrics(services: ServicesDep) -> Metrics:
    return services.metrics


async def get_reservations(services: ServicesDep) -> Reservations:
    return services.reservations


async def get_rca_batcher(services: ServicesDep) -> RCABatcher:
    return services.rca_batcher


async def get_rca_pool(services: ServicesDep) -> RankingPool | None:
    return services.rca_pool


async def get_telemetry(services: ServicesDep) -> TelemetrySource:
    if services.telemetry is None:
        raise NotAvailableError(services.telemetry_error or "no telemetry source configured")
    return services.telemetry


async def current_settings(request: Request) -> Settings:
    """The settings in force: ``app.dependency_overrides[get_settings]`` when set, else the app's.

    Resolved here rather than declared as ``Depends(get_settings)``: FastAPI re-inspects the
    signature of an overridden dependency on every request (``get_dependant``, ~1 ms), and runs the
    plain ``get_settings`` in its thread pool.
    """
    override = request.app.dependency_overrides.get(get_settings)
    if override is not None:
        value = override()
        return await value if inspect.isawaitable(value) else value
    services = getattr(request.app.state, "services", None)
    return services.settings if services is not None else get_settings()


PUBLIC_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
"""Paths served without a token (probes and the Prometheus scrape)."""
DOC_PATHS = frozenset({"/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"})
"""The API docs: they need the ``read`` scope when tokens are set (``admin`` grants it there,
:func:`docs_scopes`)."""
PUBLIC_BODY_BYTES = 16 * 1024
"""Most request-body bytes read without a token: a route served without one (the ``/ui`` pages
and their login form, the probes) gets 413 beyond it, declared or streamed, before the route runs."""
AUTH_SCOPE_KEY = "fleetmind.scopes"
"""ASGI scope key where :class:`AuthMiddleware` leaves the scopes of the request's token."""
_ANY = "any"
_B64URL = re.compile(r"[A-Za-z0-9_-]*")
SCHEDULER_CERT_SCOPES: frozenset[str] = frozenset({"schedule"})
"""The scopes kube-scheduler's verified client certificate grants (on the routes
:func:`fleetmind.serving.tls.scheduler_cert` opens), without a token."""

_UNAUTHORIZED = "missing or unknown bearer token (send 'Authorization: Bearer <token>')"
_JWT_UNAUTHORIZED = (
    "the bearer token is a JWT, likely an SSO proxy's token (oauth2-proxy "
    "--pass-authorization-header replaces the client's header with its id_token); FleetMind "
    "tokens are opaque: exclude /api/ from the proxy's authentication or keep the client's "
    "'Authorization: Bearer <FleetMind token>' header (docs/deploy.md, 'Behind an SSO proxy')"
)
DOCS_PAGES = frozenset({"/docs", "/redoc"})
"""The API docs pages a browser without credentials is sent to the ``/ui`` login form from."""
JWT_HEADER_CHARS = 1024
"""Most base64url characters of a JWT's first part (its JOSE header, RFC 7515 section 4: a few
fields, well under 200 characters in practice) that :func:`looks_like_jwt` decodes; a longer one
is not taken for a JWT."""


def looks_like_jwt(header: str | bytes | None) -> bool:
    """Whether an ``Authorization`` header carries a JWT bearer (RFC 7519: three base64url parts,
    the first a JSON object with ``alg``), as an SSO proxy sends, rather than an opaque token.

    Never raises, whatever the header holds: the first part is decoded only when it is at most
    :data:`JWT_HEADER_CHARS` base64url characters and parsed only when it decodes to a JSON
    object's ``{`` (a deeply nested array would exhaust the parser's recursion)."""
    if isinstance(header, bytes):
        header = header.decode("latin-1")
    scheme, _, given = (header or "").partition(" ")
    parts = given.strip().split(".")
    if scheme.lower() != "bearer" or len(parts) != 3 or not all(parts[:2]):
        return False
    if len(parts[0]) > JWT_HEADER_CHARS or not all(_B64URL.fullmatch(p) for p in parts):
        return False
    try:
        raw = base64.urlsafe_b64decode(parts[0] + "=" * (-len(parts[0]) % 4)).lstrip()
        head = json.loads(raw) if raw.startswith(b"{") else None
    except (ValueError, UnicodeDecodeError, RecursionError):
        return False
    return isinstance(head, dict) and "alg" in head


def _is_opaque_bearer(header: bytes) -> bool:
    """Whether an ``Authorization`` header is ``Bearer <token>`` with a token that is no JWT
    (:func:`looks_like_jwt`): what an API client sends, as opposed to a browser's ``Basic``
    credentials (nginx ``auth_basic`` passes them upstream) or an SSO proxy's JWT."""
    scheme, _, given = header.decode("latin-1").partition(" ")
    return scheme.lower() == "bearer" and bool(given.strip()) and not looks_like_jwt(header)


def unauthorized_detail(header: str | bytes | None) -> str:
    """The 401 text for a request without a known token: what to change when the header carries
    a JWT (:func:`looks_like_jwt`), else how to send a token. Never quotes the token."""
    return _JWT_UNAUTHORIZED if looks_like_jwt(header) else _UNAUTHORIZED


def settings_of(app: Any) -> Settings:
    """The settings in force for ``app`` (outside a request): an override of ``get_settings``,
    else the running services' settings, else the environment's."""
    override = app.dependency_overrides.get(get_settings) if app is not None else None
    if override is not None:
        return override()  # type: ignore[no-any-return]
    state = getattr(app, "state", None)
    services = getattr(state, "services", None)
    if services is not None:
        return services.settings  # type: ignore[no-any-return]
    configured = getattr(state, "settings", None)  # create_app(settings), before the lifespan
    return configured if configured is not None else get_settings()


def granted_scopes(
    tokens: dict[str, frozenset[str]], header: str | bytes | None
) -> frozenset[str] | None:
    """The scopes of the bearer token in an ``Authorization`` header (``None``: no known token).

    Compares against every configured token in constant time, so timing tells nothing about which
    token or how much of it matched.
    """
    if isinstance(header, bytes):
        header = header.decode("latin-1")
    scheme, _, given = (header or "").partition(" ")
    if scheme.lower() != "bearer":
        return None
    raw = given.strip().encode("latin-1", "replace")
    found: frozenset[str] | None = None
    for token, scopes in tokens.items():
        if hmac.compare_digest(raw, token.encode()):
            found = scopes
    return found


def has_scope(request: Request, scope: str) -> bool:
    """Whether the request's credentials grant ``scope`` (True with authentication off), for a
    route that needs more than its declared scope for some inputs (e.g. ``reserve=true``)."""
    granted = request.scope.get(AUTH_SCOPE_KEY)
    if granted is not None:
        return scope in granted or _ANY in granted
    tokens = settings_of(request.app).tokens()
    if not tokens:
        return True
    got = granted_scopes(tokens, request.headers.get("authorization"))
    return got is not None and scope in got


def www_authenticate(header: str | bytes | None, scope: str | None = None) -> str:
    """The ``WWW-Authenticate`` value of a refusal (RFC 6750 section 3): for a request that
    sent no FleetMind bearer token (none, another scheme, or an SSO proxy's JWT, which the 401's
    text names), ``Bearer`` alone (section 3.1: no error code then); for an unknown one,
    ``error="invalid_token"`` (401); for a token that lacks ``scope``,
    ``error="insufficient_scope"`` and the scope it needs (403)."""
    if scope is not None:
        return f'Bearer error="insufficient_scope", scope="{scope}"'
    if isinstance(header, bytes):
        header = header.decode("latin-1")
    scheme, _, given = (header or "").partition(" ")
    if scheme.lower() == "bearer" and given.strip() and not looks_like_jwt(header):
        return 'Bearer error="invalid_token"'
    return "Bearer"


def _deny(code: int, detail: str, header: str | None, scope: str | None = None) -> HTTPException:
    challenge = www_authenticate(header, scope if code == 403 else None)
    return HTTPException(code, detail, headers={"WWW-Authenticate": challenge})


AUTH_THROTTLE_CLIENTS = 10_000
"""Most client addresses an :class:`AuthThrottle` remembers (a few dozen bytes each); past it the
one whose last wrong token is oldest is forgotten."""


class AuthThrottle:
    """Wrong tokens per client address, in this worker process (each worker counts its own): a
    fixed window that opens at an address's first wrong token; at the ``limit``-th within
    ``window_s`` seconds the address is refused for ``window_s`` seconds (429 before any token is
    checked, so a right guess is not confirmed then). Tokens are never locked out, only
    addresses; successful requests never count. OWASP ASVS 4.0.3 V2.2.1, CWE-307."""

    def __init__(self, max_clients: int = AUTH_THROTTLE_CLIENTS) -> None:
        self.max_clients = max_clients
        # address -> [window start, wrong tokens in it, refused until (0: not refused)],
        # monotonic seconds, the address of the latest wrong token last
        self._clients: OrderedDict[str, list[float]] = OrderedDict()
        self._lock = threading.Lock()

    def retry_after(self, client: str, now: float | None = None) -> int | None:
        """Whole seconds until ``client`` may send a token again (``None``: it may now)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            entry = self._clients.get(client)
        if entry is None or entry[2] <= now:
            return None
        return max(1, math.ceil(entry[2] - now))

    def failed(self, client: str, limit: int, window_s: float, now: float | None = None) -> bool:
        """Count one wrong token from ``client`` (``limit`` 0: none is counted); whether it is
        the ``limit``-th of its window, which starts the refusal."""
        if limit <= 0:
            return False
        now = time.monotonic() if now is None else now
        with self._lock:
            return self._count(client, limit, window_s, now)

    def check(
        self,
        client: str,
        limit: int,
        window_s: float,
        verify: Callable[[], _T | None],
        now: float | None = None,
    ) -> tuple[_T | None, int | None, bool]:
        """Check one token from ``client`` and count it when wrong, in one step under the lock:
        ``verify()`` (the token's check: constant-time comparisons with the configured tokens, no
        I/O) runs only while ``client`` is not refused, and its ``None`` is a wrong token. So
        concurrent requests (the ``/ui`` pages check theirs in worker threads) never check more
        than ``limit`` tokens of one ``client`` per window. Returns what ``verify`` gave (``None``
        when refused), the whole seconds ``client`` must still wait (``None``: checked) and whether
        this wrong token started the refusal. ``limit`` 0: checked, never counted."""
        if limit <= 0:
            return verify(), None, False
        now = time.monotonic() if now is None else now
        with self._lock:
            entry = self._clients.get(client)
            if entry is not None and entry[2] > now:
                return None, max(1, math.ceil(entry[2] - now)), False
            value = verify()
            started = value is None and self._count(client, limit, window_s, now)
        return value, None, started

    def _count(self, client: str, limit: int, window_s: float, now: float) -> bool:
        """One wrong token from ``client`` (the lock held); whether it starts the refusal."""
        entry = self._clients.pop(client, None)
        if entry is None or (entry[2] or entry[0] + window_s) <= now:
            entry = [now, 0.0, 0.0]  # a new window (the last one, or its refusal, is over)
        entry[1] += 1
        started = entry[1] == limit
        if started:
            entry[2] = now + window_s
        self._clients[client] = entry
        while len(self._clients) > self.max_clients:
            self._clients.popitem(last=False)
        return started


_THROTTLE = AuthThrottle()
"""The throttle of an app without ``app.state`` (one per process)."""


def auth_throttle(app: Any) -> AuthThrottle:
    """The :class:`AuthThrottle` of ``app`` (``app.state.auth_throttle``, made on first use)."""
    state = getattr(app, "state", None)
    if state is None:
        return _THROTTLE
    throttle = getattr(state, "auth_throttle", None)
    if throttle is None:
        with _THROTTLE_MADE:  # concurrent first requests must share one throttle, not lose counts
            throttle = getattr(state, "auth_throttle", None)
            if throttle is None:
                throttle = state.auth_throttle = AuthThrottle()
    return throttle  # type: ignore[no-any-return]


_THROTTLE_MADE = threading.Lock()
"""Held while :func:`auth_throttle` makes an app's throttle."""


NAT64_PREFIX = ipaddress.ip_network("64:ff9b::/96")
"""The well-known NAT64 prefix (RFC 6052): its addresses carry an IPv4 client in their last 32
bits, one client each, though Python calls them global (a /64 key would join every IPv4 client)."""
WHOLE_IPV6 = tuple(
    ipaddress.ip_network(n)
    for n in ("::/127", "fc00::/7", "fe80::/10", "64:ff9b:1::/48", "2001:db8::/32", "ff00::/8")
)
"""IPv6 networks whose addresses :func:`client_address` counts whole, not by /64: unspecified and
loopback, unique local (pod subnets), link-local, RFC 8215's local-use NAT64 (one IPv4 client per
address), documentation, multicast. A fixed list, not ``is_global``, whose answer for some of these
changed between Python patch releases."""
IFNAME_CHARS = 64
"""Most characters of an IPv6 zone id (``%eth0``, an interface name or index) kept in a
:func:`client_address` key (Linux names have at most 15)."""


def client_address(scope: Any) -> str | None:
    """The key :class:`AuthThrottle` counts a client under: the client's IP address as the access
    log shows it (the peer, or the ``X-Forwarded-For`` address a proxy of
    ``FLEETMIND_TRUSTED_PROXIES`` gave: uvicorn rewrites ``scope["client"]``), an IPv4-mapped IPv6
    address (``::ffff:10.0.0.1``, a dual-stack socket's IPv4 client) and a NAT64 one
    (``64:ff9b::a00:1``, :data:`NAT64_PREFIX`) as plain IPv4, and any other IPv6 address outside
    :data:`WHOLE_IPV6` as its /64 network (``2a00:1450:4001:81b::/64``): a host on the internet
    usually controls a whole /64 of addresses (SLAAC and privacy addresses, RFC 7421), so counting
    single addresses would let it send 2**64 times the limit. An address of :data:`WHOLE_IPV6`
    counts whole, a link-local one with its zone (``fe80::1%eth0``): many hosts share one /64 there (a Docker or Cilium pod subnet, ``fd00::/64``; every link's ``fe80::/64``), and one
    guesser must not lock its neighbours out.
    ``None`` when there is none or it is no IP address (a Unix socket without a proxy's header):
    :class:`AuthThrottle` counts nothing then, since one counter shared by every client would let
    any of them lock all the others out."""
    client = scope.get("client")
    if not client:
        return None
    bare, _, zone = str(client[0]).partition("%")
    try:
        address = ipaddress.ip_address(bare)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        if address in NAT64_PREFIX:  # an IPv4 client through NAT64: its own IPv4 address
            return str(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
        if not any(address in net for net in WHOLE_IPV6):
            return str(ipaddress.ip_network(f"{address}/64", strict=False))
        return f"{address}%{zone[:IFNAME_CHARS]}" if zone else str(address)
    return str(address)


THROTTLED_KEY = "fleetmind.throttled"
"""ASGI scope key where :class:`AuthMiddleware` leaves the seconds a throttled client must wait,
for a ``/ui`` page (served without a token), whose ``Authorization`` header it removes first: the
page answers its own 429 (the HTML error page) unless a session cookie signs it in."""


def throttled(app: Any, settings: Settings, client: str | None) -> int | None:
    """Seconds ``client`` must wait before sending a token again (``None``: it may now; always
    ``None`` with ``FLEETMIND_AUTH_FAILURE_LIMIT=0`` or no client address)."""
    if settings.auth_failure_limit <= 0 or client is None:
        return None
    return auth_throttle(app).retry_after(client)


def check_guess(
    app: Any, settings: Settings, client: str | None, verify: Callable[[], _T | None]
) -> tuple[_T | None, int | None]:
    """A guessable token's check ``verify()`` through the app's :meth:`AuthThrottle.check` for
    ``client``: what it gave (``None``: wrong, or not checked) and the whole seconds ``client`` is
    refused for (``None``: it was checked, and counted when wrong), with one warning when that
    starts the refusal. Without a client address it is checked and never counted."""
    if client is None:
        return verify(), None
    limit, window = settings.auth_failure_limit, settings.auth_failure_window_s
    value, retry, started = auth_throttle(app).check(client, limit, window, verify)
    if started:
        _warn_refusal(client, limit, window)
    return value, retry


def _warn_refusal(client: str, limit: int, window: float) -> None:
    """The one warning when ``client`` starts being refused (its key, never the token)."""
    log.warning(
        "%d wrong tokens from %r within %.0f s: its requests with a token get 429 for %.0f s "
        "(FLEETMIND_AUTH_FAILURE_LIMIT, FLEETMIND_AUTH_FAILURE_WINDOW_S)",
        limit,
        client[:100],
        window,
        window,
    )


def throttled_detail(retry_after: int) -> str:
    """The 429 text for a client address refused by :class:`AuthThrottle`."""
    return (
        "too many wrong tokens from this client address: no token is checked from it for "
        f"{retry_after} s"
    )


_SCOPE_DEPS: dict[str, Callable[..., Awaitable[None]]] = {}


def require_scope(scope: str) -> Callable[..., Awaitable[None]]:
    """A FastAPI dependency demanding a token with ``scope`` (``read``, ``ingest``, ``schedule``
    or ``admin``).

    Use as ``dependencies=[Depends(require_scope("read"))]`` on a router or a route. It passes at
    once when :class:`AuthMiddleware` already checked the request (the usual case, before the
    body); on its own (an app without the middleware) it checks the header itself.
    """
    if scope not in SCOPES:
        raise ValueError(f"unknown scope {scope!r}; one of {', '.join(SCOPES)}")
    dep = _SCOPE_DEPS.get(scope)
    if dep is not None:
        return dep

    async def check_scope(request: Request) -> None:
        granted = request.scope.get(AUTH_SCOPE_KEY)
        if granted is not None:
            if scope in granted or _ANY in granted:
                return
            raise _deny(
                status.HTTP_403_FORBIDDEN, f"this token lacks the {scope!r} scope", None, scope
            )
        tokens = (await current_settings(request)).tokens()
        if not tokens:
            return
        got = granted_scopes(tokens, request.headers.get("authorization"))
        if got is None:
            header = request.headers.get("authorization")
            raise _deny(status.HTTP_401_UNAUTHORIZED, unauthorized_detail(header), header)
        if scope not in got:
            detail = f"this token lacks the {scope!r} scope"
            raise _deny(status.HTTP_403_FORBIDDEN, detail, None, scope)

    check_scope.fleetmind_scope = scope  # type: ignore[attr-defined]
    check_scope.__name__ = f"require_scope_{scope}"
    _SCOPE_DEPS[scope] = check_scope
    return check_scope


def flat_routes(app: Any) -> list[Any]:
    """The app's routes with included routers expanded (each with its path, methods, effective
    ``dependencies`` and ``matches``): FastAPI 0.16x keeps an included router as one entry."""
    try:
        from fastapi.routing import iter_route_contexts
    except ImportError:  # FastAPI before included-router contexts: the routes are flat already
        return list(app.routes)
    return list(iter_route_contexts(app.routes))


def route_scope(app: Any, scope: Any) -> str:
    """The scope a request needs on ``app``: its route's :func:`require_scope` (``admin`` when the
    route declares none), ``read`` for the API docs, ``"any"`` (any valid token) when no route
    matches the path and method (the 404/405 answer), ``"public"`` for :data:`PUBLIC_PATHS`."""
    from starlette.routing import Match

    path = scope.get("path", "")
    if path in PUBLIC_PATHS:
        return "public"
    if path in DOC_PATHS:
        return "read"
    for route in flat_routes(app):
        match, _ = route.matches(scope)
        if match is Match.FULL:
            return declared_scope(route)
    return _ANY


def matched_route(app: Any, scope: Any) -> Any | None:
    """The route of :func:`flat_routes` a request goes to: the one matching its path and method,
    else the first matching its path (its 405), else ``None`` (its 404). For a request refused
    before routing, which leaves no ``scope["route"]`` (the metrics' ``route`` label)."""
    from starlette.routing import Match

    partial = None
    for route in flat_routes(app):
        match, _ = route.matches(scope)
        if match is Match.FULL:
            return route
        if match is Match.PARTIAL and partial is None:
            partial = route
    return partial


def declared_scope(route: Any) -> str:
    """The scope a route of :func:`flat_routes` needs: ``"public"`` for :data:`PUBLIC_PATHS`, its
    :func:`require_scope`, else ``admin`` (the OpenAPI spec's security requirements come from it)."""
    if getattr(route, "path", None) in PUBLIC_PATHS:
        return "public"
    for d in getattr(route, "dependencies", ()) or ():
        needed = getattr(d.dependency, "fleetmind_scope", None)
        if needed is not None:
            return str(needed)
    return "admin"


class AuthMiddleware:
    """ASGI middleware: the token check of :func:`require_scope`, before the body is read.

    It answers 401/403 itself (the body is never received, so a client without a token cannot make
    the service buffer or parse anything) and leaves the token's scopes under
    :data:`AUTH_SCOPE_KEY` for the route's dependency. Routes served without a token read at most
    :data:`PUBLIC_BODY_BYTES` of body. The API docs (:data:`DOC_PATHS`) also take a signed-in
    ``/ui`` session (the pages link to them; a browser sends no bearer token), whose scopes add to
    those of a bearer token that cannot read them (an SSO proxy's ingest-only token); a browser that
    opens ``/docs`` or ``/redoc`` without either is sent to the login form (303), which returns
    there. A JWT bearer (an SSO proxy's token) gets a 401 that says so (:func:`unauthorized_detail`).
    """

    def __init__(self, app: Any) -> None:
        self.app = app
        self._tokens: tuple[int, dict[str, frozenset[str]]] = (0, {})

    def _tokens_of(self, settings: Settings) -> dict[str, frozenset[str]]:
        key = id(settings)
        if self._tokens[0] != key:
            self._tokens = (key, settings.tokens())
        return self._tokens[1]

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        app = scope.get("app")
        settings = settings_of(app)
        tokens = self._tokens_of(settings)
        if not tokens:
            await self.app(scope, receive, send)
            return
        needed = route_scope(app, scope)
        header = next((v for k, v in scope.get("headers", ()) if k == b"authorization"), None)
        # an opaque bearer token is a guess until it matches: refused before it is checked
        # while this address is throttled, checked and counted when wrong in one locked step
        # (the /ui pages count theirs themselves, only when no session cookie signs the page in:
        # the bearer decides nothing then, an SSO proxy's own opaque token)
        guess = scope.get("path") not in PUBLIC_PATHS and header and _is_opaque_bearer(header)
        got = None if guess else granted_scopes(tokens, header)
        if guess and scope.get("path") in DOC_PATHS:
            try:  # a browser signed in to read the docs: its SSO proxy's own token decides nothing
                cookie = await _session_scopes(app, scope)
            except SQLAlchemyError as exc:  # outside the app's handlers: answered here
                await _answer_db_error(app, scope, send, exc)
                return
            if cookie is not None and "read" in docs_scopes(cookie):
                guess, got = False, cookie
        if guess and needed == "public":
            retry = throttled(app, settings, client_address(scope))
            if retry is not None:  # a /ui page: its bearer never seen (no oracle), its own 429
                scope = _without_authorization(scope, retry)
        elif guess:
            check = partial(granted_scopes, tokens, header)
            got, retry = check_guess(app, settings, client_address(scope), check)
            if retry is not None:
                await _answer(send, 429, throttled_detail(retry), [(b"retry-after", b"%d" % retry)])
                return
        if needed == "public":
            body = await read_bounded(scope, receive, PUBLIC_BODY_BYTES)
            if body is None:
                return  # the client left
            if body is TOO_LARGE:
                await _answer(send, 413, f"request body larger than {PUBLIC_BODY_BYTES} bytes", [])
                return
            await self.app(scope, replay(body, receive), send)
            return
        if got is None and header is None and scheduler_cert(scope) is not None:
            got = SCHEDULER_CERT_SCOPES  # kube-scheduler's verified client certificate
        if scope.get("path") in DOC_PATHS and "read" not in docs_scopes(got or frozenset()):
            try:  # a signed-in session beside a bearer that cannot read (an ingest-only proxy)
                cookie = await _session_scopes(app, scope)
            except SQLAlchemyError as exc:  # outside the app's handlers: answered here
                await _answer_db_error(app, scope, send, exc)
                return
            if cookie is not None:
                got = cookie if got is None else got | cookie
        if got is not None and scope.get("path") in DOC_PATHS:
            got = docs_scopes(got)
        if got is None and _browser_to_docs(scope, header):
            await _to_login(send, scope["path"])
            return
        if got is None:
            challenge = www_authenticate(header).encode()
            await _answer(
                send, 401, unauthorized_detail(header), [(b"www-authenticate", challenge)]
            )
            return
        if needed != _ANY and needed not in got:
            challenge = www_authenticate(header, needed).encode()
            detail = f"this token lacks the {needed!r} scope"
            await _answer(send, 403, detail, [(b"www-authenticate", challenge)])
            return
        scope[AUTH_SCOPE_KEY] = got
        if scope.get("path") in DOC_PATHS:  # /openapi.json too: never kept by a shared cache
            send = _no_store(send)
        await self.app(scope, receive, send)


def _without_authorization(scope: Any, retry_after: int) -> Any:
    """A copy of ``scope`` without its ``Authorization`` header, marked with
    :data:`THROTTLED_KEY` (``retry_after`` seconds)."""
    headers = [(k, v) for k, v in scope.get("headers", ()) if k != b"authorization"]
    return {**scope, "headers": headers, THROTTLED_KEY: retry_after}


TOO_LARGE = b"\0too large"
"""What :func:`read_bounded` returns for a body over its limit (compared by identity)."""


async def read_bounded(scope: Any, receive: Any, limit: int) -> bytes | None:
    """The whole request body if it is at most ``limit`` bytes; :data:`TOO_LARGE` as soon as it
    is known to be larger (a declared ``Content-Length`` over it, or the bytes streamed so far);
    ``None`` when the client disconnected. Reads at most ``limit`` plus one network chunk.

    A body that stops arriving does not hold it forever: the server's body timeout
    (``FLEETMIND_BODY_TIMEOUT_S``, :mod:`fleetmind.serving.http_guard`) answers 408 and closes
    the connection, and ``receive()`` then gives ``http.disconnect`` (``None`` here)."""
    for k, v in scope.get("headers", ()):
        if k == b"content-length":
            try:
                if int(v) > limit:
                    return TOO_LARGE
            except ValueError:
                return TOO_LARGE
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        body = message.get("body", b"")
        size += len(body)
        if size > limit:
            return TOO_LARGE
        chunks.append(body)
        if not message.get("more_body", False):
            return b"".join(chunks)


def replay(body: bytes, receive: Any) -> Callable[[], Awaitable[Any]]:
    """An ASGI ``receive`` that gives ``body`` as one message, then defers to ``receive``."""
    sent = False

    async def _receive() -> Any:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return _receive


async def _session_scopes(app: Any, scope: Any) -> frozenset[str] | None:
    """The scopes of the ``/ui`` session named by the request's cookie (``None``: none)."""
    services = getattr(getattr(app, "state", None), "services", None)
    raw = next((v for k, v in scope.get("headers", ()) if k == b"cookie"), None)
    if services is None or raw is None:
        return None
    cookies = cookie_parser(raw.decode("latin-1"))
    session = await run_in_threadpool(session_of_cookies, cookies, services.settings, services.db)
    return None if session is None else session.scopes


_DB_FAILURES = RequestFailureLog(log)
"""The limiter for an app without its own (``app.state.db_failures``, which the API's database
handler shares): one per server process."""


async def _answer_db_error(app: Any, scope: Any, send: Any, exc: SQLAlchemyError) -> None:
    """Answer a database error of the middleware's own reads as the API's database handler does
    (:meth:`RequestFailureLog.answer`, through the app's ``app.state.db_failures``): a 422 for a
    value the database refused, else a 503 and one throttled line, never the SQL, its parameters
    or a traceback."""
    failures = getattr(getattr(app, "state", None), "db_failures", None) or _DB_FAILURES
    route = getattr(matched_route(app, scope), "path", None) or "unmatched"
    code, detail = failures.answer(exc, scope.get("method", ""), route)
    await _answer(send, code, detail, [])


def docs_scopes(got: frozenset[str]) -> frozenset[str]:
    """The scopes a credential has on the API docs (:data:`DOC_PATHS`): ``admin`` reads them too,
    the pages' rule (``Session.can``), for a bearer token (an admin token an SSO proxy injects)
    as for a ``/ui`` session, so the pages' API link opens the docs for whoever sees the pages."""
    return got | {"read"} if "admin" in got else got


def _browser_to_docs(scope: Any, header: bytes | None) -> bool:
    """Whether a request without credentials is a browser opening the API docs pages
    (:data:`DOCS_PAGES`, ``GET``/``HEAD``, ``Accept`` naming ``text/html``) with no
    ``Authorization`` header, an SSO proxy's JWT, or another scheme (``Basic`` from a proxy's
    ``auth_basic``) in it: sent to the login form. An unknown opaque ``Bearer`` token (an API
    client's) keeps the JSON 401."""
    if scope.get("path") not in DOCS_PAGES or scope.get("method") not in ("GET", "HEAD"):
        return False
    if header is not None and _is_opaque_bearer(header):
        return False
    accept = b",".join(v for k, v in scope.get("headers", ()) if k == b"accept")
    return b"text/html" in accept.lower()


def _no_store(send: Any) -> Any:
    """``send`` adding ``Cache-Control: no-store`` to a response that sets no ``Cache-Control``
    (RFC 9111 section 5.2.2.5): an authenticated answer is kept by no cache (OWASP ASVS 4.0.3
    V8.2.1), as the ``/ui`` pages and the docs pages already say themselves."""

    async def _send(message: Any) -> None:
        if message["type"] == "http.response.start":
            headers = list(message.get("headers", ()))
            if not any(k.lower() == b"cache-control" for k, _ in headers):
                headers.append((b"cache-control", b"no-store"))
            message = {**message, "headers": headers}
        await send(message)

    return _send


async def _to_login(send: Any, path: str) -> None:
    """303 to the ``/ui`` login form, which returns to ``path`` (one of :data:`DOCS_PAGES`)
    once signed in."""
    location = f"/ui/login?next={path}".encode()
    await send(
        {
            "type": "http.response.start",
            "status": 303,
            "headers": [
                (b"location", location),
                (b"content-length", b"0"),
                (b"cache-control", b"no-store"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": b""})


async def _answer(send: Any, code: int, detail: str, headers: list[tuple[bytes, bytes]]) -> None:
    import json

    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": code,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


DbDep = Annotated[Database, Depends(get_db)]
RegistryDep = Annotated[ModelRegistry, Depends(get_registry)]
GraphsDep = Annotated[GraphStore, Depends(get_graphs)]
IncidentsDep = Annotated[IncidentManager, Depends(get_incidents)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]
TelemetryDep = Annotated[TelemetrySource, Depends(get_telemetry)]
ReservationsDep = Annotated[Reservations, Depends(get_reservations)]
RCABatcherDep = Annotated[RCABatcher, Depends(get_rca_batcher)]
RCAPoolDep = Annotated[RankingPool | None, Depends(get_rca_pool)]
