"""Token guessing: wrong bearer tokens and wrong ``/ui`` login tokens from one client address are
refused with 429 past ``FLEETMIND_AUTH_FAILURE_LIMIT`` within ``FLEETMIND_AUTH_FAILURE_WINDOW_S``
(OWASP ASVS 4.0.3 V2.2.1, CWE-307; Grafana refuses a login after 5 failures in 5 minutes,
grafana/grafana pkg/login/brute_force_login_protection.go), before the token is checked; the
stored session digest is salted scrypt, not a SHA-256 a copy of the table can test guesses
against; ``/openapi.json`` is ``no-store``; refusals carry RFC 6750 section 3's error codes."""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import Depends, FastAPI
from fastapi.testclient import TestClient
from pydantic import ValidationError

from fleetmind.serving.app import create_app
from fleetmind.serving.deps import AuthThrottle, client_address, require_scope
from fleetmind.serving.settings import Settings
from fleetmind.serving.ui import auth

READ = "read-token-0123456789abcdef"
ADMIN = "admin-token-0123456789abcdef"
ATTACKER = ("203.0.113.9", 40000)  # RFC 5737 documentation addresses
OPERATOR = ("198.51.100.7", 40001)


def make_settings(tmp_path: Path, **kw: Any) -> Settings:
    base: dict[str, Any] = {
        "database_url": f"sqlite:///{tmp_path}/throttle.db",
        "rca_model": "baseline:upstream-coverage",
        "placement_model": "heuristic:builtin-bestfit",
        "incident_worker": False,
        "read_token": READ,
        "admin_token": ADMIN,
        "auth_failure_limit": 3,
        "auth_failure_window_s": 60.0,
    }
    base.update(kw)
    return Settings(**base)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def app(tmp_path: Path) -> Iterator[FastAPI]:
    application = create_app(make_settings(tmp_path))
    with TestClient(application):  # the lifespan: services built once for both clients
        yield application


def client(app: FastAPI, address: tuple[str, int]) -> TestClient:
    return TestClient(app, client=address)


def login(c: TestClient, token: str) -> Any:
    c.get("/ui/login")
    return c.post(
        "/ui/login",
        data={"token": token, "csrf": c.cookies.get(auth.CSRF_COOKIE), "next": "/ui/"},
        follow_redirects=False,
    )


def test_wrong_bearers_past_the_limit_get_429_before_the_token_is_checked(
    app: FastAPI, caplog: pytest.LogCaptureFixture
) -> None:
    attacker, operator = client(app, ATTACKER), client(app, OPERATOR)
    caplog.set_level(logging.WARNING, "fleetmind.serving")
    for i in range(3):
        r = attacker.get("/api/v1/incidents", headers=bearer(f"guess-{i:016d}"))
        assert r.status_code == 401
        assert r.headers["www-authenticate"] == 'Bearer error="invalid_token"'
    r = attacker.get("/api/v1/incidents", headers=bearer("guess-3"))
    assert r.status_code == 429
    assert 1 <= int(r.headers["retry-after"]) <= 60
    assert "too many wrong tokens" in r.json()["detail"]
    # the right token from the refused address is not confirmed while it is refused
    assert attacker.get("/api/v1/incidents", headers=bearer(READ)).status_code == 429
    # nor are the pages' bearer sign-in and the login form
    assert attacker.get("/ui/", headers=bearer(READ)).status_code == 429
    assert login(attacker, READ).status_code == 429
    # the token itself is not locked out: another address uses it as before
    assert operator.get("/api/v1/incidents", headers=bearer(READ)).status_code == 200
    # the probes stay open
    assert attacker.get("/healthz").status_code == 200
    warnings = [r for r in caplog.records if "wrong tokens" in r.getMessage()]
    assert len(warnings) == 1, "one line per refusal start"
    assert "203.0.113.9" in warnings[0].getMessage()
    assert "guess" not in warnings[0].getMessage()


