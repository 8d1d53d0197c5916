"""Secrets stay out of the database, the access log, redirects and error lines (OWASP Logging
Cheat Sheet, "Data to exclude": passwords, access tokens, database connection strings;
docs/serving/security.md, "Secrets in messages").

* The notifier's outbox (``notifications.delivery``) keeps each Alertmanager by its URL without
  its password (the user name kept, so two tenants of one Alertmanager stay two; an ``@`` in a
  path is no user part); a row stored with the full URL still matches, also after the password
  was rotated. Two configured URLs that differ in their password alone are refused.
* A token in a ``/ui`` URL's query is not copied into the login redirect's ``next``, and the
  access log masks one nested in an encoded ``next`` value.
* A comma in an Alertmanager password (legal in userinfo: RFC 3986 section 3.2.1, sub-delims)
  splits the comma-separated list; the error quotes no piece of it, and ``%2C`` works.
* A libpq keyword/value string (PostgreSQL, "Connection Strings": ``host=db password=...``) or a
  URL without its scheme given as the database URL is not echoed with its password; image
  references, pods on nodes, MLflow model URIs and path settings are not masked.
* A new SQLite file is created 0600, but not where SQLite would not create it (``mode=rw``,
  https://www.sqlite.org/uri.html), and at the target of a symlink.
* ``fleetmind replay --url http://user:pass@host`` masks the credentials in what it prints.
"""

from __future__ import annotations

import base64
import json
import logging
import os
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError
from sqlalchemy import select
from test_notify_failing_receivers import (
    Receivers,
    close,
    db,  # noqa: F401  (the database fixture)
    make,
    open_incidents,
    settle,
)
from test_ui import make_settings

from fleetmind.cli import replay as cli_replay
from fleetmind.cli.serve import _settings_error
from fleetmind.data.errors import ConfigError, NotAvailableError
from fleetmind.redact import drop_secret_params, safe_request_target, safe_uri, without_password
from fleetmind.serving.app import AccessLogRedaction, create_app
from fleetmind.serving.db import Database, notifications
from fleetmind.serving.notify import OUTBOX
from fleetmind.serving.settings import Settings
from fleetmind.training.replay import replay

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

AM_KEY = "http://amuser@am.test:9093/api/v2/alerts"
"""The Alertmanager's /api/v2/alerts URL without its password: what the outbox stores."""


def _am(password: str) -> str:
    return f"http://amuser:{password}@am.test:9093"


def _rows(db: Database) -> list[dict]:  # noqa: F811
    with db.read() as conn:
        return [dict(r._mapping) for r in conn.execute(select(notifications))]


def _owe_a_resolution(db: Database, password: str) -> int:  # noqa: F811
    """An incident whose resolution the Alertmanager (down: 503) still owes, sent with
    ``password``."""
    [inc] = open_incidents(db, 1)
    n, rec, clock = make(
        db, Receivers, notify_alertmanager_url=_am(password), notify_webhook_url=None
    )
    rec.down[_am(password) + "/api/v2/alerts"] = 503
    settle(n, clock)
    close(db, inc)
    clock.t += 1
    n.poll()
    [row] = _rows(db)
    assert row["delivery"][OUTBOX][-1]["alertmanager"], row["delivery"]
    return inc


def _delivered_after_rotation(db: Database, inc: int, password: str) -> Receivers:  # noqa: F811
    """A notifier restarted with the rotated ``password``, the Alertmanager up: one poll."""
    n, rec, clock = make(
        db, Receivers, notify_alertmanager_url=_am(password), notify_webhook_url=None
    )
    clock.t += 100
    n.poll()
    return rec


# ------------------------------------------------------------------ the notifier's outbox
def test_the_outbox_stores_no_alertmanager_password_and_survives_its_rotation(
    db: Database,  # noqa: F811
) -> None:
    """The resolution owed is kept under the URL without ``user:password@``; after the password
    is rotated, the restarted notifier still delivers it, with the new password."""
    inc = _owe_a_resolution(db, "AMs3cretPW")
    stored = json.dumps([r["delivery"] for r in _rows(db)])
    assert "AMs3cretPW" not in stored
    assert _rows(db)[0]["delivery"][OUTBOX][-1]["alertmanager"] == [AM_KEY]

    rec = _delivered_after_rotation(db, inc, "N3wPassW0rd")
    assert (True, True) in [(ok, "endsAt" in b[-1]) for _, ok, b in rec.calls]
    assert {u for u, _, _ in rec.calls} == {_am("N3wPassW0rd") + "/api/v2/alerts"}
    assert OUTBOX not in (_rows(db)[0]["delivery"] or {})


