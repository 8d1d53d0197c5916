"""Secrets never appear in error messages (OWASP Logging Cheat Sheet, "Data to exclude":
passwords, access tokens, database connection strings with credentials): URL userinfo and
password-like query parameters are masked (libpq reads ``password``/``sslpassword`` from the
query string, PostgreSQL docs "Connection URIs"); token and webhook settings are named, never
shown; a URL setting with an impossible port is refused (RFC 3986 section 3.2.3, a 16-bit port).
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from fleetmind.cli.serve import _settings_error
from fleetmind.data.errors import ConfigError
from fleetmind.redact import safe_uri
from fleetmind.serving.db import Database
from fleetmind.serving.settings import Settings


def _error_line(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> str:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError) as info:
        Settings()
    return _settings_error(info.value) + "\n" + str(info.value)


@pytest.mark.parametrize(
    ("url", "secret"),
    [
        ("postgresql+psycopg://u@host/db?password=S3cretQ", "S3cretQ"),
        ("postgresql://h/db?sslmode=require&sslpassword=K3yPass", "K3yPass"),
        ("http://prom/api?access_token=T0ken&x=1", "T0ken"),
        ("postgres://u:S3cretX@127.0.0.1:1/db", "S3cretX"),
    ],
)
def test_safe_uri_masks_query_passwords(url: str, secret: str) -> None:
    shown = safe_uri(f"cannot use {url!r}: refused")
    assert secret not in shown and "***" in shown


def test_safe_uri_keeps_plain_queries() -> None:
    assert safe_uri("http://prom:9090/api/v1/query?query=up&time=1") == (
        "http://prom:9090/api/v1/query?query=up&time=1"
    )


def test_database_url_error_hides_the_password() -> None:
    with pytest.raises(ConfigError) as info:
        Database("nosuchdialect://u:S3cretX@127.0.0.1:1/db")  # no such SQLAlchemy dialect
    assert "S3cretX" not in str(info.value) and "cannot use database URL" in str(info.value)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("FLEETMIND_READ_TOKEN", "Real-Secret-Token-With space"),
        ("FLEETMIND_API_TOKEN", "Real-Secret-Token-Newline\n"),
        ("FLEETMIND_NOTIFY_WEBHOOK_URL", "hooks.slack.com/services/T0/B0/SlackSecretPart"),
    ],
)
def test_secret_settings_are_named_not_shown(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    line = _error_line(monkeypatch, name, value)
    assert value.strip() not in line and "SlackSecretPart" not in line
    assert name in line and "value hidden" in line


def test_url_setting_error_masks_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    line = _error_line(monkeypatch, "FLEETMIND_PROMETHEUS_URL", "ftp://u:S3cretX@prom:9090")
    assert "S3cretX" not in line and "FLEETMIND_PROMETHEUS_URL" in line


@pytest.mark.parametrize("url", ["http://host:99999", "http://host:0", "http://host:x1"])
def test_url_setting_with_impossible_port_is_refused(
    monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    line = _error_line(monkeypatch, "FLEETMIND_PROMETHEUS_URL", url)
    assert "port" in line and "\n" in line and "Traceback" not in line


def test_database_open_error_masks_query_passwords(tmp_path) -> None:
    """SQLAlchemy's URL repr hides only a userinfo password: ``?password=`` reached the
    "cannot open the database" line as given."""
    import pytest

    from fleetmind.data.errors import ConfigError
    from fleetmind.serving.db import Database

    url = "postgresql+psycopg://u@127.0.0.1:1/db?password=S3cretQ&sslpassword=S3cretS"
    with pytest.raises(ConfigError) as err:
        Database(url, connect_timeout_s=1).migrate()
    assert "cannot open the database" in str(err.value)
    assert "S3cretQ" not in str(err.value) and "S3cretS" not in str(err.value)


def test_only_secret_words_are_masked_not_words_that_contain_them() -> None:
    """``keyword``, ``monkey``, ``author`` and ``passfile`` (a path) hold "key", "auth" and "pass"
    but are no secrets: masking them made printed rerun commands stop reproducing the run."""
    from fleetmind.redact import safe_uri

    plain = "x?query=up&monkey=1&var-author=me&keyword=gpu&passfile=/etc/pgpass;authority=1"
    assert safe_uri(plain) == plain
    masked = safe_uri("h?api_key=1&apiKey=2&access_token=3&sslpassword=4&X-Amz-Signature=5")
    assert masked == "h?api_key=***&apiKey=***&access_token=***&sslpassword=***&X-Amz-Signature=***"
