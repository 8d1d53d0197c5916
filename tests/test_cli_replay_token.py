"""``fleetmind replay`` refuses a token the service could never hold, before sending anything, in
one line that names where the token came from and never quotes it: the service's own rule
(``serving/settings.py``: printable ASCII without spaces). Before the fix a non-ASCII token
(``--token 'tökén'``) ended in a ``UnicodeEncodeError`` traceback, and a token with a trailing
newline (a Secret made with ``kubectl create secret --from-file``) printed ``cannot reach ...:
Illegal header value b'Bearer <the token>\\n'``. A connection error that quotes the
``Authorization`` value is masked too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from fleetmind.cli import main
from fleetmind.data.errors import ConfigError, NotAvailableError
from fleetmind.training.replay import load_storm, replay

REPO = Path(__file__).resolve().parents[1]
STORM = str(REPO / "examples" / "storm-dns.json")
URL = "http://127.0.0.1:19651"  # nothing is sent: the token is refused first


def _one_error(capsys: pytest.CaptureFixture[str], argv: list[str], secret: str) -> str:
    rc = main(argv)
    captured = capsys.readouterr()
    err = [ln for ln in captured.err.splitlines() if ln.strip()]
    assert rc == 2, captured.err
    assert len(err) == 1, err
    assert secret.strip() not in captured.err + captured.out
    return err[0]


@pytest.mark.parametrize(
    "token", ["tökén", "s3cr3t-ingest-token-value\n", "two words", " lead", "tab\tin"]
)
def test_bad_token_option_is_one_line(token: str, capsys: pytest.CaptureFixture[str]) -> None:
    line = _one_error(capsys, ["replay", "--url", URL, "--token", token, STORM], token)
    assert line.startswith("fleetmind: error: --token is not a valid token")


@pytest.mark.parametrize("name", ["FLEETMIND_API_TOKEN", "FLEETMIND_INGEST_TOKEN"])
def test_bad_token_variable_is_named(
    name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("FLEETMIND_API_TOKEN", raising=False)
    monkeypatch.delenv("FLEETMIND_INGEST_TOKEN", raising=False)
    secret = "s3cr3t-ingest-token-value\n"
    monkeypatch.setenv(name, secret)
    line = _one_error(capsys, ["replay", "--url", URL, STORM], secret)
    assert f"${name} is not a valid token" in line
    assert "newline" in line


def test_check_token_follows_the_service_rule() -> None:
    from fleetmind.training.replay import check_token

    check_token(None)
    check_token("abc-DEF_123.~!")
    for bad in ("", "  ", "é", "a b", "a\n"):
        with pytest.raises(ConfigError):
            check_token(bad, "--token")


def test_a_connection_error_quoting_the_header_is_masked() -> None:
    class _Client:
        def post(self, *_: Any, **kw: Any) -> Any:
            raise httpx.LocalProtocolError(
                f"Illegal header value {kw['headers']['Authorization']!r}"
            )

    storm = load_storm(STORM)
    with pytest.raises(NotAvailableError) as caught:
        replay(storm, URL, token="s3cr3t", speed=1000.0, say=lambda _: None,
               sleep=lambda _: None, client=_Client())  # fmt: skip
    assert "s3cr3t" not in str(caught.value)
    assert "Bearer ***" in str(caught.value)
