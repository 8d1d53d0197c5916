"""A URL's ``user:password@`` is masked up to its last ``@``, also when the password holds an
unencoded ``/``, ``?`` or ``#`` (``openssl rand -base64`` emits ``/`` and ``+``): RFC 3986
section 3.2 ends the authority at the first ``/``, ``?`` or ``#``, so a mask that stopped there
printed such a password in clear (OWASP Logging Cheat Sheet, "Data to exclude": passwords).
"""

from __future__ import annotations

import os

import pytest

from fleetmind.cli import main
from fleetmind.redact import safe_request_target, safe_uri

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

SECRET_URLS = [
    ("http://admin:Zm9v/YmFy+cw==@127.0.0.1:18143", ("Zm9v", "YmFy", "cw==")),
    ("http://admin:pa#ss@127.0.0.1:18143", ("pa#ss", "'pa'")),
    ("http://bob:p@ss:w/rd%@127.0.0.1:18143", ("p@ss", "w/rd", "rd%")),
    ("http://am:Zm9v/YmFy@am:9093", ("Zm9v", "YmFy")),
    ("http://u:a?b/c#d@prom:9090/api", ("a?b", "c#d")),
]


@pytest.mark.parametrize(("url", "parts"), SECRET_URLS)
@pytest.mark.parametrize("quoted", [False, True])
def test_password_with_unencoded_delimiters_is_masked_whole(
    url: str, parts: tuple[str, ...], quoted: bool
) -> None:
    text = f"invalid setting X={url!r}: got {url!r}" if quoted else f"cannot query {url}: refused"
    shown = safe_uri(text)
    assert not any(p in shown for p in parts), shown
    assert "//***@" in shown


def test_the_host_after_the_password_stays_visible() -> None:
    shown = safe_uri("got 'http://admin:Zm9v/YmFy+cw==@127.0.0.1:18143'")
    assert shown == "got 'http://***@127.0.0.1:18143'"


@pytest.mark.parametrize(
    "text",
    [
        "http://prom:9090/api/v1/query?query=up",
        "http://[::1]:9090/metrics",
        "see http://a/b and 'http://c/d'",
    ],
)
def test_urls_without_an_at_are_unchanged(text: str) -> None:
    assert safe_uri(text) == text


def test_a_later_url_is_not_swallowed() -> None:
    """The mask stops at whitespace and quotes: the first URL keeps its host."""
    assert (
        safe_uri("from 'http://a:1/x' to http://u:p/w@b:2")
        == "from 'http://a:1/x' to http://***@b:2"
    )
    assert safe_uri("'http://a/x','http://u:p@b'") == "'http://a/x','http://***@b'"
    assert safe_uri("http://a/x http://u:p@b") == "http://a/x http://***@b"


def test_quote_inside_a_quoted_password_is_masked() -> None:
    """RFC 3986 allows ``'`` unencoded in userinfo; ``repr`` then quotes with ``"``."""
    assert safe_uri(repr("http://u:it's@h:1")) == '"http://***@h:1"'
    assert safe_uri(repr("http://u:a'b\"c@h:1")) == "'http://***@h:1'"


def test_an_at_in_a_path_masks_the_host_too() -> None:
    """Documented over-masking: text cannot tell ``/a@b`` in a path from a password holding an
    unencoded ``/`` (``http://u:Zm9v/YmFy@b``), so both hide everything up to the ``@``."""
    assert safe_uri("http://host/a@b") == "http://***@b"
    assert safe_uri("http://host:9090/q?email=a@b.c") == "http://***@b.c"


@pytest.mark.parametrize(("url", "parts"), SECRET_URLS[:2])
def test_doctor_never_prints_the_password(
    url: str, parts: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    """``check_http_url`` quoted the raw URL and httpx's reason (``... as 'Zm9v'``)."""
    assert main(["doctor", "--prometheus", url]) == 2
    err = capsys.readouterr().err
    assert "--prometheus" in err and "//***@127.0.0.1:18143" in err
    assert not any(p in err for p in parts), err


@pytest.mark.parametrize(
    ("name", "url", "parts"),
    [
        ("FLEETMIND_PROMETHEUS_URL", *SECRET_URLS[0]),
        ("FLEETMIND_PROMETHEUS_URL", *SECRET_URLS[1]),
        ("FLEETMIND_NOTIFY_ALERTMANAGER_URL", *SECRET_URLS[3]),
    ],
)
def test_settings_error_never_prints_the_password(
    name: str, url: str, parts: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    from pydantic import ValidationError

    from fleetmind.cli.serve import _settings_error
    from fleetmind.serving.settings import Settings

    monkeypatch.setenv(name, url)
    with pytest.raises(ValidationError) as info:
        Settings()
    line = _settings_error(info.value)
    assert name in line and "***@" in line
    assert not any(p in line for p in parts), line


@pytest.mark.parametrize(
    "target",
    [
        "/" * 262_144,
        "/" + "//a" * 87_381,
        "/x?" + "//" * 131_072,
        "/" + "'//\\" * 65_536,
        "/" + '"//\\' * 65_536,
        "/x?" + "k=?" * 87_381,
    ],
    ids=["slashes", "slash-pairs", "query", "single-quoted", "double-quoted", "params"],
)
def test_masking_a_long_request_target_is_linear(target: str) -> None:
    """A client controls the request path the access log masks: a third regex branch from
    ``//`` over the token to ``@`` backtracked from every ``//`` (quadratic: 256 KiB of slashes
    took minutes, blocking the worker's event loop). The alarm is a hang guard, not a timing
    figure: the linear rule takes milliseconds here."""
    import signal

    def hung(signum: int, frame: object) -> None:
        raise TimeoutError("masking did not finish in 20 s")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(20)
    try:
        assert safe_request_target(target) == target  # nothing to mask, nothing changed
        assert "@h" in safe_uri(target + "@h")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("postgresql+psycopg://fm@db/fm?sslmode=require&password=Hunter@2024x", "2024x"),
        ("https://am:9093/api/v2/alerts?access_token=t0k@en-TAIL&x=1", "en-TAIL"),
        ("'http://prom:9090/api/v1/query?apikey=k@y-TAILSECRET'", "TAILSECRET"),
        ("http://u:p?token=abc@h/x?password=zz&k=1", "zz"),
        ("postgresql://fm:Tr0ub&d=or@db/fm?sslpassword=KEYPASS", "KEYPASS"),
        ("redis://u:a;b=c@cache:6379/0?password=SECRETPW", "SECRETPW"),
        ("https://admin:p?x=1@prom:9090/api?access_token=SECRETTOK", "SECRETTOK"),
        ("postgresql://u:p&q=r@db/fm?password=Hunter@2024x", "2024x"),
    ],
)
def test_a_secret_parameter_holding_an_at_sign_is_masked_whole(text: str, secret: str) -> None:
    """The user-part rule (``//`` to the last ``@``) and the parameter rule are applied to the
    original text and their spans merged: applied one after the other, the first removed the
    ``password=`` the second looks for and showed the secret's tail after its ``@``."""
    shown = safe_uri(text)
    assert secret not in shown
    assert "***" in shown
