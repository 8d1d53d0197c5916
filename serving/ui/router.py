"""``/ui/``: incident pages and the fleet view (server-rendered HTML, see :mod:`fleetmind.serving.ui`).

Pages read the database and the telemetry source directly (no extra HTTP round trip); they need
the ``read`` scope, the feedback form (:mod:`fleetmind.serving.feedback`, same checks as the API) ``admin``. Without a session cookie a page redirects to
``/ui/login``, which takes the bearer token and sets the cookie (:mod:`fleetmind.serving.ui.auth`).
A request with a valid FleetMind token in ``Authorization: Bearer`` (one an SSO proxy injects)
is signed in with that token's scopes without a cookie (:func:`_bearer_session`); its forms keep
the double-submit CSRF token and the ``Origin`` check.
"""

from __future__ import annotations

import math
import re
import secrets
import time
from datetime import datetime
from functools import lru_cache, partial
from typing import Any
from urllib.parse import quote, unquote_to_bytes

from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup, escape
from pydantic import ValidationError
from sqlalchemy import case, func, literal, select

from fleetmind.data.errors import DataError, FleetMindError
from fleetmind.redact import drop_secret_params
from fleetmind.serving.db import alerts as alerts_table
from fleetmind.serving.db import incidents as incidents_table
from fleetmind.serving.db import notifications
from fleetmind.serving.deps import (
    THROTTLED_KEY,
    ServicesDep,
    check_guess,
    client_address,
    looks_like_jwt,
)
from fleetmind.serving.feedback import (
    FeedbackIn,
    IncidentNotFound,
    list_feedback,
    node_fault_types,
    record_feedback,
)
from fleetmind.serving.health import telemetry_cluster_alias
from fleetmind.serving.incidents.manager import dependents, explained_nodes
from fleetmind.serving.incidents.store import MERGE_STEPS
from fleetmind.serving.notify import (
    CALIBRATED_METHODS,
    CLOSED,
    confidence_words,
    delivery_outcome,
    explained_by,
    held_severity,
)
from fleetmind.serving.scheduler.reservations import DbReservations
from fleetmind.serving.schemas import MAX_DB_INT, from_unix
from fleetmind.serving.ui import auth
from fleetmind.serving.ui.svg import (
    MAX_TREE_NODES,
    balanced,
    edge_kinds,
    isolate,
    one_paragraph,
    path_svg,
    path_text,
    propagation_tree,
    short_id,
    timeline_svg,
    tree_svg,
    tree_text,
)


async def cookie_session() -> None:
    """Marks the pages public for the bearer-token middleware (:class:`fleetmind.serving.deps.AuthMiddleware`
    reads ``fleetmind_scope``): a browser sends no ``Authorization`` header; each page checks the
    session cookie, else a bearer token an SSO proxy injects, itself (:func:`_session`) and
    redirects to the login form without either."""


cookie_session.fleetmind_scope = "public"  # type: ignore[attr-defined]

router = APIRouter(
    prefix="/ui", tags=["ui"], include_in_schema=False, dependencies=[Depends(cookie_session)]
)

MAX_FORM_BYTES = 16 * 1024

LOW_SCORE = 0.05
"""Causes below this score (after the first) are collapsed on the incident page, graphs unopened."""

LIST_INCIDENTS = 200
"""Rows of one page of the incident list (newest first; a link leads to the older ones)."""
MAX_PAGE_ALERTS = 2000
"""Alerts an incident page reads (:func:`page_alerts`): its firing ones (the newest, up to this
many), then the newest resolved ones up to this many in all. Its per-name counts and the firing
marks on its graphs come from queries over all of its alerts."""
MAX_FIRING_NODES = 100_000
"""The most distinct nodes with a firing alert an incident page marks on its graphs."""
TABLE_ALERTS = 200
"""Rows of the page's alert table: the firing alerts first, then the latest resolved."""
TIMELINE_ROWS = 40
"""Bars of the page's timeline (:func:`fleetmind.serving.ui.svg.timeline_svg` chooses them)."""
NODE_NAME_CHARS = 28
"""Characters of a node's name on the fleet view (the middle gives way; the card is 250 px or
more wide, its 12.5 px monospace name about 7.6 px a character)."""

root_router = APIRouter(include_in_schema=False, dependencies=[Depends(cookie_session)])
"""``/`` (to the incident list) and ``/favicon.ico``: public, outside ``/ui``."""

FAVICON_SVG = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32">'
    '<rect width="32" height="32" rx="7" fill="#0f172a"/>'
    '<g fill="#60a5fa"><rect x="6" y="6" width="8" height="8" rx="2"/>'
    '<rect x="18" y="6" width="8" height="8" rx="2"/><rect x="6" y="18" width="8" height="8" rx="2"/></g>'
    '<rect x="18" y="18" width="8" height="8" rx="2" fill="#f87171"/></svg>'
)


@root_router.get("/")
def site_root() -> RedirectResponse:
    """The service's root is the incident list (which asks for a login first when tokens are set)."""
    return RedirectResponse("/ui/", status_code=307)


@root_router.get("/favicon.ico")
def favicon() -> Response:
    """The FleetMind icon (SVG), public so that a browser's automatic request is not a 401."""
    return Response(
        FAVICON_SVG,
        media_type="image/svg+xml",
        headers={"Cache-Control": "public, max-age=86400"},
    )