def test_wrong_login_tokens_past_the_limit_get_429_and_no_session(app: FastAPI) -> None:
    attacker, operator = client(app, ATTACKER), client(app, OPERATOR)
    for i in range(3):
        assert login(attacker, f"guess-{i:016d}").status_code == 401
    r = login(attacker, READ)  # the right token: refused, not checked
    assert r.status_code == 429
    assert 1 <= int(r.headers["retry-after"]) <= 60
    assert "Too many wrong tokens" in r.text
    assert auth.SESSION_COOKIE not in r.headers.get("set-cookie", "")
    # the bearer header from the same address is refused as well
    assert attacker.get("/api/v1/incidents", headers=bearer(READ)).status_code == 429
    assert login(operator, READ).status_code == 303


def test_wrong_bearers_on_the_pages_count(app: FastAPI) -> None:
    """``/ui`` signs a request in by its bearer token too: a wrong one there is a guess."""
    attacker = client(app, ATTACKER)
    for i in range(3):
        r = attacker.get("/ui/", headers=bearer(f"g{i}"), follow_redirects=False)
        assert r.status_code == 303  # to the login form, as before
    r = attacker.get("/ui/", headers=bearer("g3"), follow_redirects=False)
    assert r.status_code == 429


def test_right_tokens_never_count(app: FastAPI) -> None:
    c = client(app, ATTACKER)
    for _ in range(30):
        assert c.get("/api/v1/incidents", headers=bearer(READ)).status_code == 200
    assert login(c, ADMIN).status_code == 303
    # a right token without the scope is a 403, not a guess
    for _ in range(5):
        assert c.put("/api/v1/graph", headers=bearer(READ), json={}).status_code == 403
    for i in range(2):
        assert c.get("/api/v1/incidents", headers=bearer(f"g{i}")).status_code == 401
    assert c.get("/api/v1/incidents", headers=bearer(READ)).status_code == 200


def test_no_token_no_jwt_and_a_zero_limit_count_nothing(tmp_path: Path) -> None:
    jwt = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhIn0.c2ln"  # an SSO proxy's id_token: no guess
    with TestClient(create_app(make_settings(tmp_path)), client=ATTACKER) as c:
        for _ in range(10):
            assert c.get("/api/v1/incidents").status_code == 401
            assert c.get("/api/v1/incidents", headers=bearer(jwt)).status_code == 401
        assert c.get("/api/v1/incidents", headers=bearer(READ)).status_code == 200
    off = make_settings(tmp_path, auth_failure_limit=0)
    with TestClient(create_app(off), client=ATTACKER) as c:
        for i in range(30):
            assert c.get("/api/v1/incidents", headers=bearer(f"g{i}")).status_code == 401
        assert c.get("/api/v1/incidents", headers=bearer(READ)).status_code == 200


def test_the_settings_refuse_a_negative_limit_and_a_zero_window(tmp_path: Path) -> None:
    with pytest.raises(ValidationError):
        make_settings(tmp_path, auth_failure_limit=-1)
    with pytest.raises(ValidationError):
        make_settings(tmp_path, auth_failure_window_s=0)


def test_throttle_window_refusal_and_memory_bound() -> None:
    t = AuthThrottle(max_clients=2)
    assert not t.failed("a", 3, 60.0, now=0.0)
    assert not t.failed("a", 3, 60.0, now=1.0)
    assert t.retry_after("a", now=1.5) is None
    assert t.failed("a", 3, 60.0, now=2.0)  # the 3rd: refused for the window from now
    assert t.retry_after("a", now=2.0) == 60
    assert t.retry_after("a", now=61.5) == 1
    assert t.retry_after("a", now=62.0) is None
    assert not t.failed("a", 3, 60.0, now=63.0)  # a new window
    # failures older than the window are forgotten
    assert not t.failed("b", 3, 10.0, now=0.0)
    assert not t.failed("b", 3, 10.0, now=5.0)
    assert not t.failed("b", 3, 10.0, now=11.0)
    # at most max_clients addresses: the one with the oldest failure goes first
    t.failed("c", 1, 60.0, now=12.0)
    assert t.retry_after("c", now=12.0) == 60
    t.failed("d", 1, 60.0, now=13.0)
    assert len(t._clients) == 2 and "a" not in t._clients


def test_client_address_is_an_ip_or_none() -> None:
    assert client_address({"client": ("203.0.113.9", 1)}) == "203.0.113.9"
    assert client_address({"client": None}) is None  # a Unix socket: one shared counter, none
    assert client_address({"client": ("testclient", 50000)}) is None