def test_a_row_stored_with_the_full_url_still_matches_after_rotation(
    db: Database,  # noqa: F811
) -> None:
    """A row written before URLs were stored without credentials holds the full URL (and its
    ``refused_by`` marks too): it matches the configured Alertmanager with the userinfo left out
    on both sides, so the resolution is delivered, and the old password leaves the database."""
    inc = _owe_a_resolution(db, "0ldPassW0rd")
    [row] = _rows(db)
    old = _am("0ldPassW0rd") + "/api/v2/alerts"
    for e in row["delivery"][OUTBOX]:
        e["alertmanager"], e["refused_by"] = [old], [old]
    with db.write() as conn:
        conn.execute(notifications.update().values(delivery=row["delivery"]))

    rec = _delivered_after_rotation(db, inc, "N3wPassW0rd")
    assert (True, True) in [(ok, "endsAt" in b[-1]) for _, ok, b in rec.calls]
    assert "0ldPassW0rd" not in json.dumps([r["delivery"] for r in _rows(db)])


@pytest.mark.parametrize(
    ("url", "key"),
    [
        ("http://amuser:p@ss@am.test:9093/api/v2/alerts", AM_KEY),
        ("http://tenant1:pw1@am:9093/x", "http://tenant1@am:9093/x"),
        ("http://:pw@am:9093/x", "http://am:9093/x"),
        ("http://tenant1@am:9093/x", "http://tenant1@am:9093/x"),
        ("http://am:9093/x", "http://am:9093/x"),
        # an @ after the authority (RFC 3986 section 3.2: it ends at the first /, ? or #)
        ("http://am1:9093/t@x", "http://am1:9093/t@x"),
        ("http://am:9093?u=a:b@c", "http://am:9093?u=a:b@c"),
        ("am:9093", "am:9093"),
    ],
)
def test_without_password(url: str, key: str) -> None:
    assert without_password(url) == key


def _auth_users(seen: list[str]) -> set[str]:
    return {base64.b64decode(a.split()[1]).decode().split(":")[0] for a in seen if a}


class _Auth(Receivers):
    """Receivers that also record each post's ``Authorization`` header."""

    seen: list[str]

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request.headers.get("authorization", ""))
        return super().__call__(request)


TENANTS = "http://tenant1:pw1@am.test:9093,http://tenant2:pw2@am.test:9093"


def test_two_tenants_of_one_alertmanager_both_get_the_alert(db: Database) -> None:  # noqa: F811
    """Two URLs that differ in ``user:password`` alone were one key, so only the last tenant
    got alerts; the user name stays in the key."""
    open_incidents(db, 1)
    _Auth.seen = []
    n, _, clock = make(db, _Auth, notify_alertmanager_url=TENANTS, notify_webhook_url=None)
    assert n.am_urls == [
        "http://tenant1@am.test:9093/api/v2/alerts",
        "http://tenant2@am.test:9093/api/v2/alerts",
    ]
    settle(n, clock)
    assert _auth_users(_Auth.seen) == {"tenant1", "tenant2"}


def test_old_rows_of_two_tenants_keep_two_keys(db: Database) -> None:  # noqa: F811
    """A row stored with both full URLs (before passwords were left out) owes each tenant its
    resolution: both are delivered, and no password stays in the database."""
    [inc] = open_incidents(db, 1)
    _Auth.seen = []
    n, rec, clock = make(db, _Auth, notify_alertmanager_url=TENANTS, notify_webhook_url=None)
    full = [u + "/api/v2/alerts" for u in TENANTS.split(",")]
    for u in full:
        rec.down[u] = 503
    settle(n, clock)
    close(db, inc)
    clock.t += 1
    n.poll()
    [row] = _rows(db)
    for e in row["delivery"][OUTBOX]:
        e["alertmanager"] = list(full)
    with db.write() as conn:
        conn.execute(notifications.update().values(delivery=row["delivery"]))
    _Auth.seen = []
    n, rec, clock = make(db, _Auth, notify_alertmanager_url=TENANTS, notify_webhook_url=None)
    clock.t += 100
    n.poll()
    ended = {u for u, ok, b in rec.calls if ok and "endsAt" in b[-1]}
    assert ended == set(full)
    assert "pw1" not in json.dumps([r["delivery"] for r in _rows(db)])


