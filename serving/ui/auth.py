"""Browser sessions for ``/ui``: the bearer token, typed once into a login form, starts a session.

Sessions live in the database (table ``ui_sessions``, :mod:`fleetmind.serving.db`). The cookie holds only a
random session id (256 bits); the table keys the session by the SHA-256 of that id, so a copy of
the table lets nobody sign in. A row holds a salted scrypt digest of the token that logged in
(:func:`token_digest`: a copy of the table costs an attacker one scrypt per guessed token and
row, not a SHA-256), its scopes, the session's CSRF token and the expiry, which the server sets (``FLEETMIND_UI_SESSION_HOURS``, at most
30 days) and the browser cannot change. A session ends:

* at logout (its row is deleted: a copy of the cookie stops working at once);
* when the token that started it is no longer configured, or no longer grants its scopes (token
  rotation ends every session made with the old token);
* at its expiry.

Cookies are ``HttpOnly`` (``Secure`` when the public URL is https); the session cookie is
``SameSite=Lax``, so a link from chat or a pager opens the page signed in, while a cross-site POST
gets no session (and would fail the CSRF and ``Origin`` checks anyway); ``fm_csrf`` is
``SameSite=Lax`` too: a Strict one is not sent when a link from another site opens a page, which
then set a new one, and every form already open in another tab failed as expired.

CSRF: a signed-in page's forms carry the session's own CSRF token, compared with the one stored
for the session (a token taken from another session, even a valid one, is refused). The login form,
before any session, and every form when no token is configured use a double-submit token (a random
``fm_csrf`` cookie that the form repeats; a cross-site POST carries no Lax cookie, and the
``Origin`` check below is the defence that does not depend on the browser's SameSite support).
A POST whose ``Origin`` is ``null`` (a sandboxed frame, a ``data:`` page, some redirects), names
another host, or cannot be parsed is refused.

Scopes are the tokens' (``Settings.tokens()``): ``FLEETMIND_API_TOKEN`` grants ``ingest``,
``read`` and ``admin``; ``FLEETMIND_{INGEST,READ,ADMIN}_TOKEN`` grant their own. Pages need
``read`` or ``admin`` (an engineer confirming a cause has to see the incident), the feedback form
``admin``. With no token configured the service is open, and so are the pages.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from fastapi import Request

from fleetmind.serving.origins import same_origin as origin_matches
from fleetmind.serving.settings import Settings

SESSION_COOKIE = "fm_session"
CSRF_COOKIE = "fm_csrf"
ALL_SCOPES = frozenset({"ingest", "read", "admin"})
MAX_COOKIE_CHARS = 128
"""Longer cookie or CSRF values are refused before any hashing or database lookup."""


@dataclass(frozen=True)
class Session:
    """Who is looking: the scopes of the token behind the session (all of them when auth is off).

    ``key``: the SHA-256 (hex) of the session cookie, ``csrf``: the session's CSRF token, and
    ``expires``: Unix seconds; all ``None`` when authentication is off.
    """

    scopes: frozenset[str]
    expires: float | None = None
    key: str | None = None
    csrf: str | None = None

    def can(self, scope: str) -> bool:
        """``read``: the pages (``admin`` also sees them); ``admin``: the feedback form."""
        if scope == "read":
            return bool({"read", "admin"} & self.scopes)
        return scope in self.scopes


def configured_tokens(settings: Settings) -> list[tuple[str, frozenset[str]]]:
    """``[(token, scopes)]`` for every token the settings define."""
    return [(t, frozenset(scopes)) for t, scopes in settings.tokens().items()]


def auth_enabled(settings: Settings) -> bool:
    return bool(configured_tokens(settings))


def _same(a: str, b: str) -> bool:
    """Constant-time equality of two texts (any characters: ``compare_digest`` refuses non-ASCII
    ``str``)."""
    return hmac.compare_digest(a.encode("utf-8", "replace"), b.encode("utf-8", "replace"))


def scopes_of_token(settings: Settings, given: str) -> frozenset[str] | None:
    """The scopes ``given`` grants (union over equal tokens), or ``None`` when it matches none."""
    found: set[str] = set()
    ok = False
    for token, scopes in configured_tokens(settings):
        if _same(given, token):
            found |= scopes
            ok = True
    return frozenset(found) if ok else None


def session_key(cookie: str) -> str:
    """The database key of a session cookie: its SHA-256, hex (64 characters)."""
    return hashlib.sha256(cookie.encode("utf-8", "replace")).hexdigest()


DIGEST_PREFIX = "s1:"
"""Marks a ``token_digest`` of :func:`token_digest`'s form; a row without it (an unsalted SHA-256
of an earlier release) matches no token: that session is over and its browser signs in again."""
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1
"""scrypt's cost (16 MiB and some 50 to 100 ms a digest on one core): the interactive-login
parameters of the scrypt paper (Percival 2009, section 7); Python's ``hashlib.scrypt``."""
_SALT_BYTES = 12  # 16 base64url characters
_DIGEST_CHARS = len(DIGEST_PREFIX) + 16 + 43  # 62: the column is String(64)