def test_the_stored_digest_is_salted_scrypt_and_old_rows_are_signed_out(tmp_path: Path) -> None:
    with TestClient(create_app(make_settings(tmp_path))) as c:
        services = c.app.state.services
        assert login(c, READ).status_code == 303
        cookie_a = c.cookies.get(auth.SESSION_COOKIE)
        row_a = services.db.get_ui_session(auth.session_key(cookie_a))
        c.cookies.clear()
        assert login(c, READ).status_code == 303
        row_b = services.db.get_ui_session(auth.session_key(c.cookies.get(auth.SESSION_COOKIE)))
        # the SHA-256 a copy of the table used to test guesses against is not what is stored
        unsalted = hashlib.sha256(b"fleetmind-ui-session\0" + READ.encode()).hexdigest()
        assert row_a["token_digest"] != unsalted
        assert row_a["token_digest"].startswith(auth.DIGEST_PREFIX)
        assert len(row_a["token_digest"]) <= 64  # the column is String(64)
        assert row_a["token_digest"] != row_b["token_digest"]  # salted per row
        assert auth.digest_matches(row_a["token_digest"], READ)
        assert not auth.digest_matches(row_a["token_digest"], ADMIN)
        assert c.get("/ui/", follow_redirects=False).status_code == 200
        # a row of the earlier form: that session is over (the login form), no error
        services.db.delete_ui_session(row_b["key"])
        services.db.create_ui_session({**row_b, "token_digest": unsalted})
        r = c.get("/ui/", follow_redirects=False)
        assert r.status_code == 303 and "/ui/login" in r.headers["location"]
        for bad in ("", "s1:" + "!" * 59, "s1:" + "A" * 70, auth.DIGEST_PREFIX):
            assert not auth.digest_matches(bad, READ)


def test_openapi_json_opened_signed_in_is_no_store(tmp_path: Path) -> None:
    with TestClient(create_app(make_settings(tmp_path))) as c:
        assert login(c, READ).status_code == 303
        r = c.get("/openapi.json")
        assert r.status_code == 200
        assert r.headers["cache-control"] == "no-store"
        c.cookies.clear()
        r = c.get("/openapi.json", headers=bearer(READ))
        assert r.status_code == 200 and r.headers["cache-control"] == "no-store"
        # the docs pages keep their own header (no second one)
        r = c.get("/docs", headers=bearer(READ))
        assert r.headers.get_list("cache-control") == ["no-store"]


def test_refusals_carry_rfc_6750_error_codes(tmp_path: Path) -> None:
    with TestClient(create_app(make_settings(tmp_path))) as c:
        r = c.get("/api/v1/incidents")
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        r = c.get("/api/v1/incidents", headers=bearer("wrong"))
        assert r.headers["www-authenticate"] == 'Bearer error="invalid_token"'
        body = r.json()
        r = c.put("/api/v1/graph", headers=bearer(READ), json={})
        assert r.status_code == 403
        assert r.headers["www-authenticate"] == 'Bearer error="insufficient_scope", scope="admin"'
        assert r.json() == {"detail": "this token lacks the 'admin' scope"}
        assert "detail" in body and "token" in body["detail"]  # the bodies are as they were


def test_the_scope_dependency_alone_carries_them_too(tmp_path: Path) -> None:
    """An app without the middleware: :func:`require_scope` checks the header itself."""
    bare = FastAPI()

    @bare.get("/thing", dependencies=[Depends(require_scope("admin"))])
    def thing() -> dict[str, bool]:
        return {"ok": True}

    from fleetmind.serving.settings import get_settings

    bare.dependency_overrides[get_settings] = lambda: make_settings(tmp_path)
    c = TestClient(bare)
    r = c.get("/thing", headers=bearer("wrong"))
    assert r.status_code == 401
    assert r.headers["www-authenticate"] == 'Bearer error="invalid_token"'
    r = c.get("/thing", headers=bearer(READ))
    assert r.status_code == 403
    assert r.headers["www-authenticate"] == 'Bearer error="insufficient_scope", scope="admin"'
    assert c.get("/thing", headers=bearer(ADMIN)).json() == {"ok": True}
    assert re.fullmatch(r"Bearer", c.get("/thing").headers["www-authenticate"])


