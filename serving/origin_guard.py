"""Cross-site and DNS-rebinding protection for the API (an ASGI middleware).

A browser lets any page the operator visits send requests to the service: a ``fetch`` in
``no-cors`` mode with a ``text/plain`` body needs no CORS preflight, and a page whose name an
attacker re-points at ``127.0.0.1`` (DNS rebinding) can even read the answers. Bearer tokens stop
both (a page cannot attach the operator's token), but with no token set (authentication off, the
loopback default) nothing else would. :class:`OriginGuard` makes four checks, in this order,
after refusing with 400 a request that repeats ``Host``, ``Origin`` or ``Content-Type``
(:data:`SINGLE_HEADERS`: the checks here and the routes would otherwise read different copies)
or an HTTP/1.1 request without ``Host`` (RFC 9112 section 3.2: a server MUST answer both 400;
HTTP/1.0 may omit it):

* **Host** (only with no token set while the service listens on a loopback address,
  ``FLEETMIND_BIND_HOST``, see :func:`binds_loopback`; every client is then on this machine, and
  no request header can change that, where ``X-Forwarded-For`` from 127.0.0.1 rewrites uvicorn's
  ``client``): a request whose ``Host`` is a DNS name other than
  ``localhost`` (or a name under ``.localhost``) or the host of
  ``FLEETMIND_PUBLIC_URL`` gets 403. IP literals are accepted (a page cannot re-point an
  address). The probes (``/healthz``, ``/readyz``, ``/metrics``) are exempt. As Jupyter's
  ``allow_remote_access=False`` and Vite's ``server.allowedHosts`` do. Single-label names (a
  machine's short name, Starlette's ``testserver``) are accepted: a rebinding attack needs a name
  in a domain whose DNS the attacker runs, and such names have a dot.
* **Origin**: a ``POST``, ``PUT``, ``PATCH`` or ``DELETE`` under ``/api/`` with an ``Origin``
  header that is not the service's own (the request's ``Host``, or ``FLEETMIND_PUBLIC_URL``'s
  origin) gets 403. Browsers send ``Origin`` on every such request (the Fetch standard); clients
  that are not browsers (Alertmanager, kube-scheduler, curl) send none.
* **Content type**: a ``POST``, ``PUT``, ``PATCH`` or ``DELETE`` with a body (:func:`has_body`:
  a ``Transfer-Encoding`` or a ``Content-Length`` other than 0) under ``/api/v1/`` (the
  Alertmanager webhook, the scheduler extender, ``/api/v1/rca``, placements, feedback, the graph;
  a body sent to ``POST /api/v1/models/reload``, which reads none) gets 415 (RFC 9110 section
  15.5.16) for a ``Content-Type`` that is not JSON (``*/json`` or ``*/*+json``, parameters
  ignored): one rule for every route, where FastAPI's own answer to a
  form type was a misleading 422 "Input should be a valid dictionary". Alertmanager always
  sends ``application/json`` (prometheus/alertmanager
  ``notify/util.go``, ``PostJSON``) and so does kube-scheduler's extender client
  (kubernetes ``pkg/scheduler/framework/plugins/extender``... ``extender.go``, ``send``). A request
  without the header is accepted and read as JSON (curl's ``-d`` and ``--data-binary`` do send
  one, ``application/x-www-form-urlencoded``: 415 unless told ``-H 'Content-Type:
  application/json'``); a browser's cross-site request is already refused by the ``Origin``
  check.
* **Content coding**: the same requests get 415 for a ``Content-Encoding`` other than
  ``identity`` (RFC 9110 sections 8.4.1 and 15.5.16), with ``Accept-Encoding: identity``: no route
  decodes a coding, so a gzip body was parsed as JSON text (a 422 quoting the compressed bytes)
  and a body labelled ``br`` but sent plain was taken. Alertmanager and kube-scheduler send none.

The body itself must be UTF-8 (RFC 8259 section 8.1) on every route: the routes that take a
FastAPI body model read it through :class:`Utf8JsonRoute` (:func:`utf8_json`).
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute

from fleetmind.serving.deps import PUBLIC_PATHS, settings_of
from fleetmind.serving.origins import origin_of, same_origin, split_host
from fleetmind.serving.settings import Settings

UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
"""Methods that change state: cross-site ones are refused under ``/api/``."""
JSON_BODY_PREFIX = "/api/v1/"
"""Every ``POST``, ``PUT``, ``PATCH`` and ``DELETE`` with a body under it takes JSON only: 415 for
another declared content type or a content coding."""
IDENTITY_CODINGS = frozenset({"", "identity"})
"""``Content-Encoding`` codings that leave the body as sent (compared trimmed and lower-case):
any other gets 415, as no route decodes one."""
SINGLE_HEADERS = frozenset({b"host", b"origin", b"content-type"})
"""Headers a request may carry once: a repeated one gets 400, where the checks here and the
routes could otherwise read different copies (RFC 9112 section 3.2 for ``Host``; RFC 9110 section
5.3 allows a repeated field only for list-valued ones, which these are not)."""


def is_json_media_type(value: str) -> bool:
    """Whether a ``Content-Type`` value names JSON: subtype ``json`` (``application/json``, the
    older ``text/json``) or a ``+json`` suffix (RFC 6839 section 3.1), parameters
    (``; charset=utf-8``) ignored. None of them is a type a browser sends cross-site without a
    CORS preflight (WHATWG Fetch, "CORS-safelisted request-header")."""
    kind, slash, sub = value.split(";", 1)[0].strip().lower().partition("/")
    return bool(kind and slash) and (sub == "json" or sub.endswith("+json"))


ENCODING_REFUSAL = "unsupported Content-Encoding"
"""How the detail of a 415 for a content coding starts."""


def unsupported_coding(headers: Any) -> str | None:
    """The first coding of a request's ``Content-Encoding`` fields (every copy: a list-valued
    field, RFC 9110 section 8.4) other than ``identity`` (:data:`IDENTITY_CODINGS`), trimmed and
    lower-case; ``None`` when the body is sent as is. ``headers``: ASGI ``(name, value)`` pairs."""
    for key, value in headers:
        if key.lower() != b"content-encoding":
            continue
        for coding in value.decode("latin-1").split(","):
            coding = coding.strip().lower()
            if coding not in IDENTITY_CODINGS:
                return coding
    return None


def has_body(headers: dict[bytes, str], scope: Any) -> bool:
    """Whether an HTTP/1 request carries a body (RFC 9112 section 6.3): it has one only with a
    ``Transfer-Encoding``, or a ``Content-Length`` other than 0; with neither it has none (a
    ``POST`` with no body at all, as ``POST /api/v1/models/reload`` is sent). ``headers``: the
    first copy of each field, names lower-case; ``scope``: its ASGI scope. A request of another
    version (HTTP/2 frames a body without either field) counts as having one."""
    if not str(scope.get("http_version", "1.1")).startswith("1"):
        return True
    if b"transfer-encoding" in headers:
        return True
    length = headers.get(b"content-length")
    return length is not None and length.strip().strip("0") != ""


def is_ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def host_allowed(host: str, public_host: str | None) -> bool:
    """Whether a request's ``Host`` (already through :func:`split_host`) is accepted with no token
    set: an IP literal, ``localhost`` or a name under it, a single-label name, or the host of
    ``FLEETMIND_PUBLIC_URL``."""
    if not host or is_ip_literal(host) or "." not in host:
        return True
    return host == "localhost" or host.endswith(".localhost") or host == public_host


def binds_loopback(host: str) -> bool:
    """Whether a listen address (``fleetmind serve --host``, ``FLEETMIND_BIND_HOST``) binds only
    the loopback interface: ``localhost``, ``127.0.0.0/8``, ``::1`` (or ``::ffff:127.x``)."""
    host = host.strip().strip("[]").lower()
    if host == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False  # a name: may resolve to anything
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_loopback or (mapped is not None and mapped.is_loopback)


def json_when_undeclared(scope: Any) -> None:
    """Give a ``POST``, ``PUT`` or ``PATCH`` under ``/api/v1/`` that declares no ``Content-Type``,
    or a JSON type other than ``application/json`` (``text/json``, ``application/merge-patch+json``:
    accepted by :func:`is_json_media_type`), the type ``application/json`` (in ``scope``, in place:
    outer middleware read what the router leaves in it), so that every route reads such a body as
    JSON: FastAPI parses a body model only under ``application/json`` (or ``application/*+json``)
    and answered 422 "Input should be a valid dictionary" for ``text/json``."""
    if scope.get("method") not in UNSAFE_METHODS or not scope.get("path", "").startswith(
        JSON_BODY_PREFIX
    ):
        return
    headers = scope.get("headers", ())
    declared = [v for k, v in headers if k.lower() == b"content-type"]
    if declared and declared[0].split(b";", 1)[0].strip().lower() == b"application/json":
        return
    if declared and not is_json_media_type(declared[0].decode("latin-1")):
        return  # refused with 415 before this is reached
    kept = [(k, v) for k, v in headers if k.lower() != b"content-type"]
    scope["headers"] = [*kept, (b"content-type", b"application/json")]


def utf8_json(body: bytes) -> Any:
    """A request body parsed as JSON that must be UTF-8 without a byte order mark (RFC 8259
    section 8.1: JSON exchanged between systems MUST be UTF-8), as ``/api/v1/alerts`` and
    ``/api/v1/rca`` (pydantic-core) and the extender read theirs. Python's ``json.loads`` on bytes
    guesses UTF-16 or UTF-32 from the first bytes, drops a UTF-8 BOM and lets encoded surrogates
    through: a route reading its body that way took what the others refuse.

    Raises:
        json.JSONDecodeError: the body is not UTF-8, starts with a byte order mark, or is not
            JSON; FastAPI answers it with a 422 ``json_invalid`` error, as ``/api/v1/alerts``.
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as err:
        raise json.JSONDecodeError(
            f"the body is not UTF-8 (byte 0x{body[err.start]:02x} at offset {err.start}); "
            "JSON is sent as UTF-8 (RFC 8259 section 8.1)",
            "",
            err.start,
        ) from None
    if text.startswith("\ufeff"):
        raise json.JSONDecodeError(
            "the body starts with a byte order mark: send UTF-8 JSON without one "
            "(RFC 8259 section 8.1)",
            "",
            0,
        )
    return json.loads(text)


class Utf8JsonRequest(Request):
    """A request whose :meth:`json` is :func:`utf8_json` (Starlette's is ``json.loads`` on bytes)."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = utf8_json(await self.body())
        return self._json


class Utf8JsonRoute(APIRoute):
    """The route class of every router whose routes take a FastAPI body model (placements,
    feedback, the graph): their bodies are read by :func:`utf8_json`, as FastAPI's documented
    "custom Request and APIRoute class" pattern does (fastapi docs, "Custom Request and APIRoute
    class"). Routes that read their bodies themselves parse them with pydantic-core, UTF-8 only."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def utf8_handler(request: Request) -> Response:
            return await handler(Utf8JsonRequest(request.scope, request.receive))

        return utf8_handler


class OriginGuard:
    """ASGI middleware: the Host, Origin, content-type and content-coding checks of the module
    docstring."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self._auth: tuple[int, bool, str | None] = (0, False, None)

    def _config(self, settings: Settings) -> tuple[bool, str | None]:
        """(whether the Host check applies: no token set and a loopback listen address, the host
        of ``FLEETMIND_PUBLIC_URL``), cached per settings."""
        key = id(settings)
        if self._auth[0] != key:
            public = origin_of(settings.public_url)
            check = not settings.tokens() and binds_loopback(settings.bind_host)
            self._auth = (key, check, public[1] if public else None)
        return self._auth[1], self._auth[2]

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self._refusal(scope)
        if refusal is None:
            json_when_undeclared(scope)
            await self.app(scope, receive, send)
            return
        code, detail = refusal
        body = json.dumps({"detail": detail}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
        if detail.startswith(ENCODING_REFUSAL):  # RFC 9110 section 15.5.16: the codings taken
            headers.append((b"accept-encoding", b"identity"))
        await send({"type": "http.response.start", "status": code, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def _refusal(self, scope: Any) -> tuple[int, str] | None:
        """(status, detail) of a refused request; ``None`` to serve it."""
        headers: dict[bytes, str] = {}
        for key, value in scope.get("headers", ()):
            key = key.lower()
            if key not in headers:  # the first copy, as Starlette's ``Headers.get`` reads
                headers[key] = value.decode("latin-1")
            elif key in SINGLE_HEADERS:
                return 400, (
                    f"the request has more than one {key.decode('latin-1').title()} header: send "
                    "it once (RFC 9110 section 5.3, RFC 9112 section 3.2)"
                )
        if b"host" not in headers and scope.get("http_version") == "1.1":
            return 400, "an HTTP/1.1 request must carry a Host header (RFC 9112 section 3.2)"
        path, method = scope.get("path", ""), scope.get("method", "GET")
        settings = settings_of(scope.get("app"))
        check_host, public_host = self._config(settings)
        host_header = headers.get(b"host")
        if check_host and path not in PUBLIC_PATHS and host_header is not None:
            host, _port = split_host(host_header)
            if not host_allowed(host, public_host):
                return 403, (
                    "unknown Host with no token set (DNS-rebinding protection): reach the "
                    "service by IP address or localhost, set FLEETMIND_PUBLIC_URL to this "
                    "address, or set a token"
                )
        if method not in UNSAFE_METHODS or not path.startswith("/api/"):
            return None
        origin = headers.get(b"origin")
        if origin is not None and not same_origin(origin, host_header, settings.public_url):
            return 403, "cross-origin request refused: the Origin header is not this service's"
        if not path.startswith(JSON_BODY_PREFIX) or not has_body(headers, scope):
            return None
        coding = unsupported_coding(scope.get("headers", ()))
        if coding is not None:
            return 415, (
                f"{ENCODING_REFUSAL} {coding[:40]!r}; send an uncompressed body (no "
                "Content-Encoding, or identity)"
            )
        ctype = headers.get(b"content-type")
        if ctype is not None and not is_json_media_type(ctype):
            return 415, (
                f"unsupported Content-Type {ctype.split(';', 1)[0].strip()[:80]!r}: the API takes "
                "JSON; send Content-Type: application/json (curl -d sends a form type unless "
                "told -H 'Content-Type: application/json')"
            )
        return None