@lru_cache(maxsize=1)
def templates() -> Environment:
    env = Environment(
        loader=PackageLoader("fleetmind.serving.ui", "templates"),
        autoescape=select_autoescape(["html"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["age"] = age
    env.filters["ago"] = ago
    env.filters["score"] = score_text
    env.filters["iso"] = iso
    env.filters["wbr"] = breakable
    env.filters["bdi"] = bdi
    env.filters["isolate"] = isolate
    env.globals["calibrated_methods"] = CALIBRATED_METHODS  # incident.html: bars as probabilities
    return env


def bdi(text: Any) -> Markup:
    """``text`` escaped in a ``<bdi>`` element (HTML, "The bdi element"): a piece of text from an
    alert, the graph or a form, shown beside others in one line (``clusters c0, c1``, an alert
    name list, who signed the feedback). Its right-to-left letters or bidi controls (U+202E
    RIGHT-TO-LEFT OVERRIDE is legal in a Prometheus label value) then reorder only itself, never
    its neighbours. Its paragraph separators are shown as spaces
    (:func:`~fleetmind.serving.ui.svg.one_paragraph`): one would split the element, and an override
    after it would reorder the text that follows. Its bidi controls are balanced as in
    :func:`~fleetmind.serving.ui.svg.isolate` (:func:`~fleetmind.serving.ui.svg.balanced`): a
    U+2069 PDI of its own would close the element's isolate early (in Chromium an override after it
    then reversed the text beside it), so it is left out, and what the text leaves open is closed.
    Attributes, which hold no markup, use :func:`~fleetmind.serving.ui.svg.isolate`."""
    return Markup("<bdi>") + escape(balanced(one_paragraph(str(text)))) + Markup("</bdi>")


_BREAKS = re.compile(r"(?<=[/_.:,])(?=.)|(?<=[a-z])(?=[A-Z])|(?<=[A-Z\d])(?=[A-Z][a-z])")


def breakable(text: Any) -> Markup:
    """``text`` escaped, with a ``<wbr>`` (where a line may break) after each ``/ _ . : ,`` and
    between the words of a CamelCase name (``Gpu<wbr>Xid<wbr>Error``), never inside a number: a
    narrow table cell (``overflow-wrap: anywhere``) then breaks there rather than mid-word."""
    return Markup("<wbr>").join(escape(part) for part in _BREAKS.split(str(text)))


def score_text(score: Any) -> str:
    """A score to three decimals, rounded down (0.6996 is below a 0.7 threshold: "0.699")."""
    try:
        return f"{math.floor(1000 * float(score) + 1e-9) / 1000:.3f}"
    except (TypeError, ValueError, OverflowError):
        return "-"


def age(ts: float | None, now: float | None = None) -> str:
    """``ts`` (Unix seconds) as a short age: ``45s``, ``12m``, ``3h 5m``, ``2d 4h``; a time in
    the future as ``in 5m`` (a sender's clock ahead of ours)."""
    if ts is None:
        return "-"
    ahead = ts - (now or time.time())
    if ahead >= 60:
        return "in " + age(now or time.time(), (now or time.time()) + ahead)
    s = max(0, int((now or time.time()) - ts))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60}m"
    return f"{s // 86400}d {s % 86400 // 3600}h"


def ago(ts: float | None, now: float | None = None) -> str:
    """``ts`` (Unix seconds) as a phrase for "first alert ...": ``12m ago`` for a past time,
    ``in 5m`` for one a minute or more ahead of ``now`` (a sender's clock ahead of ours), ``-``
    for none (:func:`age` gives the duration)."""
    text = age(ts, now)
    return text if text == "-" or text.startswith("in ") else f"{text} ago"


def iso(ts: float | None) -> str:
    return "" if ts is None else from_unix(ts).strftime("%Y-%m-%d %H:%M:%S UTC")


def content_security_policy(nonce: str) -> str:
    """The CSP of a page: nothing loads but the page itself; its scripts carry ``nonce`` (and may
    fetch this site: the incident list refreshes itself); styles are inline (the pages' ``<style>``
    block and ``style`` attributes); forms post only here; no framing (with
    ``X-Frame-Options: DENY`` for older browsers)."""
    return (
        "default-src 'none'; "
        f"script-src 'nonce-{nonce}'; "
        "style-src 'unsafe-inline'; "
        "img-src 'self' data:; "
        "connect-src 'self'; "
        "form-action 'self'; "
        "frame-ancestors 'none'; "
        "base-uri 'none'"
    )


def render(request: Request, name: str, status_code: int = 200, **ctx: Any) -> HTMLResponse:
    """Render ``templates/<name>`` with the CSRF token (the session's when signed in; else the
    double-submit cookie's, set when new) and a fresh CSP nonce for its script."""
    token, new = auth.csrf_token(request, ctx.get("session"))
    services = getattr(request.app.state, "services", None)
    settings = services.settings if services is not None else None
    nonce = secrets.token_urlsafe(16)
    html = (
        templates()
        .get_template(name)
        .render(
            request=request,
            csrf=token,
            csp_nonce=nonce,
            auth_on=settings is not None and auth.auth_enabled(settings),
            now=time.time(),
            **ctx,
        )
    )
    resp = HTMLResponse(html, status_code=status_code)
    resp.headers["Cache-Control"] = "no-store"
    resp.headers["X-Frame-Options"] = "DENY"
    resp.headers["Referrer-Policy"] = "same-origin"
    resp.headers["Content-Security-Policy"] = content_security_policy(nonce)
    if new:
        # Lax, not Strict: a Strict cookie is not sent on a cross-site top-level navigation (a
        # link from chat, a pager or the notifier's incident_url), so the page it opens would
        # mint a new token and overwrite the cookie, and the forms already open in other tabs
        # (the login form, and every feedback form when no token is set) would fail as expired.
        # A Lax cookie is sent on such top-level GETs but not on a cross-site POST (RFC 6265bis
        # section 5.4.7; OWASP, "SameSite": Strict withholds the cookie "even when following a
        # regular link", Lax only on "CSRF-prone request methods (e.g. POST)"); and a POST also
        # needs the token repeated in its form and a same-site Origin (auth.csrf_ok).
        resp.set_cookie(
            auth.CSRF_COOKIE,
            token,
            httponly=True,
            samesite="lax",
            secure=settings is not None and auth.secure_cookies(settings, request),
            path="/ui",
        )
    return resp


def _login_redirect(request: Request) -> RedirectResponse:
    """To the login form, which sends the browser back to ``next`` once signed in. A 303 is
    followed by a GET (RFC 9110 section 15.4.4), so a form's POST (the session ended while it was
    being filled in) returns to the page the form was on, not to its POST-only action. A
    password-like query parameter (``?access_token=...``, :func:`fleetmind.redact.drop_secret_params`)
    is left out of ``next``: it would reach the Location header, the login form, the browser's
    history and the access log (the UI signs in with its form, not with a token in the URL)."""
    if request.method in ("GET", "HEAD"):
        query = drop_secret_params(request.url.query)
        target = request.url.path + (f"?{query}" if query else "")
    else:
        page = re.match(r"/ui/incidents/\d+(?=/|$)", request.url.path)
        target = page.group(0) if page else "/ui/"
    return RedirectResponse(f"/ui/login?next={quote(target)}", status_code=303)


def _bearer_session(request: Request, settings: Any) -> auth.Session | int | None:
    """The signed-in view of a request that carries a valid FleetMind token in
    ``Authorization: Bearer`` (an SSO proxy such as oauth2-proxy, ingress-nginx ``auth-url``,
    Pomerium or Cloudflare Access injecting it): that token's scopes, no cookie, no stored
    session (``None``: no header, another scheme, or an unknown token).

    The header reaches the service with every request the browser makes, cross-site ones included,
    so it is an ambient credential like a cookie: the session has no CSRF token of its own
    (``csrf`` is ``None``), and its forms use the double-submit ``fm_csrf`` cookie (a ``SameSite=Lax``
    cookie a cross-site POST does not carry) and the ``Origin`` check (:func:`auth.csrf_ok`).

    A token that is no JWT is a guess: it is checked and, when unknown, counted as a wrong token
    of the client's address in one locked step (:func:`fleetmind.serving.deps.check_guess`), so
    concurrent pages check at most ``FLEETMIND_AUTH_FAILURE_LIMIT`` of them per window; once the
    address is refused, the whole seconds it must wait (an ``int``) instead, nothing checked."""
    header = request.headers.get("authorization")
    if not header:
        return None
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        return None
    if looks_like_jwt(header):  # an SSO proxy's own token: never counted
        scopes = auth.scopes_of_token(settings, given.strip())
    else:
        check = partial(auth.scopes_of_token, settings, given.strip())
        scopes, retry = check_guess(request.app, settings, client_address(request.scope), check)
        if retry is not None:
            return retry
    return auth.Session(scopes) if scopes else None


def _throttled_page(request: Request, retry_after: int) -> Response:
    """The 429 error page for a client address past ``FLEETMIND_AUTH_FAILURE_LIMIT`` wrong tokens
    (:data:`fleetmind.serving.deps.THROTTLED_KEY`), with ``Retry-After`` (seconds)."""
    resp = render(
        request,
        "error.html",
        status_code=429,
        session=None,
        message=f"Too many wrong tokens from this address: try again in {retry_after} s.",
    )
    resp.headers["Retry-After"] = str(retry_after)
    return resp


def _session(request: Request, services: Any, scope: str = "read") -> auth.Session | Response:
    """The request's session: the ``fm_session`` cookie's, else a valid bearer token's
    (:func:`_bearer_session`); without either, a redirect to the login form; a login without
    ``scope``, the 403 page. A valid cookie signs the page in whatever ``Authorization`` says (an
    SSO proxy's own token is then never checked, nor counted as a wrong one); without one, a
    client address refused for wrong tokens gets the 429 page (:func:`_throttled_page`), also one
    refused while this request's bearer waited for its check (concurrent guesses)."""
    session = auth.read_session(request, services.settings, services.db)
    if session is None and request.scope.get(THROTTLED_KEY) is not None:
        return _throttled_page(request, request.scope[THROTTLED_KEY])
    if session is None:
        session = _bearer_session(request, services.settings)
    if isinstance(session, int):  # refused while its bearer waited for its check
        return _throttled_page(request, session)
    if session is None:
        return _login_redirect(request)
    if not session.can(scope):
        return render(
            request,
            "error.html",
            status_code=403,
            session=session,
            message=f"this login lacks the '{scope}' scope",
        )
    return session


class FormError(ValueError):
    """A form body that is not UTF-8 text: answered 400 with this message (it names the field)."""


MAX_FORM_FIELDS = 50


def _form_text(raw: bytes, field: str | None) -> str:
    """One urlencoded name or value (``+`` and ``%XX`` decoded) as strict UTF-8 (WHATWG URL,
    application/x-www-form-urlencoded parsing); :class:`FormError` naming the field if not."""
    try:
        return unquote_to_bytes(raw.replace(b"+", b" ")).decode("utf-8")
    except UnicodeDecodeError:
        what = f"field {field[:40]!r}" if field is not None else "a field name"
        raise FormError(f"the form's {what} is not UTF-8 text") from None


async def read_form(request: Request) -> dict[str, str]:
    """An urlencoded form body (first value of each field); too large or more than
    :data:`MAX_FORM_FIELDS` fields: empty. A name or value that is not UTF-8 (raw or
    percent-encoded bytes) raises :class:`FormError`: never stored with U+FFFD in its place.

    Reads at most :data:`MAX_FORM_BYTES` (plus one network chunk): the login form is served
    without a token, so nobody may make it buffer more (the authentication middleware also stops
    such bodies at ``PUBLIC_BODY_BYTES``, :mod:`fleetmind.serving.deps`)."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_FORM_BYTES:
            return {}
        chunks.append(chunk)
    pairs = [p for p in b"".join(chunks).split(b"&") if p]
    if len(pairs) > MAX_FORM_FIELDS:
        return {}
    form: dict[str, str] = {}
    for pair in pairs:
        raw_name, _, raw_value = pair.partition(b"=")
        name = _form_text(raw_name, None)
        form.setdefault(name, _form_text(raw_value, name))
    return form


def _bad_form(request: Request, session: auth.Session | None, exc: FormError) -> Response:
    """The 400 page for a form body that is not UTF-8 (:class:`FormError`)."""
    return render(request, "error.html", status_code=400, session=session, message=str(exc))


DOCS_NEXT = frozenset({"/docs", "/redoc"})
"""The API docs pages a login may return to (a browser sent to the login form from ``/docs``)."""


def _safe_next(target: str | None) -> str:
    """Only same-site paths under /ui, or the API docs pages (:data:`DOCS_NEXT`): no open
    redirect."""
    if target in DOCS_NEXT:
        return target
    if target and target.startswith("/ui") and not target.startswith("//"):
        return target
    return "/ui/"


# ---------------------------------------------------------------------------------------- login
@router.get("/login", response_class=HTMLResponse)
def login_page(
    request: Request,
    services: ServicesDep,
    next: str | None = None,  # noqa: A002
    switch: str | None = None,
) -> Response:
    """The login form. A request already signed in by a valid bearer token an SSO proxy injects
    (:func:`_bearer_session`) goes straight on to ``next`` (303) only when ``next`` is given, no
    ``switch=1`` is asked for (sign in with another token, e.g. an admin one for the feedback
    form; another ``switch`` value counts as none) and the token grants what ``next`` needs (``read``: every page and the API
    docs, which an ``admin`` token also opens); otherwise the form, saying which scopes the proxy
    signs in with and linking on to ``next`` when they open it. A browser that a session cookie
    already signs in gets the form with its bearer left unchecked, as the pages leave it (an SSO
    proxy's own token is no wrong token; checking it uncounted would let a signed-in reader
    guess other tokens without limit); a refused address gets the form without the proxy note."""
    target = _safe_next(next)
    bearer = None
    settings = services.settings
    if auth.auth_enabled(settings) and auth.read_session(request, settings, services.db) is None:
        found = _bearer_session(request, settings)
        bearer = None if isinstance(found, int) else found
    if bearer is not None and next and switch != "1" and bearer.can("read"):
        return RedirectResponse(target, status_code=303)
    return render(
        request,
        "login.html",
        next=target,
        error=None,
        session=None,
        proxy_scopes=sorted(bearer.scopes) if bearer is not None else None,
        proxy_can_go_on=bearer is not None and bearer.can("read"),
    )


@router.post("/login", response_class=HTMLResponse)
async def login(request: Request, services: ServicesDep) -> Response:
    settings = services.settings
    try:
        form = await read_form(request)
    except FormError as exc:
        return render(
            request, "login.html", status_code=400, next="/ui/", error=str(exc), session=None
        )
    target = _safe_next(form.get("next"))
    if not auth.csrf_ok(request, form.get("csrf"), public_url=settings.public_url):
        return render(
            request,
            "login.html",
            status_code=403,
            next=target,
            error=_refusal_text(request, settings),
            session=None,
        )
    if not auth.auth_enabled(settings):
        return RedirectResponse(target, status_code=303)
    # an address past FLEETMIND_AUTH_FAILURE_LIMIT wrong tokens: refused before the token is
    # checked (a right guess is not confirmed); the bearer header's wrong tokens count too
    check = partial(auth.scopes_of_token, settings, form.get("token", "").strip())
    scopes, retry = check_guess(request.app, settings, client_address(request.scope), check)
    if retry is not None:
        resp = render(
            request,
            "login.html",
            status_code=429,
            next=target,
            error=f"Too many wrong tokens from this address: try again in {retry} s.",
            session=None,
        )
        resp.headers["Retry-After"] = str(retry)
        return resp
    if not scopes or not ({"read", "admin"} & scopes):
        return render(
            request,
            "login.html",
            status_code=401,
            next=target,
            error="That token is not valid for reading incidents.",
            token_refused=True,  # the field is marked aria-invalid (WCAG 2.1 SC 3.3.1)
            session=None,
        )
    # a new session id at every login (no fixation); the database off the event loop
    await run_in_threadpool(auth.end_session, request, services.db)
    value, max_age = await run_in_threadpool(
        auth.start_session, services.db, settings, form.get("token", "").strip(), scopes
    )
    resp = RedirectResponse(target, status_code=303)
    # Lax, not Strict: a link from chat, a pager or Alertmanager (the notifier's incident_url)
    # is a cross-site top-level GET, which gets a Lax cookie and so opens the page signed in;
    # cross-site POSTs still get none (RFC 6265bis section 5.4.7; OWASP CSRF Prevention Cheat
    # Sheet, "SameSite Cookie Attribute"), and every POST also needs the session's CSRF token and
    # a same-site Origin (auth.csrf_ok)
    resp.set_cookie(
        auth.SESSION_COOKIE,
        value,
        max_age=max_age,
        httponly=True,
        samesite="lax",
        secure=auth.secure_cookies(settings, request),
        path="/",
    )
    return resp


@router.post("/logout")
async def logout(request: Request, services: ServicesDep) -> Response:
    """End the session: its row is deleted, so every copy of the cookie stops working."""
    session = await run_in_threadpool(auth.read_session, request, services.settings, services.db)
    try:
        form = await read_form(request)
    except FormError as exc:
        return _bad_form(request, session, exc)
    public_url = services.settings.public_url
    if session is None and auth.same_origin(request, public_url):
        # the session already ended (a stale tab: its form's token belonged to it): nothing to
        # end, so no forgery to fear; clear the cookies and show the login form
        resp = RedirectResponse("/ui/login", status_code=303)
        resp.delete_cookie(auth.SESSION_COOKIE, path="/")
        resp.delete_cookie(auth.CSRF_COOKIE, path="/ui")
        return resp
    if not auth.csrf_ok(request, form.get("csrf"), session, public_url):
        return _form_refused(request, session, services.settings)
    await run_in_threadpool(auth.end_session, request, services.db)
    resp = RedirectResponse("/ui/login", status_code=303)
    resp.delete_cookie(auth.SESSION_COOKIE, path="/")
    return resp


# ---------------------------------------------------------------------------------------- incidents
@router.get("", include_in_schema=False)
def ui_root() -> RedirectResponse:
    return RedirectResponse("/ui/", status_code=307)


@router.get("/", response_class=HTMLResponse)
def incidents_page(
    request: Request,
    services: ServicesDep,
    show: str = "open",
    before: str | None = None,
) -> Response:
    session = _session(request, services)
    if isinstance(session, Response):
        return session
    before_id = None if before is None else _db_id(before, lowest=1)
    if show not in ("open", "recent") or (before is not None and before_id is None):
        return render(
            request,
            "error.html",
            status_code=422,
            session=session,
            message="The list takes show=open or show=recent and before=<incident number>.",
        )
    db = services.db
    rows = db.list_incidents(
        "open" if show == "open" else None, limit=LIST_INCIDENTS + 1, before=before_id
    )
    older = rows[LIST_INCIDENTS - 1]["id"] if len(rows) > LIST_INCIDENTS else None
    rows = rows[:LIST_INCIDENTS]
    if show == "recent":
        rows = [r for r in rows if r["status"] != "merged"]
    counts = {s: db.count_incidents(s) for s in ("open", "resolved")}
    return render(
        request,
        "incidents.html",
        session=session,
        incidents=rows,
        show=show,
        counts=counts,
        older=older,
        before=before_id,
        section="incidents",
    )


def _db_id(text: str, lowest: int = 0) -> int | None:
    """``text`` as a row id (decimal digits, ``lowest`` to :data:`MAX_DB_INT`), else ``None``."""
    if not (text.isascii() and text.isdigit()) or len(text) > len(str(MAX_DB_INT)):
        return None
    value = int(text)
    return value if lowest <= value <= MAX_DB_INT else None


def _no_incident(request: Request, session: auth.Session, incident_id: object) -> HTMLResponse:
    return render(
        request,
        "error.html",
        status_code=404,
        session=session,
        message=f"There is no incident {incident_id}.",
    )


@router.get("/incidents/{incident_id}", response_class=HTMLResponse)
def incident_page(
    request: Request,
    services: ServicesDep,
    incident_id: str,
) -> Response:
    """One incident; an id that is no incident number is a 404 page like a missing one."""
    session = _session(request, services)
    if isinstance(session, Response):
        return session
    number = _db_id(incident_id)
    if number is None:
        return _no_incident(request, session, incident_id[:40])
    return _incident(request, services, number, session)


def _incident(
    request: Request,
    services: Any,
    incident_id: int,
    session: auth.Session,
    status_code: int = 200,
    flash: str | None = None,
    form: dict[str, str] | None = None,
) -> Response:
    """Incident ``incident_id``'s page, with ``flash`` (a message about the feedback form) and
    ``form`` (what was typed in it, kept) when a form was refused; a merged incident redirects to
    the one it was merged into (303), or, with a message or a kept form (a redirect would lose
    both), shows that one's page with them, with ``status_code``."""
    row = services.db.get_incident(incident_id)
    if row is None:
        return _no_incident(request, session, incident_id)
    merged = _merged_note(request.query_params.get("merged_from", ""))
    if row["status"] == "merged" and row["merged_into"] is not None:
        if flash is None and form is None:
            target = f"/ui/incidents/{row['merged_into']}?merged_from={incident_id}"
            return RedirectResponse(target, status_code=303)
        # the page of the incident it ended in (merges can chain), its form posting there
        merged = _merged_note(str(incident_id))
        row, missing = _merge_target(services, row)
        if row is None:
            return _no_incident(request, session, missing)
        incident_id = row["id"]
    # its firing alerts first, then the newest resolved (bounded); the per-name counts and the
    # firing nodes come from all of its alerts (one grouped query each)
    alerts = page_alerts(services.db, incident_id)
    counts = alert_counts(services.db, incident_id)
    graph = services.graphs.graph
    firing_nodes = firing_nodes_of(services.db, incident_id)
    causes = _cause_graphs(graph, row["causes"] or [], firing_nodes)
    feedback = list_feedback(services.db, incident_id)  # newest first
    latest = feedback[0] if feedback else None
    for c in causes:
        c["confirmed_by"] = latest["by"] if latest and latest["root_cause"] == c["node"] else None
        c["low"] = c["rank"] > 1 and (
            float(c.get("score") or 0.0) < LOW_SCORE or not c.get("fault_type")
        )
    timeline = _timeline(alerts)
    alert_names = sorted(counts.items(), key=lambda kv: (-kv[1][0], kv[0]))
    sent, failing, dropped, held = (
        _notified(services, row, causes[0]) if causes else (False, None, None, None)
    )
    saved = request.query_params.get("feedback") == "saved"
    return render(
        request,
        "incident.html",
        status_code=status_code,
        session=session,
        incident=row,
        causes=[c for c in causes if not c["low"]],
        low_causes=[c for c in causes if c["low"]],
        low_score=LOW_SCORE,
        confidence=confidence_words(
            causes[0]["score"],
            services.settings,
            row.get("method"),
            causes[0],
            sent=sent,
            is_open=row["status"] == "open",
            failing=failing,
            dropped=dropped,
            held=held,
            calibrated=_calibrated(services, row),
        )
        if causes
        else None,
        engineer_root=latest,
        # firing first (oldest start first), then resolved (latest first)
        alerts=sorted(
            alerts,
            key=lambda a: (
                a["status"] != "firing",
                a["starts_ts"] * (1 if a["status"] == "firing" else -1),
            ),
        )[:TABLE_ALERTS],
        alerts_read=len(alerts),
        alerts_total=sum(n for n, _ in counts.values()),
        table_alerts=TABLE_ALERTS,
        timeline_rows=min(len(alerts), TIMELINE_ROWS),
        timeline=timeline,
        alert_names=[(name, n) for name, (n, _) in alert_names[:10]],
        alert_kinds=len(alert_names),
        section="incidents",
        feedback=feedback,
        can_admin=session.can("admin"),
        # what became of the feedback form, shown beside it; the merged note at the top
        flash=flash
        or ("Thank you: your feedback is stored as a training label." if saved else None),
        flash_kind="err" if flash else "ok",
        merged_note=merged,
        form=form or {},
        feedback_nodes=(nodes := _feedback_nodes(graph, causes, row["nodes"] or [])),
        fault_choices=_fault_choices(graph, nodes),
    )


def page_alerts(db: Any, incident_id: int, limit: int = MAX_PAGE_ALERTS) -> list[dict[str, Any]]:
    """The alerts an incident page shows, at most ``limit``: the incident's firing alerts (the
    newest ``limit`` of them), then its newest resolved alerts in the room left. A long incident's
    firing alert is shown however many alerts flapped (fired and resolved) after it."""
    c = alerts_table.c
    firing = select(alerts_table).where(c.incident_id == incident_id, c.status == "firing")
    with db.read() as conn:
        out = [dict(r._mapping) for r in conn.execute(firing.order_by(c.id.desc()).limit(limit))]
        if len(out) < limit:
            rest = (
                select(alerts_table)
                .where(c.incident_id == incident_id, c.status != "firing")
                .order_by(c.id.desc())
                .limit(limit - len(out))
            )
            out.extend(dict(r._mapping) for r in conn.execute(rest))
    return out


def alert_counts(db: Any, incident_id: int) -> dict[str, tuple[int, int]]:
    """Alert name (``?`` for none) -> ``(alerts, firing alerts)`` over all of the incident's
    alerts (one ``GROUP BY`` query; the page's alert list is capped, its counts are not)."""
    c = alerts_table.c
    q = (
        select(
            c.alertname,
            func.count(),
            func.coalesce(func.sum(case((c.status == "firing", 1), else_=0)), 0),
        )
        .where(c.incident_id == incident_id)
        .group_by(c.alertname)
    )
    out: dict[str, tuple[int, int]] = {}
    with db.read() as conn:
        for name, n, firing in conn.execute(q):
            key = name or "?"
            had = out.get(key, (0, 0))
            out[key] = (had[0] + int(n), had[1] + int(firing))
    return out


def firing_nodes_of(db: Any, incident_id: int) -> set[str]:
    """The nodes of all of the incident's firing alerts (at most :data:`MAX_FIRING_NODES`)."""
    c = alerts_table.c
    q = (
        select(c.node)
        .where(c.incident_id == incident_id, c.status == "firing", c.node.is_not(None))
        .distinct()
        .limit(MAX_FIRING_NODES)
    )
    with db.read() as conn:
        return {n for (n,) in conn.execute(q) if n}


def _merge_target(services: Any, row: dict[str, Any]) -> tuple[dict[str, Any] | None, int]:
    """The incident a merged ``row`` ended in (merges can chain; at most 100 steps), or
    ``(None, id)`` when the chain names an incident ``id`` that does not exist."""
    for _ in range(100):
        if row["status"] != "merged" or row["merged_into"] is None:
            break
        target = services.db.get_incident(row["merged_into"])
        if target is None:
            return None, int(row["merged_into"])
        row = target
    return row, int(row["id"])


def _timeline(alerts: list[dict[str, Any]]) -> Markup:
    """The incident's timeline drawing: each alert's name and node, with its cluster when the
    nodes span several."""
    clusters = {n.split("/", 1)[0] for a in alerts if (n := a["node"] or "").count("/") >= 2}
    return Markup(
        timeline_svg(
            [
                (
                    a["starts_ts"],
                    a["ends_ts"],
                    (a["alertname"] or "?", where(a["node"], len(clusters) > 1)),
                    a["status"],
                )
                for a in alerts
            ],
            max_rows=TIMELINE_ROWS,
        )
    )


def _feedback_nodes(graph: Any, causes: list[dict[str, Any]], nodes: list[str]) -> list[str]:
    """The feedback form's suggestions: the causes, then the incident's alerting nodes, those the
    served graph still has (feedback on another node is refused)."""
    return [n for n in dict.fromkeys([c["node"] for c in causes] + list(nodes)) if n in graph.index]


def _fault_choices(graph: Any, nodes: list[str]) -> list[tuple[str, list[str]]]:
    """The feedback form's fault types: ``[(node kind, or "kind (role)", its types)]`` for the
    kinds of ``nodes`` (the form's suggestions, all in ``graph``), each the catalog's types of
    that kind (:func:`fleetmind.serving.feedback.node_fault_types`); kinds where no fault starts
    left out. Another type is refused on saving (422, naming the node's)."""
    out: dict[str, list[str]] = {}
    for nid in nodes:
        node = graph.node(nid)
        role = node.attrs.get("role") if isinstance(node.attrs, dict) else None
        label = f"{node.kind} ({role})" if isinstance(role, str) and role else str(node.kind)
        if label not in out and (types := node_fault_types(node)):
            out[label] = types
    return sorted(out.items())


def where(node: str | None, with_cluster: bool = False) -> str:
    """An alert's node as the timeline names it: the node id without its cluster and kind
    (``<cluster>/<kind>/<name>``: ``c0/gpu/c0-h1/3`` is ``c0-h1/3``, host and GPU), the cluster
    kept (``c0/c0-h1/3``) when ``with_cluster`` (the incident's nodes are in several clusters); an
    id of fewer segments (``global/dns``) its last one, or whole ``with_cluster``; none ``-``."""
    if not node:
        return "-"
    parts = node.split("/")
    if len(parts) >= 3:
        own = "/".join(parts[2:])
        return f"{parts[0]}/{own}" if with_cluster else own
    return node if with_cluster else parts[-1]


def explained_alerting(graph: Any, cause: dict[str, Any], alerting: set[str]) -> set[str]:
    """The nodes of ``alerting`` that stored cause ``cause`` (``{"node": id, ...}``) explains: a
    fault of it reaches them along dependencies on ``graph``
    (:func:`~fleetmind.serving.incidents.manager.explained_nodes`, the rule the notifier judges
    by), with those the incident's ranking stored for its top cause
    (:func:`~fleetmind.serving.notify.explained_by`, which also follows the pod-to-GPU edges its
    alerts named). A pod does not explain its GPU's XID, nor a GPU another GPU of its host. The
    walk on ``graph`` is bounded as the drawing's (4 hops, :data:`~fleetmind.serving.ui.svg.MAX_TREE_NODES`
    nodes reached), so that a page's cost does not grow with the graph."""
    node = str(cause.get("node"))
    reached = set(
        explained_nodes(
            graph, node, alerting, len(alerting) + 1, max_depth=4, max_visits=MAX_TREE_NODES
        )
    )
    return (reached | explained_by(cause)) & set(alerting) - {node}


def _cause_graphs(
    graph: Any, stored: list[dict[str, Any]], firing_nodes: set[str]
) -> list[dict[str, Any]]:
    """The stored causes with ``rank``, their propagation graph (``svg``) and its text equivalent
    (``text``, id ``graph-text-<rank>``, which describes the drawing for screen readers),
    ``reached`` and ``in_graph`` (False for a node the served graph no longer has: feedback on it
    is refused, so the page marks it and offers no Confirm)."""
    causes = []
    for rank, c in enumerate(stored, start=1):
        path = list(c.get("path") or [c["node"]])
        title = (
            f"Propagation of cause {rank} ({isolate(c['node'])}) to the alerting nodes it explains"
        )
        explained = explained_alerting(graph, c, firing_nodes)  # along dependencies only
        depth, edges = propagation_tree(graph, c["node"], explained, path, reach=dependents(graph))
        arrow = f"arrow-{rank}"  # one drawing per cause: a marker id of its own in the page
        text_id = f"graph-text-{rank}"
        if depth:
            kinds = {n: graph.node(n).kind for n in depth}
            others = sorted(firing_nodes - explained - {c["node"]})
            hot = explained | ({c["node"]} & firing_nodes)  # the cause's own alerts, too
            svg = tree_svg(depth, edges, kinds, hot, path, title, arrow, others, text_id)
            text = tree_text(depth, edges, kinds, hot, text_id, path, others)
        else:  # the cause is not in the served graph (replaced since): its stored path alone
            kinds = {n: graph.node(n).kind for n in path if n in graph.index}
            kinds.setdefault(c["node"], c.get("kind") or "?")
            hops = edge_kinds(graph, path)
            svg = path_svg(
                path, kinds, firing_nodes, hops, title=title, marker_id=arrow, text_id=text_id
            )
            text = path_text(path, kinds, firing_nodes, text_id, hops)
        causes.append(
            {
                **c,
                "rank": rank,
                "svg": Markup(svg),
                "text": Markup(text),
                "reached": len(depth),
                "in_graph": c["node"] in graph.index,
            }
        )
    return causes


def _calibrated(services: Any, incident: dict[str, Any]) -> bool | None:
    """Whether the model that ranked ``incident`` has a calibrated top score
    (``LoadedModel.calibrated`` of the served RCA model when it is the one that ranked it, by
    method and version); ``None`` when that is not known (another model ranked it)."""
    try:
        model = services.registry.current.rca
    except RuntimeError:  # models not loaded (the lifespan always loads them)
        return None
    if model.method != incident.get("method") or model.version != incident.get("model_version"):
        return None
    return model.calibrated


def _closed_with(n: Any, incident: dict[str, Any]) -> bool:
    """Whether notification row ``n`` was resolved because its incident closed (a row from
    before ``resolved_because``: whether the incident is closed), not withdrawn while open."""
    if n["state"] != "resolved":
        return False
    because = (n["annotations"] or {}).get("resolved_because")
    return because == CLOSED or (because is None and incident.get("status") != "open")


def _notified(
    services: Any, incident: dict[str, Any], top: dict[str, Any]
) -> tuple[bool, str | None, str | None, str | None]:
    """What became of the notification of ``top`` at the severity it has now, as
    :func:`~fleetmind.serving.notify.delivery_outcome` says, and the severity its row holds:
    ``(sent, failing, dropped, held)``. Only a ``notifications`` row naming this cause and
    severity counts (the severity :func:`~fleetmind.serving.notify.held_severity` gives against
    the row's, as the notifier judges it: its firing row's, or, once the incident closed, the
    severity its resolved row was sent at), and only a firing message a channel took is "sent"
    (a dropped or never delivered one is not, resolved or not)."""
    nothing = (False, None, None, None)
    with services.db.read() as conn:
        row = conn.execute(
            select(notifications).where(notifications.c.incident_id == incident["id"])
        ).first()
    n = None if row is None else row._mapping
    held = None
    if n is not None and n["cause_node"] == top["node"]:
        if n["state"] == "firing" or _closed_with(n, incident):
            held = (n["labels"] or {}).get("severity")
    severity = held_severity(top.get("score"), held, services.settings, incident.get("method"), top)
    if severity is None or n is None:
        return nothing
    if n["cause_node"] != top["node"] or (n["labels"] or {}).get("severity") != severity:
        return nothing
    return (*delivery_outcome(n), held)


def _merged_note(merged_from: str) -> str | None:
    """The page's note for a visitor redirected from a merged incident (``?merged_from=N``)."""
    if merged_from.isdigit() and len(merged_from) <= 10:
        return (
            f"Incident #{merged_from} was merged into this one (their alerts joined on the graph)."
        )
    return None


@router.get("/incidents/{incident_id}/feedback")
def incident_feedback_page(request: Request, services: ServicesDep, incident_id: str) -> Response:
    """The feedback form's action read with ``GET`` (a refused form's page bookmarked, reloaded or
    reached with Back and Forward): to the form on the incident page (303, RFC 9110 section
    15.4.4), not a 404. An id that is no incident number gets the incident page's 404."""
    session = _session(request, services)
    if isinstance(session, Response):
        return session
    number = _db_id(incident_id)
    if number is None:
        return _no_incident(request, session, incident_id[:40])
    return RedirectResponse(f"/ui/incidents/{number}#feedback", status_code=303)


@router.post("/incidents/{incident_id}/feedback", response_class=HTMLResponse)
async def incident_feedback(
    request: Request,
    services: ServicesDep,
    incident_id: str,
) -> Response:
    """The feedback form of the incident page (admin scope; same checks as the API). An id that
    is no incident number is the same HTML 404 page as :func:`incident_page`'s, not JSON. The
    session is read off the event loop (its digest check is scrypt, ~100 ms uncached)."""
    session = await run_in_threadpool(_session, request, services, scope="admin")
    if isinstance(session, Response):
        return session
    number = _db_id(incident_id)
    if number is None:
        return _no_incident(request, session, incident_id[:40])
    return await _record_feedback(request, services, number, session)


def _refusal_text(request: Request, settings: Any) -> str:
    """Why a form was refused: its origin (:func:`auth.origin_refusal`), else its token."""
    origin = auth.origin_refusal(request, settings.public_url)
    if origin is not None:
        return f"Refused: {origin}."
    return "The form expired; reload the page and try again."


EXPIRED_KEPT = (
    "The form had expired (the page was older than its form token), so nothing was saved; "
    "what you typed is kept below: check it and save again."
)


MERGED_KEPT = (
    "Incident #{} was merged into this one since its page was opened, so nothing was saved; "
    "what you typed is kept below: check it and save it for this incident."
)


STALE_KEPT = (
    "{by} saved a newer verdict ({root}{fault}) since this page was opened, so nothing was "
    "saved; it is shown below, and what you typed is kept: check it and save again."
)

NEWER_TOO = " {by} also saved a newer verdict ({root}{fault}) since the page was opened."
"""Added to another refusal's message (an expired form, a merged incident) when newer feedback
came too: the page then comes back with the newest id, so the verdict must be named now."""

UNSHOWN_KEPT = (
    "The latest verdict on this incident is {by}'s ({root}{fault}); your page did not show it, "
    "so nothing was saved; it is shown below, and what you typed is kept: check it and save again."
)
""":data:`STALE_KEPT` for a verdict that may predate the page: one a merge brought from another
incident (feedback ids are global: the page's ``seen`` says only that it did not show it)."""

UNSHOWN_TOO = (
    " The latest verdict on this incident is {by}'s ({root}{fault}); your page did not show it."
)
""":data:`NEWER_TOO` for a verdict that may predate the page (:data:`UNSHOWN_KEPT`)."""

FORM_FIELDS = ("root_cause", "fault_type", "by", "note")
"""The feedback form's fields kept when a post is refused (its hidden ``seen`` is not: the page
shows the newest feedback id it has, and the message names any newer than the form's)."""

SEEN_DIGITS = 18
"""The longest ``seen`` read (an id, ASCII digits; a 64-bit id has at most 19)."""


def _last_merge_into(services: Any, incident_id: int) -> float | None:
    """When an incident was last merged into ``incident_id``, directly or along a chain (at
    most :data:`~fleetmind.serving.incidents.store.MERGE_STEPS` steps), unix seconds (its
    ``closed_ts``); ``None``: never. One recursive query, read only when a form is refused."""
    inc = incidents_table
    merged = (inc.c.status == "merged") & inc.c.merged_into.is_not(None)
    chain = (
        select(inc.c.id, inc.c.closed_ts, literal(1).label("steps"))
        .where(merged, inc.c.merged_into == incident_id)
        .cte("chain", recursive=True)
    )
    up = inc.alias("up")
    chain = chain.union_all(
        select(up.c.id, up.c.closed_ts, chain.c.steps + 1).where(
            (up.c.status == "merged") & (up.c.merged_into == chain.c.id),
            chain.c.steps < MERGE_STEPS,
        )
    )
    with services.db.read() as conn:
        return conn.execute(select(func.max(chain.c.closed_ts))).scalar()


def _newer_feedback(services: Any, incident_id: int, form: dict[str, str]) -> dict[str, Any] | None:
    """Feedback newer than the newest the page showed (its hidden ``seen``: that feedback's id,
    ``0`` for none) stored since, e.g. by a colleague, on incident ``incident_id`` or, merged, the
    one it ended in: its ``by``, ``root`` and ``fault`` (``", <type>"`` or ``""``) for
    :data:`STALE_KEPT` or :data:`NEWER_TOO`, each a bidi isolate
    (:func:`~fleetmind.serving.ui.svg.isolate`: the message is one text), and ``since``: whether
    it is known to be stored after the page was rendered: for a form of a merged incident, when
    saved after that incident's merge (its ``closed_ts``: its page was rendered before), else
    when nothing was ever merged into the form's incident (:func:`_last_merge_into`). Otherwise a
    merge, or housekeeping moving a row an older replica stored on a merged incident after its
    merge, may have brought it from another incident, saved before the page (ids are global, and
    its time says when it was saved, not when it arrived here), and :func:`_newer_text` says only
    that the page did not show it. ``None``:
    none, or a form without ``seen`` (a page opened before the form had it, or not ASCII
    digits)."""
    seen = form.get("seen", "").strip()
    if not (seen.isascii() and seen.isdigit()) or len(seen) > SEEN_DIGITS:
        return None
    row = services.db.get_incident(incident_id)
    rendered_before = None  # a merged incident's page was rendered before its merge
    if row is not None and row["status"] == "merged":
        rendered_before = row["closed_ts"]
        row, _ = _merge_target(services, row)
    if row is None:
        return None
    feedback = list_feedback(services.db, int(row["id"]))
    if not feedback or feedback[0]["id"] <= int(seen):
        return None
    latest = feedback[0]
    if rendered_before is not None:
        saved = datetime.fromisoformat(latest["created_at"]).timestamp()
        since = saved > float(rendered_before)
    else:
        since = _last_merge_into(services, int(row["id"])) is None
    fault = f", {isolate(latest['fault_type'])}" if latest["fault_type"] else ""
    return {
        "by": isolate(latest["by"]),
        "root": isolate(latest["root_cause"]),
        "fault": fault,
        "since": since,
    }


def _newer_text(newer: dict[str, Any] | None, alone: bool) -> str:
    """The words for :func:`_newer_feedback`'s verdict: the whole message (``alone``,
    :data:`STALE_KEPT`) or what another refusal adds (:data:`NEWER_TOO`); ``""`` for none. A
    verdict not known to be newer than the page is named as one it did not show."""
    if newer is None:
        return ""
    if alone:
        return (STALE_KEPT if newer["since"] else UNSHOWN_KEPT).format(**newer)
    return (NEWER_TOO if newer["since"] else UNSHOWN_TOO).format(**newer)


def _form_refused(request: Request, session: auth.Session | None, settings: Any) -> Response:
    """The 403 page for a form whose CSRF token or origin does not check out."""
    return render(
        request,
        "error.html",
        status_code=403,
        session=session,
        message=_refusal_text(request, settings),
    )


async def _record_feedback(
    request: Request, services: Any, incident_id: int, session: auth.Session
) -> Response:
    """Check and store the feedback form posted for incident ``incident_id``."""
    try:
        form = await read_form(request)
    except FormError as exc:
        return _bad_form(request, session, exc)
    if not auth.csrf_ok(request, form.get("csrf"), session, services.settings.public_url):
        if request.headers.get("origin") is not None and auth.same_origin(
            request, services.settings.public_url
        ):
            # from one of our pages (the browser says so), with a stale token (its tab was opened
            # before the token changed): the page again, with a fresh token and what was typed
            # (escaped by the template), so nothing is lost; nothing is stored; newer feedback
            # is named now, as the page comes back with the newest id
            kept = {k: form.get(k, "") for k in FORM_FIELDS}
            newer = _newer_feedback(services, incident_id, form)
            text = EXPIRED_KEPT + _newer_text(newer, alone=False)
            return _incident(request, services, incident_id, session, 403, text, kept)
        return _form_refused(request, session, services.settings)
    newer = _newer_feedback(services, incident_id, form)
    row = services.db.get_incident(incident_id)
    if row is not None and row["status"] == "merged" and row["merged_into"] is not None:
        # a form opened before the merge: the page it was merged into, with what was typed
        # (feedback is stored on that incident, record_feedback refuses this one)
        text = MERGED_KEPT.format(incident_id) + _newer_text(newer, alone=False)
        return _incident(request, services, incident_id, session, 422, text, form)
    if newer is not None:  # a colleague's verdict came after the page: show it, save nothing
        kept = {k: form.get(k, "") for k in FORM_FIELDS}
        return _incident(
            request, services, incident_id, session, 409, _newer_text(newer, alone=True), kept
        )
    if not form.get("by", "").strip():
        return _incident(
            request,
            services,
            incident_id,
            session,
            422,
            "Enter your name to sign the feedback.",
            form,
        )
    try:
        fb = FeedbackIn(
            root_cause=form.get("root_cause", ""),
            by=form.get("by", ""),
            note=form.get("note") or None,
            fault_type=form.get("fault_type") or None,
        )
        record_feedback(services.db, services.graphs.graph, incident_id, fb, channel="ui")
    except IncidentNotFound:
        return _no_incident(request, session, incident_id)
    except (ValidationError, DataError) as err:
        text = (
            "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())
            if isinstance(err, ValidationError)
            else str(err)
        )
        return _incident(request, services, incident_id, session, 422, text, form)
    return RedirectResponse(f"/ui/incidents/{incident_id}?feedback=saved", status_code=303)


# ---------------------------------------------------------------------------------------- fleet
@router.get("/fleet", response_class=HTMLResponse)
def fleet_page(request: Request, services: ServicesDep) -> Response:
    session = _session(request, services)
    if isinstance(session, Response):
        return session
    error = services.telemetry_error
    clusters: dict[str, dict[str, Any]] = {}
    source = as_of = None
    marks, marks_cut = _incident_marks(services)
    if services.telemetry is not None:
        try:
            snap = services.telemetry.snapshot()
        except FleetMindError as err:
            snap, error = None, str(err)
        if snap is not None:
            source = snap.source
            as_of = _as_of(snap.collected_ts)
            held = services.reservations
            if isinstance(held, DbReservations):
                # the holds as decisions on this snapshot see them: a bound pod's hold ends once
                # this snapshot shows it (not at the row's later deadline: no double count)
                held = held.view(snap)
            alias = telemetry_cluster_alias(
                services.graphs.graph.cluster_names(), {n.cluster for n in snap.nodes}
            )
            if alias:  # one cluster each side: the graph's name is telemetry's (as alerts map)
                marks = {(alias.get(k[0], k[0]), *k[1:]): v for k, v in marks.items()}
            for n in snap.nodes:
                cl = clusters.setdefault(
                    n.cluster,
                    {"name": n.cluster, "nodes": [], "gpus": 0, "alloc": 0.0, "util": [], "bad": 0},
                )
                cl["nodes"].append(_fleet_node(n, held, marks))
                for g in cl["nodes"][-1]["gpus"]:
                    cl["gpus"] += 1
                    cl["alloc"] += g["used"]
                    cl["bad"] += int(not g["healthy"] or bool(g["incidents"]))
                    if g["util"] is not None:
                        cl["util"].append(g["util"])
    for cl in clusters.values():
        cl["alloc_pct"] = 100 * cl["alloc"] / cl["gpus"] if cl["gpus"] else 0.0
        cl["util_pct"] = sum(cl["util"]) / len(cl["util"]) if cl["util"] else None
    return render(
        request,
        "fleet.html",
        session=session,
        clusters=sorted(clusters.values(), key=lambda c: c["name"]),
        source=source,
        as_of=as_of,
        error=error,
        marks_cut=marks_cut,
        mark_rows=f"{FLEET_MARK_ROWS:,}",
        section="fleet",
    )


def _as_of(collected_ts: float, now: float | None = None) -> str:
    """When the fleet page's snapshot was collected: ``as of HH:MM:SS UTC (N s ago)``. With
    stale-while-refresh a page may show a snapshot up to ``FLEETMIND_TELEMETRY_TTL_S +
    FLEETMIND_TELEMETRY_MAX_STALE_S`` (35 s) old while a newer one is read."""
    ago = max(0, int((time.time() if now is None else now) - collected_ts))
    return f"as of {from_unix(collected_ts).strftime('%H:%M:%S')} UTC ({ago} s ago)"


def _fleet_node(
    n: Any, reservations: Any, marks: dict[tuple[str, ...], list[str]]
) -> dict[str, Any]:
    """One node of the fleet view: per GPU the allocated share (telemetry's ``free_milli`` and the
    service's own reservations, 0..1), utilisation, memory, health and the open incidents on it."""
    host_marks = marks.get((n.cluster, n.name), [])
    gpus = []
    for g in n.gpus:
        held = reservations.gpu_used(n.cluster, n.name, g.index)
        telemetry_used = (1000 - max(0, min(1000, g.free_milli))) / 1000
        gpu_key = g.index if getattr(g, "mig_parent", None) is None else g.mig_parent
        gpus.append(
            {
                "index": g.index,
                "model": g.model,
                "used": min(1.0, telemetry_used + held / 1000),
                "reserved": held / 1000,
                "util": g.util_pct,
                "mem_used": g.mem_used_mib,
                "mem_total": g.mem_total_mib,
                "healthy": g.healthy,
                "unallocatable": getattr(g, "unallocatable", False),
                "xid": g.xid_errors,
                # a graph GPU (and its alerts' gpu label) is the physical GPU: a MIG instance's
                # index is 100 * (parent + 1) + GI, so its marks are its parent's
                "incidents": sorted(
                    set(host_marks + marks.get((n.cluster, n.name, str(gpu_key)), []))
                ),
            }
        )
    for g in gpus:
        g["text"] = gpu_text(g)
    models = sorted({g["model"] for g in gpus if g["model"]})
    return {
        "name": n.name,
        "short": short_id(n.name, NODE_NAME_CHARS),
        "flagged": [g for g in gpus if not g["healthy"] or g["incidents"]],  # as cl["bad"] counts
        "gpus": gpus,
        "used": sum(g["used"] for g in gpus),
        "model": ", ".join(map(isolate, models)),
        "incidents": sorted({m for g in gpus for m in g["incidents"]} | set(host_marks)),
        # cordoned or not Ready (kube-state-metrics): placements leave the node out
        "unschedulable": getattr(n, "unschedulable_reason", None),
    }


def gpu_text(g: dict[str, Any]) -> str:
    """What the fleet view says of one GPU (its square's tooltip and accessible name): index,
    model, allocated share (0..1 as %), FleetMind's reservation, utilisation (%), memory (MiB),
    health (the XID) and the open incidents on it."""
    text = f"GPU {g['index']} {isolate(str(g['model']))}: {100 * g['used']:.0f}% allocated"
    if g["reserved"]:
        text += f" ({100 * g['reserved']:.0f}% reserved by FleetMind)"
    if g["util"] is not None:
        text += f", util {g['util']:.0f}%"
    if g["mem_total"]:
        text += f", {g['mem_used'] or 0:.0f}/{g['mem_total']:.0f} MiB"
    if not g["healthy"]:
        text += ", UNHEALTHY" + (f" (XID {g['xid']:.0f})" if g["xid"] else "")
        if g.get("unallocatable"):
            text += ", out of the node's allocatable nvidia.com/gpu (device plugin)"
    if g["incidents"]:
        # each isolated (svg.isolate): an alert name ending in a right-to-left override reverses
        # neither the marks after it nor the rest of the text
        text += ", open incident: " + "; ".join(map(isolate, g["incidents"]))
    return text


FLEET_MARK_ROWS = 100_000
"""Marks the fleet view makes at most (:func:`_incident_marks`): distinct (open incident,
alerting GPU or host of the graph, alert name) entries, oldest incident first; past them the page
says the marks are cut. Alerts on other nodes (pods, services, nodes the graph does not hold)
make no mark and count toward none."""


def _incident_marks(services: Any) -> tuple[dict[tuple[str, ...], list[str]], bool]:
    """GPUs and hosts with a firing alert in an open incident (every open incident: a newer one
    never hides an older one's marks, however many alerts the older holds): ``(cluster, node[,
    gpu])`` -> ``["#<id> <alertname>", ...]`` in incident order, from the graph's ``match``
    labels of the alerting nodes (keyed by the graph's cluster name; :func:`fleet_page` renames
    it to telemetry's when each side holds one cluster,
    :func:`fleetmind.serving.health.telemetry_cluster_alias`), and whether the marks were cut:
    past :data:`FLEET_MARK_ROWS` marked (incident, GPU or host, alert name) entries the newest
    open incidents' marks are left out, and the page says so. Alerts on nodes that make no mark
    (pods, services, nodes not in the graph) are dropped while the rows stream in, so however
    many an older incident holds they neither hide a newer incident's marks nor cut them."""
    graph = services.graphs.graph

    def key_of(nid: str | None) -> tuple[str, ...] | None:
        if not nid or nid not in graph.index:
            return None
        node = graph.node(nid)
        m = node.match
        if node.kind == "gpu" and {"cluster", "node", "gpu"} <= set(m):
            return (str(m["cluster"]), str(m["node"]), str(m["gpu"]))
        if node.kind == "host" and {"cluster", "node"} <= set(m):
            return (str(m["cluster"]), str(m["node"]))
        return None

    out: dict[tuple[str, ...], list[str]] = {}
    rows = services.db.firing_alerts_of_open_incidents(
        limit=FLEET_MARK_ROWS + 1, keep=lambda a: key_of(a["node"]) is not None
    )
    cut = len(rows) > FLEET_MARK_ROWS
    for a in rows[:FLEET_MARK_ROWS]:
        key = key_of(a["node"])
        if key is None:
            continue
        label = f"#{a['incident_id']} {a.get('alertname') or '?'}"
        if label not in out.setdefault(key, []):
            out[key].append(label)
    return out, cut


# ---------------------------------------------------------------------------------------- not found
@router.api_route("/{rest:path}", methods=["GET", "POST"], response_class=HTMLResponse)
def not_found_page(request: Request, services: ServicesDep, rest: str) -> Response:
    """Any other ``/ui/...`` path, read or posted to: a 404 page for a signed-in browser (the
    login form without a session), not the API's JSON answer. Registered last, so it shadows no
    page."""
    session = _session(request, services)
    if isinstance(session, Response):
        return session
    return render(
        request,
        "error.html",
        status_code=404,
        session=session,
        message=f"There is no page /ui/{rest[:80]}.",
    )