@pytest.mark.parametrize(
    ("token", "weak"),
    [
        ("0000000000000000", True),
        ("abababababababab", True),
        ("aaaabbbbccccdddd", True),
        ("aaaabbbbccccdddde", False),
        ("3f9c0a7e5d1b2c48", False),  # 16 hex characters, as openssl rand -hex 8 gives
    ],
)
def test_a_token_of_few_different_characters_is_weak(
    tmp_path: Path, token: str, weak: bool
) -> None:
    settings = make_settings(tmp_path, read_token=token)
    assert ("FLEETMIND_READ_TOKEN" in settings.weak_tokens()) is weak


# a global IPv6 prefix (Google's 2a00:1450::/32: the documentation prefix 2001:db8::/32 is not
# global, ipaddress.IPv6Address.is_global, so it would count address by address)
GLOBAL_64 = "2a00:1450:4001:81b"


def test_an_ipv6_client_counts_by_its_64_and_a_mapped_ipv4_as_ipv4(
    app: FastAPI, caplog: pytest.LogCaptureFixture
) -> None:
    """A host on the internet usually controls a whole /64 (SLAAC, privacy addresses, RFC 7421):
    rotating the low 64 bits of a global address is no escape."""
    caplog.set_level(logging.WARNING, "fleetmind.serving")
    codes = [
        client(app, (f"{GLOBAL_64}::{i + 1:x}", 1))
        .get("/api/v1/incidents", headers=bearer(f"guess-{i:016d}"))
        .status_code
        for i in range(6)
    ]
    assert codes == [401, 401, 401, 429, 429, 429]
    warning = next(r.getMessage() for r in caplog.records if "wrong tokens" in r.getMessage())
    assert f"{GLOBAL_64}::/64" in warning
    # another /64 is another client
    other = client(app, ("2a00:1450:4001:81c::1", 1))
    assert other.get("/api/v1/incidents", headers=bearer(READ)).status_code == 200
    # a dual-stack socket's IPv4 client (::ffff:a.b.c.d) shares its IPv4 address's count
    for i in range(3):
        mapped = client(app, ("::ffff:203.0.113.9", 1))
        assert mapped.get("/api/v1/incidents", headers=bearer(f"m{i:016d}")).status_code == 401
    plain = client(app, ATTACKER)
    assert plain.get("/api/v1/incidents", headers=bearer(READ)).status_code == 429


def test_client_address_keys() -> None:
    assert client_address({"client": (f"{GLOBAL_64}::7", 1)}) == f"{GLOBAL_64}::/64"
    # non-global addresses count whole: a pod subnet, loopback, link-local with its zone
    assert client_address({"client": ("fd00::a:5", 1)}) == "fd00::a:5"
    assert client_address({"client": ("2001:db8:1:2::7", 1)}) == "2001:db8:1:2::7"
    assert client_address({"client": ("fe80::1%eth0", 1)}) == "fe80::1%eth0"
    assert client_address({"client": ("fe80::1%eth1", 1)}) == "fe80::1%eth1"
    assert client_address({"client": ("fe80::1", 1)}) == "fe80::1"
    assert client_address({"client": ("::ffff:10.0.0.1", 1)}) == "10.0.0.1"
    # NAT64 (RFC 6052's 64:ff9b::/96, which Python calls global): one IPv4 client per address
    assert client_address({"client": ("64:ff9b::c000:221", 1)}) == "192.0.2.33"
    assert client_address({"client": ("64:ff9b::c000:222", 1)}) == "192.0.2.34"
    # RFC 8215's local-use NAT64 prefix: whole (Python 3.11.7 calls it global, Debian's 3.11.2 not)
    assert client_address({"client": ("64:ff9b:1::c000:221", 1)}) == "64:ff9b:1::c000:221"
    assert client_address({"client": ("::1", 1)}) == "::1"
    assert client_address({"client": ("fe80::1%" + "x" * 500, 1)}) == "fe80::1%" + "x" * 64


