"""What a 401/403 (or a Prometheus-API ``status: error``) from the Prometheus FleetMind queries
becomes in a message: the hint that fits the server, the server's text printable only, an HTML
page as its title, and nothing FleetMind sent echoed back.

Bodies modelled on the real components:

* Grafana Cloud's Mimir gateway answers a bad credential ``401`` with the Prometheus API's error
  shape ``{"status": "error", "error": "authentication error: ..."}``
  (prometheus.io/docs/prometheus/latest/querying/api/, "Format overview").
* Amazon Managed Service for Prometheus: an unsigned request gets ``403`` and
  ``x-amzn-ErrorType: MissingAuthenticationTokenException``; a signed one whose IAM identity lacks
  ``aps:QueryMetrics`` gets ``403 {"Message": "User: arn:aws:sts::... is not authorized to
  perform: aps:QueryMetrics ..."}`` with ``x-amzn-ErrorType: AccessDeniedException`` (AWS docs,
  "Troubleshooting Amazon Managed Service for Prometheus", Identity and access management).
* oauth2-proxy's error page (``pkg/app/pagewriter/error.html`` of oauth2-proxy/oauth2-proxy):
  ``<title>{{.StatusCode}} {{.Title}}</title>`` after a ``<head>`` of meta, script and style.
* vmauth with ``-logInvalidAuthTokens`` (``app/vmauth/main.go`` of VictoriaMetrics/VictoriaMetrics,
  ``cannot authorize request with auth tokens %q``; ``main_test.go`` expects
  ``["http_auth:Basic Zm9vOmludmFsaWQtc2VjcmV0"]`` for ``foo:invalid-secret@``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import httpx
import pytest

from fleetmind.data.errors import NotAvailableError
from fleetmind.serving.telemetry.prometheus import PrometheusApiSource, http_problem
from tests.http_helpers import serve

ESCAPES = "bad\x1b[2J\x1b]0;pwned\x07 token"
PASSWORD = "Pa55-word-xyz"
TOKEN = "tok-9f8e7d6c5b4a"
API_KEY = "key-0123456789abcdef"


def _problem(resp: httpx.Response) -> str:
    try:
        body = resp.json()
    except ValueError:
        body = None
    msg = http_problem(resp, body)
    assert msg is not None
    return msg


def _said(msg: str) -> str:
    return msg.split("(server said: ", 1)[1].rsplit("):", 1)[0]


# ---------------------------------------------------------------- JSON error bodies
def test_grafana_cloud_gateway_json_401_gets_its_code_and_the_credentials_hint() -> None:
    resp = httpx.Response(
        401,
        json={
            "status": "error",
            "error": "authentication error: invalid authentication credentials",
        },
    )
    msg = _problem(resp)
    assert "HTTP 401" in msg
    assert "(server said: authentication error: invalid authentication credentials)" in msg
    assert "FLEETMIND_PROMETHEUS_BEARER_TOKEN_FILE" in msg


@pytest.mark.parametrize("code", [401, 403, 422, 503, 200])
def test_a_json_error_text_reaches_the_message_printable_only(code: int) -> None:
    resp = httpx.Response(code, json={"status": "error", "error": ESCAPES + "x" * 900})
    msg = _problem(resp)
    assert "\x1b" not in msg and "\x07" not in msg
    assert "bad [2J ]0;pwned token" in msg
    assert len(msg) < 800  # capped (500 characters of the server's text at most)


# ---------------------------------------------------------------- Amazon Managed Prometheus
def test_amp_access_denied_names_the_iam_permission_not_the_sigv4_proxy() -> None:
    resp = httpx.Response(
        403,
        json={
            "Message": "User: arn:aws:sts::123456789012:assumed-role/fleetmind/i-0 is not "
            "authorized to perform: aps:QueryMetrics on resource: arn:aws:aps:us-east-1:"
            "123456789012:workspace/ws-1"
        },
        headers={"x-amzn-ErrorType": "AccessDeniedException"},
    )
    msg = _problem(resp)
    assert "aps:QueryMetrics" in msg.split("):", 1)[1] and "aws-sigv4-proxy" not in msg


@pytest.mark.parametrize(
    "kind",
    [
        "MissingAuthenticationTokenException",
        "MissingAuthenticationTokenException:http://internal.amazon.com/coral/",
        "IncompleteSignatureException",
    ],
)
def test_amp_unsigned_or_badly_signed_points_at_the_sigv4_proxy(kind: str) -> None:
    resp = httpx.Response(403, json={"message": "Forbidden"}, headers={"x-amzn-ErrorType": kind})
    assert "aws-sigv4-proxy" in _problem(resp)


def test_another_amazon_error_gets_the_generic_credentials_hint() -> None:
    resp = httpx.Response(
        403, json={"message": "Forbidden"}, headers={"x-amzn-ErrorType": "ThrottlingException"}
    )
    msg = _problem(resp)
    assert "aws-sigv4-proxy" not in msg and "aps:QueryMetrics" not in msg
    assert "FLEETMIND_PROMETHEUS_HEADERS" in msg


# ---------------------------------------------------------------- HTML pages
OAUTH2_PROXY_403 = """<!DOCTYPE html>
<html lang="en" charset="utf-8">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1, maximum-scale=1">
  <title>403 Forbidden</title>
