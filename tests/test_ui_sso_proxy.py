"""FleetMind behind an SSO proxy: the bearer token a proxy injects signs the /ui pages in, a JWT
bearer gets a 401 that names it, and a browser opening /docs goes to the login form.

What the proxies send (the headers modelled below):

* oauth2-proxy ``--pass-authorization-header`` / ``--set-authorization-header`` and
  ``injectRequestHeaders`` (https://oauth2-proxy.github.io/oauth2-proxy/configuration/overview,
  "pass_authorization_header: pass OIDC IDToken to upstream via Authorization Bearer header")
  put ``Authorization: Bearer <token>`` on every request the browser makes; with
  ``--pass-authorization-header`` the token is the OIDC id_token, a JWT (RFC 7519: three
  base64url parts, the first a JSON header with ``alg``).
* ingress-nginx ``auth-url`` with ``auth-response-headers`` / ``configuration-snippet``
  ``proxy_set_header Authorization`` (https://kubernetes.github.io/ingress-nginx/examples/auth/oauth-external-auth/)
  inject a fixed header the same way (docs/deploy.md advises against it: oauth2-proxy's
  ``injectResponseHeaders`` are on the ``/oauth2/auth`` answer a browser can read,
  https://oauth2-proxy.github.io/oauth2-proxy/configuration/alpha-config, AlphaOptions).
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from serving_helpers import webhook
from ui_helpers import TRUE_ROOT, storm_alerts

from fleetmind.serving import deps
from fleetmind.serving.app import create_app
from fleetmind.serving.settings import Settings
from fleetmind.serving.ui import auth
from fleetmind.serving.ui import router as ui_router

API = "sso-api-token-0123456789abcdef"
READ = "sso-read-token-0123456789abcdef"
BEARER = {"Authorization": f"Bearer {API}"}
ORIGIN = "http://testserver"  # TestClient's base URL: the pages' own origin


def _b64(obj: dict[str, object]) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()


# an OIDC id_token's shape as oauth2-proxy passes it (header.payload.signature, base64url)
ID_TOKEN = ".".join(
    [_b64({"alg": "RS256", "kid": "k1"}), _b64({"iss": "https://idp", "email": "a@ex"}), "c2ln"]
)


def make_settings(tmp_path: Path) -> Settings:
    return Settings(
        database_url=f"sqlite:///{tmp_path}/sso.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
        api_token=API,
        read_token=READ,
    )


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(create_app(make_settings(tmp_path))) as c:
        r = c.post("/api/v1/alerts", json=webhook(storm_alerts()), headers=BEARER)
        assert r.status_code == 200
        c.app.state.services.incidents.process_pending()
        yield c


def _csrf(html: str) -> str:
    return re.search(r'name="csrf" value="([^"]+)"', html).group(1)


def test_a_valid_bearer_token_signs_the_pages_in_without_a_cookie(client: TestClient) -> None:
    """/ui/ answered 303 to the login form while /docs and the API took the same header."""
    for path in ("/ui/", "/ui/fleet", "/ui/incidents/1"):
        r = client.get(path, headers=BEARER, follow_redirects=False)
        assert r.status_code == 200, (path, r.headers.get("location"))
        assert "signed in through the proxy · admin, ingest, read" in r.text
        assert not client.cookies.get(auth.SESSION_COOKIE)  # no stored session was made
    read = client.get("/ui/", headers={"Authorization": f"Bearer {READ}"})
    assert read.status_code == 200 and "signed in through the proxy · read" in read.text
    # an unknown token, another scheme or a JWT still goes to the login form
    for header in (f"Bearer {API}x", f"Basic {API}", f"Bearer {ID_TOKEN}", "Bearer "):
        r = client.get("/ui/", headers={"Authorization": header}, follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == "/ui/login?next=/ui/"


def test_a_read_bearer_token_cannot_post_feedback(client: TestClient) -> None:
    read = {"Authorization": f"Bearer {READ}"}
    page = client.get("/ui/incidents/1", headers=read)
    assert page.status_code == 200 and 'action="/ui/incidents/1/feedback"' not in page.text
    r = client.post(
        "/ui/incidents/1/feedback",
        headers={**read, "Origin": ORIGIN},
        data={"csrf": "x" * 32, "root_cause": TRUE_ROOT, "by": "alice"},
    )
    assert r.status_code == 403 and "lacks the &#39;admin&#39; scope" in r.text


def test_bearer_feedback_needs_the_double_submit_token_and_our_origin(client: TestClient) -> None:
    """The proxy's header rides on every request, cross-site ones too (an ambient credential):
    the form keeps the fm_csrf double-submit token and the Origin check."""
    page = client.get("/ui/incidents/1", headers=BEARER)
    csrf = _csrf(page.text)
    assert client.cookies.get(auth.CSRF_COOKIE) == csrf  # set by the page, SameSite=Lax
    form = {"csrf": csrf, "root_cause": TRUE_ROOT, "by": "alice", "note": ""}
    # a cross-site POST: the browser adds the proxy's header (and even the cookie, in the worst case)
    evil = client.post(
        "/ui/incidents/1/feedback",
        headers={**BEARER, "Origin": "https://evil.example"},
        data=form,
        follow_redirects=False,
    )
    assert evil.status_code == 403 and "Refused: the form&#39;s origin" in evil.text
    # no fm_csrf cookie (a cross-site POST gets no Lax cookie): refused, nothing stored
    kept = dict(client.cookies)
    client.cookies.clear()
    no_cookie = client.post(
        "/ui/incidents/1/feedback", headers=BEARER, data=form, follow_redirects=False
    )
    assert no_cookie.status_code == 403
    client.cookies.update(kept)
    wrong = client.post(
        "/ui/incidents/1/feedback",
        headers=BEARER,
        data={**form, "csrf": "y" * 32},
        follow_redirects=False,
    )
    assert wrong.status_code == 403
    assert client.get("/api/v1/incidents/1/feedback", headers=BEARER).json() == []
    ok = client.post(
        "/ui/incidents/1/feedback",
        headers={**BEARER, "Origin": ORIGIN},
        data=form,
        follow_redirects=False,
    )
    assert ok.status_code == 303 and ok.headers["location"] == "/ui/incidents/1?feedback=saved"
    saved = client.get("/api/v1/incidents/1/feedback", headers=BEARER).json()
    assert [f["by"] for f in saved] == ["alice"]


@pytest.mark.parametrize("path", ["/api/v1/incidents", "/openapi.json", "/docs"])
def test_a_jwt_bearer_gets_a_401_that_names_it(client: TestClient, path: str) -> None:
    r = client.get(path, headers={"Authorization": f"Bearer {ID_TOKEN}"})
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    detail = r.json()["detail"]
    assert "is a JWT" in detail and "SSO proxy" in detail and "opaque" in detail
    assert ID_TOKEN not in detail and ID_TOKEN.split(".")[0] not in detail
    # an opaque unknown token keeps the plain message
    r = client.get(path, headers={"Authorization": "Bearer not-a-jwt.abc"})
    assert r.status_code == 401 and "missing or unknown bearer token" in r.json()["detail"]


def test_looks_like_jwt_needs_three_base64url_parts_and_an_alg_header() -> None:
    assert deps.looks_like_jwt(f"Bearer {ID_TOKEN}")
    assert deps.looks_like_jwt(f"bearer {ID_TOKEN}".encode())
    no_alg = ".".join([_b64({"typ": "JWT"}), _b64({"a": 1}), "c2ln"])
    for header in (
        None,
        f"Basic {ID_TOKEN}",
        f"Bearer {ID_TOKEN}.x",  # four parts (a JWE has five)
        f"Bearer {no_alg}",
        "Bearer a.b.c",  # "a" is no JSON
        f"Bearer {_b64({'alg': 'none'})}+.e30.",  # not base64url
        f"Bearer {API}",
    ):
        assert not deps.looks_like_jwt(header), header
    assert deps.unauthorized_detail(None) == deps._UNAUTHORIZED


def test_a_browser_opening_the_docs_goes_to_the_login_form(client: TestClient) -> None:
    """/docs from a browser without a session answered a JSON 401 dead end."""
    html = {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}
    for path in ("/docs", "/redoc"):
        r = client.get(path, headers=html, follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == f"/ui/login?next={path}"
        # behind oauth2-proxy --pass-authorization-header the browser's requests carry a JWT
        jwt = {**html, "Authorization": f"Bearer {ID_TOKEN}"}
        r = client.get(path, headers=jwt, follow_redirects=False)
        assert r.status_code == 303
        login = client.get(r.headers["location"])
        assert f'name="next" value="{path}"' in login.text
        signed = client.post(
            "/ui/login",
            data={"token": READ, "csrf": client.cookies.get(auth.CSRF_COOKIE), "next": path},
            follow_redirects=False,
        )
        assert signed.status_code == 303 and signed.headers["location"] == path
        assert client.get(path, headers=html).status_code == 200
        client.cookies.clear()
    # API clients (no text/html), /openapi.json and a wrong opaque token keep the JSON 401
    assert client.get("/docs").status_code == 401
    assert client.get("/openapi.json", headers=html).status_code == 401
    wrong = client.get("/docs", headers={**html, "Authorization": "Bearer wrong"})
    assert wrong.status_code == 401
    assert client.post("/docs", headers=html).status_code == 401


def test_the_login_form_returns_only_to_ui_paths_and_the_docs() -> None:
    assert ui_router._safe_next("/docs") == "/docs"
    assert ui_router._safe_next("/redoc") == "/redoc"
    for target in ("/docsx", "/docs/../api", "//evil.example", "https://evil.example", "/api/v1"):
        assert ui_router._safe_next(target) == "/ui/", target


def _nested_jwt_header(depth: int = 3000) -> str:
    """A bearer whose first part decodes to ``depth`` ``[``: json.loads raises RecursionError."""
    first = base64.urlsafe_b64encode(b"[" * depth).rstrip(b"=").decode()
    return f"Bearer {first}.e30.x"


@pytest.mark.parametrize("path", ["/api/v1/incidents", "/docs", "/openapi.json", "/redoc"])
def test_a_deeply_nested_jwt_like_bearer_gets_a_401_not_a_500(tmp_path: Path, path: str) -> None:
    """A first part decoding to 3000 '[' made json.loads raise RecursionError: a 500 on every
    path behind a token, without any credential."""
    app = create_app(make_settings(tmp_path))
    with TestClient(app, raise_server_exceptions=False) as c:
        for accept in ("application/json", "text/html"):
            headers = {"Authorization": _nested_jwt_header(), "Accept": accept}
            r = c.get(path, headers=headers, follow_redirects=False)
            assert r.status_code == 401, (path, accept, r.status_code, r.text[:80])
            assert "missing or unknown bearer token" in r.json()["detail"]
    assert not deps.looks_like_jwt(_nested_jwt_header())


def _hostile_bearers() -> list[str]:
    """Bearer values no client should send: long, nested, non-ASCII, dotted, padded."""
    obj = _b64({"alg": "RS256"})
    return [
        _nested_jwt_header(),
        _nested_jwt_header(700),  # within the size cap: still no JSON object
        "Bearer "
        + base64.urlsafe_b64encode(b"{" + b'"a":[' * 150).rstrip(b"=").decode()
        + ".e30.x",
        "Bearer " + "A" * 6000,
        "Bearer " + "A" * 6000 + ".e30.x",
        "Bearer " + _b64({"alg": "x" * 2000}) + ".e30.x",  # a JOSE header over the cap
        "Bearer " + "." * 500,
        "Bearer " + ".".join([obj] * 200),
        "Bearer " + obj + ".é.x",
        "Bearer ñ" + obj + ".e30.x",
        "Bearer " + obj + "=.e30.x",
        "Bearer A.e30.x",  # one base64url character: no whole byte
        "Bearer =====.e30.x",
        "Bearer  " + ID_TOKEN,
        "Bearer\t" + ID_TOKEN,
        "bEaReR",
        "Bearer",
    ]


def test_hostile_bearer_values_get_a_4xx_never_a_5xx(tmp_path: Path) -> None:
    app = create_app(make_settings(tmp_path))
    with TestClient(app, raise_server_exceptions=False) as c:
        for value in _hostile_bearers():
            assert isinstance(deps.looks_like_jwt(value), bool)
            assert isinstance(deps.looks_like_jwt(value.encode("utf-8")), bool)
            for path in ("/api/v1/incidents", "/docs", "/ui/", "/ui/login", "/ui/fleet"):
                headers = {"Authorization": value.encode("utf-8"), "Accept": "text/html"}
                r = c.get(path, headers=headers, follow_redirects=False)
                assert r.status_code < 500, (value[:40], path, r.status_code)


def test_a_proxy_signed_page_offers_no_dead_sign_out_button(client: TestClient) -> None:
    """A page signed in only by the proxy's bearer showed a Sign out button whose POST found no
    cookie session to end: the next page was signed in again."""
    r = client.get("/ui/", headers=BEARER)
    assert r.status_code == 200
    assert "Sign out" not in r.text and 'action="/ui/logout"' not in r.text
    assert "signed in through the proxy" in r.text
    # a cookie session (the login form) keeps its Sign out button, bearer header or not
    login = client.get("/ui/login")
    signed = client.post(
        "/ui/login",
        data={"token": READ, "csrf": _csrf(login.text), "next": "/ui/"},
        follow_redirects=False,
    )
    assert signed.status_code == 303 and client.cookies.get(auth.SESSION_COOKIE)
    for headers in ({}, BEARER):
        page = client.get("/ui/", headers=headers)
        assert 'action="/ui/logout"' in page.text and "Sign out" in page.text
        assert "signed in · read" in page.text and "through the proxy" not in page.text


def test_the_login_form_sends_a_proxy_signed_request_on_to_next(client: TestClient) -> None:
    for target in ("/ui/fleet", "/docs"):
        r = client.get(f"/ui/login?next={target}", headers=BEARER, follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == target
    # an open redirect stays closed
    r = client.get("/ui/login?next=//evil.example", headers=BEARER, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/ui/"
    # the followed redirect lands on a signed-in page, not in a loop
    landed = client.get("/ui/login?next=/ui/fleet", headers=BEARER)
    assert landed.status_code == 200 and str(landed.url).endswith("/ui/fleet")
    # no valid bearer (unknown, JWT, another scheme, none): the form, as before
    for header in (f"Bearer {API}x", f"Bearer {ID_TOKEN}", f"Basic {API}", None):
        headers = {"Authorization": header} if header else {}
        r = client.get("/ui/login?next=/ui/fleet", headers=headers, follow_redirects=False)
        assert r.status_code == 200 and 'name="token"' in r.text, header


def test_a_browser_with_basic_credentials_opening_the_docs_goes_to_the_login_form(
    client: TestClient,
) -> None:
    """nginx ``auth_basic`` passes the browser's ``Authorization: Basic`` upstream by default
    (https://nginx.org/en/docs/http/ngx_http_auth_basic_module.html; proxy_pass forwards the
    request's header fields, https://nginx.org/en/docs/http/ngx_http_proxy_module.html
    #proxy_pass_request_headers): /docs answered the JSON 401 dead end."""
    html = {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}
    basic = {**html, "Authorization": "Basic " + base64.b64encode(b"alice:pw").decode()}
    for path in ("/docs", "/redoc"):
        for method in ("GET", "HEAD"):
            r = client.request(method, path, headers=basic, follow_redirects=False)
            assert r.status_code == 303, (method, path, r.status_code)
            assert r.headers["location"] == f"/ui/login?next={path}"
    # signed in with the form, the Basic header no longer stands in the way
    login = client.get("/ui/login?next=/docs", headers=basic)
    signed = client.post(
        "/ui/login",
        data={"token": READ, "csrf": _csrf(login.text), "next": "/docs"},
        headers=basic,
        follow_redirects=False,
    )
    assert signed.status_code == 303 and signed.headers["location"] == "/docs"
    assert client.get("/docs", headers=basic).status_code == 200
    client.cookies.clear()
    # an API client's unknown opaque bearer, and non-browser clients, keep the JSON 401
    for headers in (
        {**html, "Authorization": "Bearer wrong-token"},
        {"Authorization": "Basic " + base64.b64encode(b"alice:pw").decode()},
    ):
        r = client.get("/docs", headers=headers, follow_redirects=False)
        assert r.status_code == 401 and r.headers["content-type"] == "application/json"


ADMIN = "sso-admin-token-0123456789abcdef"
INGEST = "sso-ingest-token-0123456789abcdef"
HTML = {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}


@pytest.fixture
def scoped(tmp_path: Path) -> Iterator[TestClient]:
    """A service with one token per scope (and the all-scope API token): what a proxy may inject."""
    settings = make_settings(tmp_path).model_copy(
        update={"admin_token": ADMIN, "ingest_token": INGEST}
    )
    with TestClient(create_app(settings)) as c:
        r = c.post("/api/v1/alerts", json=webhook(storm_alerts()), headers=BEARER)
        assert r.status_code == 200
        c.app.state.services.incidents.process_pending()
        yield c


def test_an_admin_bearer_token_opens_the_docs_it_links_to(scoped: TestClient) -> None:
    """A proxy-injected admin-only token saw the pages (admin reads them) and their API link, and
    /ui/login?next=/docs sent it there, but /docs answered 403 "lacks the 'read' scope"."""
    admin = {"Authorization": f"Bearer {ADMIN}"}
    page = scoped.get("/ui/", headers={**HTML, **admin})
    assert page.status_code == 200 and 'href="/docs"' in page.text
    for path in ("/docs", "/redoc", "/openapi.json"):
        r = scoped.get(path, headers={**HTML, **admin}, follow_redirects=False)
        assert r.status_code == 200, (path, r.status_code, r.text[:80])
    landed = scoped.get("/ui/login?next=/docs", headers={**HTML, **admin})
    assert landed.status_code == 200 and str(landed.url).endswith("/docs")
    # a read cookie session beside an admin bearer: the bearer is checked first, and it reads too
    login = scoped.get("/ui/login")
    scoped.post(
        "/ui/login", data={"token": READ, "csrf": _csrf(login.text), "next": "/ui/"}
    ).raise_for_status()
    assert scoped.get("/docs", headers=admin).status_code == 200
    scoped.cookies.clear()
    # a token with neither read nor admin still lacks what the docs need; the API is unchanged
    r = scoped.get("/openapi.json", headers={"Authorization": f"Bearer {INGEST}"})
    assert r.status_code == 403 and "lacks the 'read' scope" in r.json()["detail"]
    r = scoped.get("/api/v1/incidents", headers=admin)
    assert r.status_code == 403 and "lacks the 'read' scope" in r.json()["detail"]


def test_a_proxy_signed_reader_can_still_sign_in_with_an_admin_token(scoped: TestClient) -> None:
    """Behind the proxy with a read token, GET /ui/login always redirected away: the incident
    page's "Signing in with an admin token" hint led nowhere."""
    read = {"Authorization": f"Bearer {READ}"}
    page = scoped.get("/ui/incidents/1", headers=read)
    assert page.status_code == 200 and 'id="feedback-form"' not in page.text
    hint = re.search(r'id="admin-hint"><a href="([^"]+)"', page.text).group(1)
    assert hint.replace("&amp;", "&") == "/ui/login?next=/ui/incidents/1&switch=1"
    form = scoped.get(hint.replace("&amp;", "&"), headers=read, follow_redirects=False)
    assert form.status_code == 200 and 'name="token"' in form.text
    assert 'name="next" value="/ui/incidents/1"' in form.text
    assert "signed in through the proxy" in form.text and "(scope read)" in form.text
    assert 'id="proxy-continue"' in form.text and 'href="/ui/incidents/1"' in form.text
    signed = scoped.post(
        "/ui/login",
        headers={**read, "Origin": ORIGIN},
        data={"token": ADMIN, "csrf": _csrf(form.text), "next": "/ui/incidents/1"},
        follow_redirects=False,
    )
    assert signed.status_code == 303 and signed.headers["location"] == "/ui/incidents/1"
    # the cookie session comes first: the same proxy header now shows the feedback form
    after = scoped.get("/ui/incidents/1", headers=read)
    assert 'id="feedback-form"' in after.text and "signed in · admin" in after.text


@pytest.mark.parametrize(
    ("token", "url", "go_on"),
    [
        (READ, "/ui/login", True),  # no next (e.g. after Sign out): the form, not a redirect
        (ADMIN, "/ui/login?switch=1&next=/docs", True),
        (INGEST, "/ui/login?next=/ui/fleet", False),  # the token opens no page
    ],
    ids=["read-without-next", "admin-with-switch", "ingest-only"],
)
def test_the_login_form_shows_when_the_proxy_token_is_not_taken_on(
    scoped: TestClient, token: str, url: str, go_on: bool
) -> None:
    r = scoped.get(url, headers={"Authorization": f"Bearer {token}"}, follow_redirects=False)
    assert r.status_code == 200 and 'name="token"' in r.text, (url, r.status_code)
    assert 'id="proxy-signed-in"' in r.text
    assert ('id="proxy-continue"' in r.text) is go_on
    if not go_on:
        assert "(scope ingest)" in r.text and "opens no pages" in r.text
    # without a proxy token the form says nothing about a proxy
    plain = scoped.get(url, follow_redirects=False)
    assert plain.status_code == 200 and 'id="proxy-signed-in"' not in plain.text


def test_a_read_session_opens_the_docs_behind_an_ingest_only_proxy(scoped: TestClient) -> None:
    """Behind a proxy injecting an ingest-only token, a reader signed in at /ui/login saw the pages
    (the cookie session comes first there) and their API link, but /docs and /openapi.json
    answered 403 "lacks the 'read' scope": the docs checked the cookie only without a bearer."""
    ingest = {"Authorization": f"Bearer {INGEST}"}
    form = scoped.get("/ui/login?next=/ui/", headers=ingest)
    assert form.status_code == 200 and "opens no pages" in form.text
    signed = scoped.post(
        "/ui/login",
        headers={**ingest, "Origin": ORIGIN},
        data={"token": READ, "csrf": _csrf(form.text), "next": "/ui/"},
        follow_redirects=False,
    )
    assert signed.status_code == 303 and signed.headers["location"] == "/ui/"
    page = scoped.get("/ui/", headers={**HTML, **ingest})
    assert page.status_code == 200 and 'href="/docs"' in page.text
    for path in ("/docs", "/redoc", "/openapi.json"):
        r = scoped.get(path, headers={**HTML, **ingest}, follow_redirects=False)
        assert r.status_code == 200, (path, r.status_code, r.text[:80])
    # only the docs take the session beside the bearer: the API keeps the bearer's scopes
    r = scoped.get("/api/v1/incidents", headers=ingest)
    assert r.status_code == 403 and "lacks the 'read' scope" in r.json()["detail"]
    scoped.cookies.clear()
    r = scoped.get("/openapi.json", headers=ingest)
    assert r.status_code == 403 and "lacks the 'read' scope" in r.json()["detail"]


@pytest.mark.parametrize("switch", ["0", "", "yes"])
def test_only_switch_1_keeps_a_proxy_signed_reader_on_the_form(
    scoped: TestClient, switch: str
) -> None:
    """Any non-empty ``switch`` kept the form; only ``switch=1`` (documented) does now."""
    read = {"Authorization": f"Bearer {READ}"}
    url = f"/ui/login?next=/ui/&switch={switch}"
    r = scoped.get(url, headers=read, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/ui/", (switch, r.status_code)
    kept = scoped.get("/ui/login?next=/ui/&switch=1", headers=read, follow_redirects=False)
    assert kept.status_code == 200 and 'id="proxy-continue"' in kept.text