def test_an_at_in_the_path_keeps_two_alertmanagers_apart(db: Database) -> None:  # noqa: F811
    n, _, _ = make(
        db,
        Receivers,
        notify_alertmanager_url="http://am1.test:9093/t@x,http://am2.test:9093/t@x",
        notify_webhook_url=None,
    )
    assert n.am_urls == [
        "http://am1.test:9093/t@x/api/v2/alerts",
        "http://am2.test:9093/t@x/api/v2/alerts",
    ]


def test_urls_differing_in_their_password_alone_are_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The outbox keys them alike, so one would silently take the other's alerts: refused in
    one line that quotes neither password."""
    monkeypatch.setenv(
        "FLEETMIND_NOTIFY_ALERTMANAGER_URL",
        "http://amuser:Old9assW0rd@am.test:9093,http://amuser:N3wPassW0rd@am.test:9093/",
    )
    with pytest.raises(ValidationError) as info:
        Settings()
    line = _settings_error(info.value)
    assert "\n" not in line and "Old9ass" not in line and "N3wPass" not in line
    assert "URLs 1 and 2 of the 2" in line and "password alone" in line


# ------------------------------------------------------------------ /ui login redirect
TOKEN = "ui-s3cret-token"  # test_ui's api_token


def test_a_token_in_a_ui_url_is_not_carried_into_the_login_redirect(tmp_path: Path) -> None:
    with TestClient(create_app(make_settings(tmp_path))) as c:
        for param in ("access_token", "token", "api_key"):
            r = c.get(f"/ui/incidents/1?{param}={TOKEN}&tab=alerts", follow_redirects=False)
            assert r.status_code == 303
            location = r.headers["location"]
            assert TOKEN not in location and param not in location, location
            assert location == "/ui/login?next=/ui/incidents/1%3Ftab%3Dalerts"
            page = c.get(location)
            assert TOKEN not in page.text
        r = c.get(f"/ui/?token={TOKEN}", follow_redirects=False)
        assert r.headers["location"] == "/ui/login?next=/ui/"


def test_drop_secret_params() -> None:
    assert drop_secret_params("a=1&access_token=x&token=&b=2") == "a=1&token=&b=2"
    assert drop_secret_params("next=%2Fui%2Fx%3Ftoken%3Dsecret&show=recent") == "show=recent"
    assert drop_secret_params("show=recent") == "show=recent"


def test_the_access_log_masks_a_token_nested_in_an_encoded_next() -> None:
    """What uvicorn logged for the redirect before it dropped the token: the encoded ``next``
    value's own query is masked (uvicorn passes the target as one argument of the record)."""
    target = f"/ui/login?next=/ui/incidents/1%3Faccess_token%3D{TOKEN}%26tab%3Dalerts"
    shown = safe_request_target(target)
    assert TOKEN not in shown
    assert shown == "/ui/login?next=/ui/incidents/1%3Faccess_token%3D***%26tab%3Dalerts"
    record = logging.LogRecord(
        "uvicorn.access",
        logging.INFO,
        __file__,
        1,
        '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:1", "GET", target, "1.1", 200),
        None,
    )
    AccessLogRedaction().filter(record)
    assert TOKEN not in record.getMessage() and "access_token%3D***" in record.getMessage()
    plain = "/ui/login?next=%2Fui%2Fincidents%2F1"  # nothing secret: unchanged
    assert safe_request_target(plain) == plain


# ------------------------------------------------------------------ a comma in the password
def test_a_comma_in_an_alertmanager_password_is_not_quoted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "FLEETMIND_NOTIFY_ALERTMANAGER_URL", "http://amuser:Pa,ssW0rdX@127.0.0.1:9093"
    )
    with pytest.raises(ValidationError) as info:
        Settings()
    line = _settings_error(info.value) + "\n" + str(info.value)
    assert "amuser" not in line and "ssW0rdX" not in line  # ('http://amuser:Pa' was quoted)
    assert "URL 1 of the 2" in line and "%2C" in line


def test_a_comma_written_pct2c_reaches_alertmanager(db: Database) -> None:  # noqa: F811
    """``%2C`` keeps the URL whole; httpx sends the decoded password (``Pa,ssW0rdX``)."""
    seen: list[str] = []

    class Auth(Receivers):
        def __call__(self, request: httpx.Request) -> httpx.Response:
            seen.append(request.headers.get("authorization", ""))
            return super().__call__(request)

    open_incidents(db, 1)
    n, _, clock = make(
        db, Auth, notify_alertmanager_url=_am("Pa%2CssW0rdX"), notify_webhook_url=None
    )
    assert n.am_urls == [AM_KEY]
    settle(n, clock)
    assert seen and seen[0] == "Basic " + base64.b64encode(b"amuser:Pa,ssW0rdX").decode()