@pytest.mark.parametrize(
    ("guesser", "neighbour"),
    [
        # two pods of one Docker/Cilium IPv6 pod subnet (a ULA /64)
        (("fd00::a:5", 1), ("fd00::b:9", 1)),
        # two link-local clients on different links (uvicorn gives the zone: fe80::1%eth0)
        (("fe80::1%eth0", 1), ("fe80::2%eth1", 1)),
        # one link-local address on two links is two hosts
        (("fe80::1%eth0", 1), ("fe80::1%eth1", 1)),
    ],
)
def test_a_non_global_ipv6_guesser_does_not_lock_out_its_neighbours(
    app: FastAPI, guesser: tuple[str, int], neighbour: tuple[str, int]
) -> None:
    for i in range(3):
        r = client(app, guesser).get("/api/v1/incidents", headers=bearer(f"stale-{i:016d}"))
        assert r.status_code == 401
    assert client(app, guesser).get("/api/v1/incidents", headers=bearer(READ)).status_code == 429
    # Alertmanager's pod beside it still gets in with the right token
    r = client(app, neighbour).get("/api/v1/incidents", headers=bearer(READ))
    assert r.status_code == 200


# an SSO proxy adding its own opaque access token (a GitHub OAuth token's form, as oauth2-proxy
# --pass-access-token sends it: oauth2-proxy/oauth2-proxy pkg/middleware/headers.go)
PROXY_TOKEN = "gho_16C7e42F292c6912E7710c838347Ae178B4a"


def test_a_signed_in_page_does_not_count_a_proxys_own_bearer(app: FastAPI) -> None:
    user = client(app, OPERATOR)
    assert login(user, READ).status_code == 303
    for _ in range(10):  # well past the limit of 3
        assert user.get("/ui/", headers=bearer(PROXY_TOKEN)).status_code == 200
    assert user.get("/api/v1/incidents", headers=bearer(READ)).status_code == 200


def test_signed_in_api_docs_do_not_count_a_proxys_own_bearer(app: FastAPI) -> None:
    """The UI links to /docs; a browser signed in to read them sends its SSO proxy's own token
    beside the cookie, which must neither count nor lock the address out of the API."""
    user = client(app, OPERATOR)
    assert login(user, READ).status_code == 303
    for _ in range(6):  # past the limit of 3
        assert user.get("/docs", headers=bearer(PROXY_TOKEN)).status_code == 200
    assert user.get("/api/v1/incidents", headers=bearer(READ)).status_code == 200


