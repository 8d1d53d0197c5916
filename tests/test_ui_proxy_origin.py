"""The /ui forms behind a proxy that rewrites ``Host`` and with bodies that are not UTF-8.

nginx sends ``Host: $proxy_host`` by default (``proxy_set_header``,
https://nginx.org/en/docs/http/ngx_http_proxy_module.html#proxy_set_header) while the browser's
``Origin`` names the public address: the forms must accept the origin of
``FLEETMIND_PUBLIC_URL`` (origins compared as scheme, host and port, RFC 6454 section 4), and a
refusal must name its cause. Form values are UTF-8 (WHATWG URL standard,
application/x-www-form-urlencoded parsing); bytes that are not are refused with 400, never
stored as U+FFFD.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from test_ui import TOKEN, make_settings, storm
from ui_helpers import TRUE_ROOT

from fleetmind.serving.app import create_app
from fleetmind.serving.ui import auth

PUBLIC = "https://fleetmind.example.com"
PROXY_HOST = {"Host": "fleetmind:8000"}


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    app = create_app(make_settings(tmp_path, public_url=PUBLIC + "/"))
    # https: an https public URL makes the cookies Secure (the proxy terminates TLS)
    with TestClient(app, base_url="https://testserver") as c:
        storm(c)
        yield c


def _login(c: TestClient, origin: str) -> object:
    c.get("/ui/login", headers=PROXY_HOST)
    return c.post(
        "/ui/login",
        data={"token": TOKEN, "csrf": c.cookies.get(auth.CSRF_COOKIE), "next": "/ui/"},
        headers={**PROXY_HOST, "Origin": origin},
        follow_redirects=False,
    )


def test_the_public_url_origin_signs_in_behind_a_host_rewriting_proxy(client: TestClient) -> None:
    for origin in (PUBLIC, "https://FleetMind.example.com:443"):  # default port, any case
        r = _login(client, origin)
        assert r.status_code == 303, r.text[-400:]


def test_a_foreign_origin_is_refused_with_its_cause(client: TestClient) -> None:
    for origin in ("https://evil.example", "http://fleetmind.example.com", PUBLIC + ":8443"):
        r = _login(client, origin)
        assert r.status_code == 403
        assert "FLEETMIND_PUBLIC_URL" in r.text and "expired" not in r.text
    # without an origin problem, a bad token still reads as an expired form
    r = client.post("/ui/login", data={"token": TOKEN, "csrf": "x" * 32}, follow_redirects=False)
    assert r.status_code == 403 and "expired" in r.text


def test_feedback_that_is_not_utf8_is_refused_naming_the_field(client: TestClient) -> None:
    assert _login(client, PUBLIC).status_code == 303
    page = client.get("/ui/incidents/1", headers=PROXY_HOST).text
    csrf = re.search(r'name="csrf" value="([^"]+)"', page).group(1)
    form = f"csrf={csrf}&root_cause={TRUE_ROOT.replace('/', '%2F')}&note=".encode()
    headers = {
        **PROXY_HOST,
        "Origin": PUBLIC,
        "Content-Type": "application/x-www-form-urlencoded",
    }
    for by in (b"by=%FF%FE", b"by=\xff\xfe"):  # percent-encoded and raw
        r = client.post("/ui/incidents/1/feedback", content=form + b"&" + by, headers=headers)
        assert r.status_code == 400, r.text[-400:]
        assert "'by'" in html.unescape(r.text) and "UTF-8" in r.text
    stored = client.get(
        "/api/v1/incidents/1/feedback", headers={"Authorization": f"Bearer {TOKEN}"}
    ).json()
    assert stored == []
    r = client.post("/ui/login", content=b"csrf=\xff", headers=headers)
    assert r.status_code == 400 and "'csrf'" in html.unescape(r.text)