@lru_cache(maxsize=4096)
def _scrypt(salt: bytes, token: str) -> str:
    """scrypt of ``token`` with ``salt``, base64url without padding (43 characters). Cached: a
    session's row is checked against its token once per process, not on every request."""
    key = hashlib.scrypt(
        token.encode(), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, maxmem=64 << 20, dklen=32
    )
    return base64.urlsafe_b64encode(key).rstrip(b"=").decode()


def token_digest(token: str, salt: bytes | None = None) -> str:
    """Which token started a session, without storing it or anything quick to test guesses
    against: :data:`DIGEST_PREFIX`, the salt (random when ``None``, 12 bytes) and the scrypt of
    the token (:data:`SCRYPT_N`), base64url, 62 characters."""
    salt = secrets.token_bytes(_SALT_BYTES) if salt is None else salt
    encoded = base64.urlsafe_b64encode(salt).decode()
    return DIGEST_PREFIX + encoded + _scrypt(salt, token)


def digest_matches(stored: str, token: str) -> bool:
    """Whether ``stored`` (a row's ``token_digest``) is :func:`token_digest` of ``token``; False
    for a value of any other form (an earlier release's SHA-256), never an exception."""
    if len(stored) != _DIGEST_CHARS or not stored.startswith(DIGEST_PREFIX):
        return False
    start = len(DIGEST_PREFIX)
    try:
        salt = base64.urlsafe_b64decode(stored[start : start + 16])
    except ValueError:
        return False
    return _same(token_digest(token, salt), stored)


def start_session(
    db: Any, settings: Settings, token: str, scopes: frozenset[str]
) -> tuple[str, int]:
    """Store a new session for ``token`` (granting ``scopes``); returns the cookie value and its
    max-age in seconds (``FLEETMIND_UI_SESSION_HOURS``)."""
    max_age = int(settings.ui_session_hours * 3600)
    cookie = secrets.token_urlsafe(32)
    now = time.time()
    db.create_ui_session(
        {
            "key": session_key(cookie),
            "token_digest": token_digest(token),
            "scopes": "-".join(sorted(scopes)),
            "csrf": secrets.token_urlsafe(32),
            "created_ts": now,
            "expires_ts": now + max_age,
        }
    )
    return cookie, max_age


def _cookie(cookies: Mapping[str, str], name: str) -> str | None:
    value = cookies.get(name)
    return value if value and len(value) <= MAX_COOKIE_CHARS else None


def session_of_cookies(cookies: Mapping[str, str], settings: Settings, db: Any) -> Session | None:
    """The session the ``fm_session`` cookie names (``None``: not signed in, signed out, expired,
    or the token that started it is gone or no longer grants its scopes)."""
    if not auth_enabled(settings):
        return Session(ALL_SCOPES)
    cookie = _cookie(cookies, SESSION_COOKIE)
    if cookie is None:
        return None
    row = db.get_ui_session(session_key(cookie))
    if row is None or not row["expires_ts"] > time.time():
        return None
    claimed = frozenset(s for s in row["scopes"].split("-") if s)
    # the token whose scopes are exactly the session's first: one scrypt per session and process
    # (cached); the others only when the tokens changed since the login
    candidates = sorted(
        ((t, s) for t, s in configured_tokens(settings) if claimed <= s),
        key=lambda c: c[1] != claimed,
    )
    for token, _ in candidates:
        if digest_matches(str(row["token_digest"]), token):
            return Session(claimed, float(row["expires_ts"]), row["key"], row["csrf"])
    return None