# ------------------------------------------------------------------ the database URL
@pytest.mark.parametrize(
    "url",
    [
        "host=db port=5432 user=fm password=PgS3cretPW dbname=fleetmind",
        "fm:PgS3cretPW@db:5432/fleetmind",
    ],
)
def test_a_database_url_not_in_url_form_is_not_echoed(url: str) -> None:
    with pytest.raises(ConfigError) as info:
        Database(url)
    assert "PgS3cretPW" not in str(info.value) and "cannot use database URL" in str(info.value)


def test_a_new_sqlite_database_is_private(tmp_path: Path) -> None:
    """A new database file and its -wal and -shm are 0600 under umask 022 (they were 0644, so any
    local user could read the alerts, incidents and sessions); an existing file keeps its mode."""
    old = os.umask(0o022)
    try:
        d = Database(f"sqlite:///{tmp_path}/fm.db")
        d.migrate()
        with d.write() as conn:
            conn.execute(select(notifications))
        modes = {p.name: p.stat().st_mode & 0o777 for p in tmp_path.glob("fm.db*")}
        d.dispose()
        (tmp_path / "kept.db").touch(mode=0o640)
        Database(f"sqlite:///{tmp_path}/kept.db").migrate()
    finally:
        os.umask(old)
    assert modes["fm.db"] == modes["fm.db-wal"] == modes["fm.db-shm"] == 0o600, modes
    assert (tmp_path / "kept.db").stat().st_mode & 0o777 == 0o640


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:///file:{p}?mode=rw&uri=true",
        "sqlite:///file:{p}%3Fmode%3Drw?uri=true",
        "sqlite:///file:{p}?mode=ro&uri=true",
    ],
)
def test_mode_rw_does_not_create_the_file(tmp_path: Path, url: str) -> None:
    """SQLite's ``mode=rw`` opens an existing file and never creates one
    (https://www.sqlite.org/uri.html): the 0600 pre-create must not create it either."""
    missing = tmp_path / "missing.db"
    d = Database(url.format(p=missing))
    with pytest.raises(Exception):  # noqa: B017, PT011  (SQLite: unable to open database file)
        d.migrate()
    d.dispose()
    assert not missing.exists()


