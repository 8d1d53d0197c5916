"""Browser sessions for ``/ui``: the bearer token, typed once into a login form, becomes a cookie.

The cookie never holds the token. It holds ``v1.<expiry>.<scopes>.<signature>``, where the
signature is an HMAC-SHA256 of expiry and scopes keyed by a hash of the token that logged in; a
cookie is valid while some configured token with at least those scopes verifies it, so rotating the
token ends every session made with the old one. Cookies are ``HttpOnly`` and ``SameSite=Strict``
(``Secure`` when the public URL is https).

CSRF: every form carries a random token that must equal the ``fm_csrf`` cookie (double submit;
the cookie is ``SameSite=Strict`` so another site can neither read nor send it), and a POST whose
``Origin`` names another host is refused.

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
from dataclasses import dataclass
from urllib.parse import urlsplit

from fastapi import Request

from fleetmind.serving.settings import Settings

SESSION_COOKIE = "fm_session"
CSRF_COOKIE = "fm_csrf"
ALL_SCOPES = frozenset({"ingest", "read", "admin"})
_SCOPED = (
    ("ingest_token", {"ingest"}),
    ("read_token", {"read"}),
    ("admin_token", {"admin", "read"}),
)


@dataclass(frozen=True)
class Session:
    """Who is looking: the scopes of the token behind the cookie (all of them when auth is off)."""

    scopes: frozenset[str]
    expires: float | None = None

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


def scopes_of_token(settings: Settings, given: str) -> frozenset[str] | None:
    """The scopes ``given`` grants (union over equal tokens), or ``None`` when it matches none."""
    found: set[str] = set()
    ok = False
    for token, scopes in configured_tokens(settings):
        if hmac.compare_digest(given.encode(), token.encode()):
            found |= scopes
            ok = True
    return frozenset(found) if ok else None


def _key(token: str) -> bytes:
    return hashlib.sha256(b"fleetmind-ui-session\0" + token.encode()).digest()


def _sign(token: str, payload: str) -> str:
    mac = hmac.new(_key(token), payload.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).decode().rstrip("=")


def make_cookie(settings: Settings, token: str, scopes: frozenset[str]) -> tuple[str, int]:
    """The session cookie value for ``token`` and its max-age in seconds."""
    max_age = int(settings.ui_session_hours * 3600)
    scope_text = "-".join(sorted(scopes))
    payload = f"{int(time.time()) + max_age}.{scope_text}"
    return f"v1.{payload}.{_sign(token, payload)}", max_age


def read_session(request: Request, settings: Settings) -> Session | None:
    """The session of this request (``None``: not logged in, expired, or the token changed)."""
    if not auth_enabled(settings):
        return Session(ALL_SCOPES)
    raw = request.cookies.get(SESSION_COOKIE, "")
    parts = raw.split(".")
    if len(parts) != 4 or parts[0] != "v1":
        return None
    _, exp, scope_text, sig = parts
    try:
        expires = float(exp)
    except ValueError:
        return None
    if expires < time.time():
        return None
    claimed = frozenset(s for s in scope_text.split("-") if s)
    payload = f"{exp}.{scope_text}"
    for token, scopes in configured_tokens(settings):
        if claimed <= scopes and hmac.compare_digest(_sign(token, payload), sig):
            return Session(claimed, expires)
    return None


def secure_cookies(settings: Settings) -> bool:
    return settings.public_url.lower().startswith("https://")


def csrf_token(request: Request) -> tuple[str, bool]:
    """This browser's CSRF token and whether it is new (then the response must set the cookie)."""
    have = request.cookies.get(CSRF_COOKIE)
    if have and 20 <= len(have) <= 100:
        return have, False
    return secrets.token_urlsafe(24), True


def csrf_ok(request: Request, form_token: str | None) -> bool:
    """A POST from one of our own forms: same-origin (when the browser says) and the token matches."""
    origin = request.headers.get("origin")
    if origin and origin != "null":
        if urlsplit(origin).netloc != request.headers.get("host", ""):
            return False
    cookie = request.cookies.get(CSRF_COOKIE)
    return bool(cookie and form_token and hmac.compare_digest(cookie, form_token))