def test_concurrent_first_requests_share_one_throttle() -> None:
    """The throttle is made on an app's first guess; concurrent first guesses must not each make
    their own (their counts would be lost and more tokens checked than the limit)."""
    import sys
    import threading
    from types import SimpleNamespace

    from fleetmind.serving.deps import auth_throttle

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for _ in range(50):
            target = SimpleNamespace(state=SimpleNamespace())
            gate = threading.Barrier(8)
            made: list[int] = []

            def first(target: Any = target, gate: Any = gate, made: list[int] = made) -> None:
                gate.wait()
                made.append(id(auth_throttle(target)))

            threads = [threading.Thread(target=first) for _ in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert len(set(made)) == 1
    finally:
        sys.setswitchinterval(old)


def test_a_throttled_address_gets_the_html_page_and_a_session_still_opens(app: FastAPI) -> None:
    user = client(app, OPERATOR)
    assert login(user, READ).status_code == 303
    guesser = client(app, OPERATOR)  # another browser behind the same address
    for i in range(3):
        guesser.get("/ui/", headers=bearer(f"g{i}"), follow_redirects=False)
    r = guesser.get("/ui/", headers=bearer(READ), follow_redirects=False)
    assert r.status_code == 429
    assert r.headers["content-type"].startswith("text/html")
    assert 1 <= int(r.headers["retry-after"]) <= 60
    assert "Too many wrong tokens" in r.text and r.headers["cache-control"] == "no-store"
    # the right token from there is not confirmed by the login form's proxy note either
    r = guesser.get(
        "/ui/login", headers=bearer(READ), params={"next": "/ui/"}, follow_redirects=False
    )
    assert r.status_code == 200 and "proxy-signed-in" not in r.text
    # a page a session cookie signs in opens, bearer or not
    assert user.get("/ui/", headers=bearer(PROXY_TOKEN)).status_code == 200
    assert user.get("/ui/").status_code == 200
    # the API keeps its JSON 429
    r = guesser.get("/api/v1/incidents", headers=bearer(READ))
    assert r.status_code == 429 and r.headers["content-type"] == "application/json"


def test_feedback_form_reads_its_session_off_the_event_loop(
    app: FastAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    on_loop: list[bool] = []
    real = auth.read_session

    def spy(*args: Any, **kw: Any) -> Any:
        try:
            asyncio.get_running_loop()
            on_loop.append(True)
        except RuntimeError:
            on_loop.append(False)
        return real(*args, **kw)

    c = client(app, OPERATOR)
    assert login(c, ADMIN).status_code == 303
    monkeypatch.setattr(auth, "read_session", spy)
    c.post("/ui/incidents/1/feedback", data={"csrf": "x"}, follow_redirects=False)
    assert on_loop == [False]


def test_serve_names_why_a_long_token_is_refused(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from fleetmind.cli import main
    from fleetmind.serving.settings import get_settings

    monkeypatch.setenv("FLEETMIND_DATABASE_URL", f"sqlite:///{tmp_path}/x.db")
    monkeypatch.setenv("FLEETMIND_API_TOKEN", "0" * 32)
    monkeypatch.setenv("FLEETMIND_READ_TOKEN", "short")
    try:
        assert main(["serve", "--host", "0.0.0.0"]) == 2
    finally:
        get_settings.cache_clear()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "0" * 32 not in err
    assert "a placeholder or short token in FLEETMIND_READ_TOKEN" in err
    assert "fewer than 5 different characters in FLEETMIND_API_TOKEN" in err


def test_the_docs_say_a_broad_trusted_proxies_value_lets_clients_pick_their_address() -> None:
    from fleetmind.data.paths import REPO_ROOT

    security = (REPO_ROOT / "docs/serving/security.md").read_text()
    settings = (REPO_ROOT / "docs/serving/settings.md").read_text()
    assert "cannot lock Alertmanager out from elsewhere" not in security
    assert "escapes the limit" in security and "Name only the proxies' own" in security
    row = next(x for x in settings.splitlines() if x.startswith("| `FLEETMIND_TRUSTED_PROXIES`"))
    assert "escape the wrong-token limit" in row and "lock out another address" in row


def test_throttle_check_runs_at_most_limit_checks_under_concurrency() -> None:
    """:meth:`AuthThrottle.check` checks and counts in one locked step: 16 threads released at
    once with wrong tokens get exactly ``limit`` checks; the others are refused unchecked."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    t = AuthThrottle()
    calls: list[int] = []
    start = threading.Barrier(16, timeout=30)

    def wrong() -> frozenset[str] | None:
        calls.append(1)
        return None

    def one(_: int) -> tuple[frozenset[str] | None, int | None, bool]:
        start.wait()
        return t.check("a", 3, 60.0, wrong)

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(one, range(16)))
    assert len(calls) == 3
    assert sum(r[1] is None for r in results) == 3
    assert sum(r[2] for r in results) == 1  # one refusal start, one warning
    assert all(1 <= r[1] <= 60 for r in results if r[1] is not None)
    # a right token is checked while not refused, and never counted
    assert t.check("b", 3, 60.0, lambda: frozenset({"read"}), now=0.0) == (
        frozenset({"read"}),
        None,
        False,
    )
    assert t.retry_after("b", now=0.0) is None and t._clients.get("b") is None
    # limit 0: checked, never counted, never refused
    assert t.check("a", 0, 60.0, wrong) == (None, None, False)


def test_concurrent_wrong_bearers_on_a_page_check_at_most_limit_tokens(
    app: FastAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The middleware lets a ``/ui`` page's bearer through unchecked and the page checks it later,
    in a worker thread: 30 concurrent pages held between the two (every one past the middleware
    before any checks its token) still check only ``limit`` (3) tokens; the rest get the 429 page."""
    import threading
    from collections import Counter
    from concurrent.futures import ThreadPoolExecutor

    n = 30
    held = threading.Barrier(n, timeout=60)
    real_read, real_check = auth.read_session, auth.scopes_of_token
    checked: list[str] = []

    def read_after_all(*args: Any, **kw: Any) -> Any:
        held.wait()  # runs in _session after the middleware, before the bearer's check
        return real_read(*args, **kw)

    def counting_check(settings: Settings, given: str) -> frozenset[str] | None:
        checked.append(given)
        return real_check(settings, given)

    monkeypatch.setattr(auth, "read_session", read_after_all)
    monkeypatch.setattr(auth, "scopes_of_token", counting_check)

    def one(i: int) -> int:
        r = client(app, ATTACKER).get(
            "/ui/", headers=bearer(f"guess-{i:016d}"), follow_redirects=False
        )
        return r.status_code

    with ThreadPoolExecutor(n) as pool:
        codes = Counter(pool.map(one, range(n)))
    assert len(checked) == 3
    assert codes == {303: 3, 429: n - 3}
    monkeypatch.setattr(auth, "read_session", real_read)
    assert client(app, ATTACKER).get("/api/v1/incidents", headers=bearer(READ)).status_code == 429


def test_the_login_form_of_a_signed_in_browser_does_not_count_a_proxys_bearer(
    app: FastAPI,
) -> None:
    """A signed-in user opening "sign in with another token" (``/ui/login?switch=1``) behind an
    SSO proxy that adds its own opaque token: the form does not count that token, so the right
    admin token typed in next is taken."""
    user = client(app, OPERATOR)
    assert login(user, READ).status_code == 303
    for _ in range(5):  # past the limit of 3
        r = user.get(
            "/ui/login", params={"switch": "1", "next": "/ui/"}, headers=bearer(PROXY_TOKEN)
        )
        assert r.status_code == 200
    r = user.post(
        "/ui/login",
        headers=bearer(PROXY_TOKEN),
        data={"token": ADMIN, "csrf": user.cookies.get(auth.CSRF_COOKIE), "next": "/ui/"},
        follow_redirects=False,
    )
    assert r.status_code == 303
    assert user.get("/api/v1/incidents", headers=bearer(READ)).status_code == 200
    # nor is the bearer checked uncounted (no oracle for a signed-in reader's guesses)
    r = user.get("/ui/login", params={"switch": "1", "next": "/ui/"}, headers=bearer(ADMIN))
    assert r.status_code == 200 and "proxy-signed-in" not in r.text
    # without a session cookie the proxy's valid token still signs the form in
    fresh = client(app, OPERATOR)
    r = fresh.get("/ui/login", params={"switch": "1", "next": "/ui/"}, headers=bearer(ADMIN))
    assert r.status_code == 200 and "proxy-signed-in" in r.text


def test_concurrent_wrong_bearers_on_the_api_check_at_most_limit_tokens(
    app: FastAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The API's check and count are one locked step too: 30 requests held together after the
    middleware found their address (each on its own event loop thread here, as the pages' worker
    threads run beside the server's loop) check 3 tokens, the rest get 429 unchecked, even when
    a check gives other threads the interpreter before it is counted."""
    import itertools
    import threading
    import time
    from collections import Counter
    from concurrent.futures import ThreadPoolExecutor

    from fleetmind.serving import deps

    n = 30
    held = threading.Barrier(n, timeout=60)
    first = itertools.count()
    real_address, real_granted = deps.client_address, deps.granted_scopes
    checked: list[Any] = []

    def address_after_all(scope: Any) -> str | None:
        if next(first) < n:
            held.wait()
        return real_address(scope)

    def counting_granted(tokens: Any, header: Any) -> frozenset[str] | None:
        if header and b"guess-" in header:
            checked.append(header)
            time.sleep(0.05)  # gives up the GIL: another thread's request may run meanwhile
        return real_granted(tokens, header)

    monkeypatch.setattr(deps, "client_address", address_after_all)
    monkeypatch.setattr(deps, "granted_scopes", counting_granted)

    def one(i: int) -> int:
        return (
            client(app, ATTACKER)
            .get("/api/v1/incidents", headers=bearer(f"guess-{i:016d}"))
            .status_code
        )

    with ThreadPoolExecutor(n) as pool:
        codes = Counter(pool.map(one, range(n)))
    assert len(checked) == 3
    assert codes == {401: 3, 429: n - 3}