def test_mode_rwc_and_a_dangling_symlink_create_a_private_file(tmp_path: Path) -> None:
    """``mode=rwc`` creates; so does a symlink to a file not there yet, which SQLite opens at
    its target (the pre-create gave ``EEXIST`` on the link and SQLite made the target 0644)."""
    (tmp_path / "link.db").symlink_to(tmp_path / "target.db")
    old = os.umask(0o022)
    try:
        for url in (
            f"sqlite:///{tmp_path}/link.db",
            f"sqlite:///file:{tmp_path}/new.db?mode=rwc&uri=true",
        ):
            d = Database(url)
            d.migrate()
            d.dispose()
    finally:
        os.umask(old)
    assert (tmp_path / "target.db").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "new.db").stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (
            "'host=db port=5432 user=fm password=PgS3cretPW dbname=fleetmind'",
            "'host=db port=5432 user=fm password=*** dbname=fleetmind'",
        ),
        (
            "\"host=db password='Pg S3cret\\'PW' sslpassword=K3y\"",
            '"host=db password=*** sslpassword=***"',
        ),
        ("cannot use 'fm:PgS3cretPW@db:5432/fleetmind'", "cannot use '***@db:5432/fleetmind'"),
        ("mail bob@example.com at 12:00", "mail bob@example.com at 12:00"),
        ("passfile=/etc/pgpass keyword=x", "passfile=/etc/pgpass keyword=x"),
        # an MLflow model URI is a scheme and a path, not user:password@host
        ("loaded models:/fleetmind-rca@champion", "loaded models:/fleetmind-rca@champion"),
        ("runs:/abc/model@x", "runs:/abc/model@x"),
        # but only its lower-case scheme then ":/" (mlflow.store.artifact.utils.models): a
        # database URL without its scheme whose user is "models" or "runs" is masked
        ("cannot use models:s3cr@db:5432/fm", "cannot use ***@db:5432/fm"),
        ("runs:Hunter2@db/fm", "***@db/fm"),
        ("mlflow-artifacts:Pw@db/fm", "***@db/fm"),
        ("MODELS:/x@db", "***@db"),
        # a password starting with "/" is no URI path (1 in 64 base64 passwords)
        ("amuser:/Zm9vYmFy@am:9093", "***@am:9093"),
        # image references with a digest, a pod on a node: a "/" before the ":"
        (
            "pulled registry.io/team/img:v1.2@sha256:abc",
            "pulled registry.io/team/img:v1.2@sha256:abc",
        ),
        (
            "nvcr.io/nvidia/pytorch:24.01-py3@sha256:de",
            "nvcr.io/nvidia/pytorch:24.01-py3@sha256:de",
        ),
        ("img:v1.2@sha256:abc", "img:v1.2@sha256:abc"),
        ("pod gpu-ns/train-0:worker@node-7 crashed", "pod gpu-ns/train-0:worker@node-7 crashed"),
        # a name that is or ends in password/passwd/pwd/token/secret; not key, a path setting
        ("Param with key='x' was already logged", "Param with key='x' was already logged"),
        ("FLEETMIND_TLS_KEY='/etc/tls/key.pem'", "FLEETMIND_TLS_KEY='/etc/tls/key.pem'"),
        ("FLEETMIND_API_TOKEN_FILE=/run/tok", "FLEETMIND_API_TOKEN_FILE=/run/tok"),
        ("sig=abc auth=x pass=y", "sig=abc auth=x pass=y"),
        (
            "FLEETMIND_API_TOKEN=abc PGPASSWORD=x pwd=y",
            "FLEETMIND_API_TOKEN=*** PGPASSWORD=*** pwd=***",
        ),
        # an API, secret, access or private key; apikey, credentials, a signature
        (
            "apikey=a1 api_key=a2 api-key=a3 X-Api-Key=a4",
            "apikey=*** api_key=*** api-key=*** X-Api-Key=***",
        ),
        (
            "access_key=b1 secret_key=b2 aws_secret_access_key=b3 private_key=b4",
            "access_key=*** secret_key=*** aws_secret_access_key=*** private_key=***",
        ),
        (
            "auth_token=c1 credentials=c2 signature=c3 X-Amz-Signature=c4",
            "auth_token=*** credentials=*** signature=*** X-Amz-Signature=***",
        ),
        # a bare key, libpq's sslkey (a path), a TLS key setting, a *_FILE path stay shown
        (
            "key=k sslkey=/etc/k.pem FLEETMIND_TLS_KEY=/k API_KEY_FILE=/f",
            "key=k sslkey=/etc/k.pem FLEETMIND_TLS_KEY=/k API_KEY_FILE=/f",
        ),
        (
            "Param with key='api' was already logged with value='x'",
            "Param with key='api' was already logged with value='x'",
        ),
    ],
)
def test_safe_uri_masks_libpq_strings_and_urls_without_scheme(text: str, shown: str) -> None:
    assert safe_uri(text) == shown


# ------------------------------------------------------------------ fleetmind replay --url
STORM = {
    "name": "tiny",
    "alerts": [
        {
            "labels": {"alertname": "NodeDown", "cluster": "c0", "node": "h1"},
            "annotations": {},
            "startsAt": "2026-01-01T00:00:00Z",
        }
    ],
}
REPLAY_URL = "http://u:RPLsecret@127.0.0.1:18167"


@pytest.mark.parametrize("answer", ["refused", 401])
def test_replay_errors_mask_the_url_credentials(answer: str | int) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if answer == "refused":
            raise httpx.ConnectError("[Errno 111] Connection refused", request=request)
        return httpx.Response(int(answer), text="no")

    client = httpx.Client(base_url=REPLAY_URL, transport=httpx.MockTransport(handler))
    with pytest.raises(NotAvailableError) as info:
        replay(
            STORM, REPLAY_URL, speed=1e9, say=lambda _: None, sleep=lambda _: None, client=client
        )
    assert "RPLsecret" not in str(info.value) and "http://***@127.0.0.1:18167" in str(info.value)


def test_replay_cli_lines_mask_the_url_credentials(capsys: pytest.CaptureFixture[str]) -> None:
    client = httpx.Client(
        base_url=REPLAY_URL, transport=httpx.MockTransport(lambda _: httpx.Response(401))
    )
    start = datetime.now(UTC)
    cli_replay._show_incidents(client, REPLAY_URL, {}, STORM, start, wait_s=0.0)
    inc = {"id": 7, "alert_count": 1, "causes": [{"node": "c0/host/h1"}]}
    cli_replay._print_incident(REPLAY_URL, inc, STORM, earlier=0)
    out = capsys.readouterr().out
    assert "RPLsecret" not in out
    assert "http://***@127.0.0.1:18167/ui/" in out and "***@127.0.0.1:18167/ui/incidents/7" in out