def read_session(request: Request, settings: Settings, db: Any) -> Session | None:
    """The session of this request (see :func:`session_of_cookies`)."""
    return session_of_cookies(request.cookies, settings, db)


def end_session(request: Request, db: Any) -> None:
    """Delete this request's session (logout): every copy of its cookie stops working."""
    cookie = _cookie(request.cookies, SESSION_COOKIE)
    if cookie is not None:
        db.delete_ui_session(session_key(cookie))


def secure_cookies(settings: Settings, request: Request | None = None) -> bool:
    """Whether cookies get ``Secure`` (RFC 6265 section 4.1.2.5): when users reach the service over
    HTTPS, whether a proxy says so (``FLEETMIND_PUBLIC_URL`` is ``https://``), the service holds
    the certificate itself (``FLEETMIND_TLS_CERT``, whatever the public URL says), or this request
    came over TLS. Without it a browser sends the session to the same host over plain HTTP."""
    return (
        settings.public_url.lower().startswith("https://")
        or bool(settings.tls_cert)
        or (request is not None and request.url.scheme == "https")
    )


def csrf_token(request: Request, session: Session | None = None) -> tuple[str, bool]:
    """The CSRF token for this page's forms and whether it is new (then the response must set the
    ``fm_csrf`` cookie): the session's own when signed in, else the double-submit cookie's."""
    if session is not None and session.csrf is not None:
        return session.csrf, False
    have = request.cookies.get(CSRF_COOKIE)
    if have and 20 <= len(have) <= 100 and have.isascii():
        return have, False
    return secrets.token_urlsafe(24), True


def origin_refusal(request: Request, public_url: str | None = None) -> str | None:
    """Why a POST's ``Origin`` is not one of ours (``None``: it is). Ours: no ``Origin`` header
    (older browsers, and non-browser clients, which carry no ambient cookie), one naming the
    request's ``Host``, or the origin of ``public_url`` (``FLEETMIND_PUBLIC_URL``: behind a
    proxy that rewrites ``Host``, nginx's default ``proxy_set_header Host $proxy_host``).
    ``null`` and unparseable origins are refused. The comparison is the API's
    (:func:`fleetmind.serving.origins.same_origin`): host names case-insensitive and a
    scheme's default port the same as none (RFC 9110 section 4.2.3, RFC 6454 section 5), so
    ``Host: fleetmind.example:443`` matches ``Origin: https://fleetmind.example``."""
    origin = request.headers.get("origin")
    if origin is None:
        return None
    host = request.headers.get("host", "")
    if origin_matches(origin, host, public_url or ""):
        return None
    return (
        f"the form's origin {origin[:100]!r} matches neither the Host header {host[:100]!r} nor "
        f"FLEETMIND_PUBLIC_URL ({(public_url or 'unset')[:100]}): set FLEETMIND_PUBLIC_URL to the "
        "address users open, or have the proxy pass the Host header on"
    )


def same_origin(request: Request, public_url: str | None = None) -> bool:
    """Whether a POST may come from one of our pages (see :func:`origin_refusal`)."""
    return origin_refusal(request, public_url) is None


def csrf_ok(
    request: Request,
    form_token: str | None,
    session: Session | None = None,
    public_url: str | None = None,
) -> bool:
    """A POST from one of our own forms: same origin (:func:`same_origin`, ``public_url`` being
    ``FLEETMIND_PUBLIC_URL``) and the form's token equal to the session's (signed in) or to the
    ``fm_csrf`` cookie (the login form)."""
    if not same_origin(request, public_url) or not form_token:
        return False
    if len(form_token) > MAX_COOKIE_CHARS:
        return False
    if session is not None and session.csrf is not None:
        return _same(form_token, session.csrf)
    cookie = _cookie(request.cookies, CSRF_COOKIE)
    return cookie is not None and _same(cookie, form_token)