<link rel="stylesheet" href="/css/bulma/bulma.min.css">
<script type="text/javascript">
  document.addEventListener('DOMContentLoaded', function() {});
</script>
<style>
  body { height: 100vh; }
</style>
</head>
<body class="has-background-light"><div class="status-code">403</div></body></html>
"""


def test_an_auth_proxy_html_page_is_said_as_its_title() -> None:
    resp = httpx.Response(
        403, text=OAUTH2_PROXY_403, headers={"content-type": "text/html; charset=utf-8"}
    )
    assert _said(_problem(resp)) == "403 Forbidden"


def test_an_html_page_without_a_title_is_said_without_its_tags() -> None:
    page = (
        "<html><head><style>p { color: red; }</style></head>"
        "<body><h1>Access &amp; denied</h1><p>Ask your admin</p></body></html>"
    )
    resp = httpx.Response(401, text=page, headers={"content-type": "text/html"})
    assert _said(_problem(resp)) == "Access & denied Ask your admin"


# ---------------------------------------------------------------- echoed credentials
def test_an_echoed_bearer_token_and_header_value_are_masked() -> None:
    req = httpx.Request(
        "POST",
        "http://prom:9090/api/v1/query",
        headers={"Authorization": f"Bearer {TOKEN}", "X-Api-Key": API_KEY},
    )
    text = f'invalid tokens ["http_auth:Bearer {TOKEN}", "bearer:{TOKEN}"] key={API_KEY}'
    for resp in (
        httpx.Response(401, text=text, request=req),
        httpx.Response(422, json={"status": "error", "error": text}, request=req),
    ):
        msg = _problem(resp)
        assert TOKEN not in msg and API_KEY not in msg
        assert "http_auth:Bearer ***" in msg and "key=***" in msg


class _VmAuth(BaseHTTPRequestHandler):
    """vmauth -logInvalidAuthTokens: a 401 that quotes the Authorization it got."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        got = self.headers.get("Authorization", "")
        body = (
            f'remoteAddr: "127.0.0.1:1"; requestURI: /api/v1/query; cannot authorize request '
            f'with auth tokens ["http_auth:{got}"]\n'
        ).encode()
        self.send_response(401)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def vmauth() -> Iterator[str]:
    with serve(_VmAuth) as url:
        yield url.removeprefix("http://")


def test_vmauth_echoing_the_basic_credential_of_the_url_password_is_masked(vmauth: str) -> None:
    import base64

    basic = base64.b64encode(f"fleetmind:{PASSWORD}".encode()).decode()
    src = PrometheusApiSource(f"http://fleetmind:{PASSWORD}@{vmauth}", timeout_s=5.0)
    try:
        with pytest.raises(NotAvailableError) as err:
            src.query("up")
    finally:
        src.close()
    msg = str(err.value)
    assert "HTTP 401" in msg and "cannot authorize request with auth tokens" in msg
    assert basic not in msg and PASSWORD not in msg and "http_auth:Basic ***" in msg


def test_vmauth_echoing_the_bearer_token_file_is_masked(vmauth: str, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    src = PrometheusApiSource(f"http://{vmauth}", timeout_s=5.0, bearer_token_file=str(token_file))
    try:
        with pytest.raises(NotAvailableError) as err:
            src.query("up")
    finally:
        src.close()
    assert TOKEN not in str(err.value) and "http_auth:Bearer ***" in str(err.value)


# ---------------------------------------------------------------- the status line's reason phrase
def _answer_with_status_line(status_line: bytes) -> httpx.Response:
    """One query to a raw-socket server that answers with ``status_line`` as sent: h11 (httpx's
    parser, python-hyper/h11 ``_readers.py``) passes any byte but CR and LF through to
    ``reason_phrase``, so the phrase may hold what no well-behaved server sends."""
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(5.0)

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(
                status_line + b"\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n"
                b"Connection: close\r\n\r\nno"
            )

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        return httpx.get(f"http://127.0.0.1:{listener.getsockname()[1]}/api/v1/query")
    finally:
        thread.join(5.0)
        listener.close()


@pytest.mark.parametrize("code", [401, 403, 502])
def test_the_reason_phrase_reaches_the_message_printable_only_and_short(code: int) -> None:
    phrase = b"\x1b]0;owned\x07\x1b[2JNope" + b"y" * 300
    resp = _answer_with_status_line(f"HTTP/1.1 {code} ".encode() + phrase)
    assert "\x1b" in resp.reason_phrase  # what the server sent, as httpx gives it
    msg = _problem(resp)
    assert "\x1b" not in msg and "\x07" not in msg
    assert f"HTTP {code} ]0;owned [2JNope" in msg
    assert "y" * 60 not in msg  # 60 characters of the phrase at most


# ---------------------------------------------------------------- HTML pages a server makes up
def test_an_html_page_is_read_only_in_its_first_8_kb() -> None:
    page = "<html><body>" + "<p>filler</p>" * 800 + "<title>Late title</title></body></html>"
    assert len(page) > 10_000
    resp = httpx.Response(401, text=page, headers={"content-type": "text/html"})
    said = _said(_problem(resp))
    assert "Late title" not in said and said.startswith("filler filler")


@pytest.mark.parametrize(
    ("page", "said"),
    [
        ("<title>" * 14_000, None),  # 98 KB, no </title>: was 6.6 s of backtracking
        ("<script>" * 12_000, None),  # a script never closed: the rest is script
        ("<!--" * 25_000, None),  # a comment never closed: the rest is comment (was 25.8 s)
        ("<b>Denied</b><!-- note " + "-" * 90_000, "Denied"),
        ("<p>Denied</p>" + "<" * 90_000, "Denied " + "<" * 190 + "..."),  # no tag closes: text
    ],
)
def test_an_adversarial_html_page_is_said_from_its_start(page: str, said: str | None) -> None:
    resp = httpx.Response(401, text=page, headers={"content-type": "text/html"})
    msg = _problem(resp)
    if said is None:
        assert "server said" not in msg and msg.startswith("answered HTTP 401 Unauthorized:")
    else:
        assert _said(msg) == said


# ---------------------------------------------------------------- Amazon's signer errors
@pytest.mark.parametrize(
    ("kind", "message", "hint"),
    [
        (
            "InvalidSignatureException",
            "The request signature we calculated does not match the signature you provided.",
            "--region <region> and --host aps-workspaces.<region>.amazonaws.com",
        ),
        ("ExpiredTokenException", "The security token included in the request is expired", "IAM"),
        (
            "UnrecognizedClientException",
            "The security token included in the request is invalid.",
            "IAM",
        ),
        ("InvalidClientTokenId", "The security token included in the request is invalid.", "IAM"),
    ],
)
def test_amp_rejecting_the_signature_or_its_credentials_points_at_the_signer(
    kind: str, message: str, hint: str
) -> None:
    # AWS "Common Errors": each is HTTP 403 with its type in x-amzn-ErrorType
    resp = httpx.Response(
        403,
        json={"message": message},
        headers={"x-amzn-ErrorType": f"{kind}:http://internal.amazon.com/coral/com.amazon.coral/"},
    )
    msg = _problem(resp)
    assert "aws-sigv4-proxy" in msg and hint in msg
    assert "FLEETMIND_PROMETHEUS_BEARER_TOKEN_FILE" not in msg
    if kind.startswith("Expired"):
        assert "expired" in msg.split("):", 1)[1]


# ---------------------------------------------------------------- credentials of other schemes
@pytest.mark.parametrize("header", ["Authorization", "Proxy-Authorization"])
def test_the_credential_of_any_authorization_scheme_is_masked_when_echoed_alone(
    header: str,
) -> None:
    req = httpx.Request(
        "POST", "http://prom:9090/api/v1/query", headers={header: "ApiKey s3cr3tKEYvalue"}
    )
    resp = httpx.Response(401, json={"error": "invalid api key s3cr3tKEYvalue"}, request=req)
    msg = _problem(resp)
    assert "s3cr3tKEYvalue" not in msg and "invalid api key ***" in msg


def test_a_basic_credential_echoed_without_padding_and_an_encoded_password_are_masked() -> None:
    import base64

    basic = base64.b64encode(b"user:hunter22").decode()
    assert basic.endswith("=")
    req = httpx.Request("POST", "http://u:p%40ss%2Fw0rd@prom:9090/api/v1/query")
    text = f"token {basic.rstrip('=')} or password p%40ss%2Fw0rd or p@ss/w0rd"
    req.headers["Authorization"] = f"Basic {basic}"
    msg = _problem(httpx.Response(401, json={"error": text}, request=req))
    assert basic.rstrip("=") not in msg and "%40ss" not in msg and "p@ss/w0rd" not in msg


# ---------------------------------------------------------------- short credentials and hints
def test_a_short_password_is_masked_only_where_it_stands_alone() -> None:
    req = httpx.Request("POST", "http://admin:the@prom:9090/api/v1/query")
    resp = httpx.Response(
        401, json={"error": "the other thing: authentication failed"}, request=req
    )
    assert _said(_problem(resp)) == "*** other thing: authentication failed"


def test_the_hint_is_matched_on_what_the_server_said_before_masking() -> None:
    # a URL password "org" (masked wherever it stands alone) must not hide Mimir's "no org id"
    req = httpx.Request("POST", "http://fleetmind:org@mimir:8080/prometheus/api/v1/query")
    resp = httpx.Response(401, text="no org id\n", request=req)
    msg = _problem(resp)
    assert "(server said: no *** id)" in msg
    assert "FLEETMIND_PROMETHEUS_HEADERS=X-Scope-OrgID=" in msg
