"""Secrets kept out of what FleetMind shows: the ``user:password@`` of URLs and their
password-like query parameters.

Database, Prometheus and MLflow URLs may carry credentials (basic auth, or libpq's
``?password=`` / ``?sslpassword=``), and the messages that quote them reach logs, API answers,
MLflow params and read-scope clients (OWASP Logging Cheat Sheet: never log passwords or tokens)::

    >>> from fleetmind.redact import safe_uri
    >>> safe_uri("cannot query http://admin:s3cr@t@prom:9090/api: refused")
    'cannot query http://***@prom:9090/api: refused'
    >>> safe_uri("postgresql+psycopg://u@db/fm?sslmode=require&password=s3cr")
    'postgresql+psycopg://***@db/fm?sslmode=require&password=***'
"""

from __future__ import annotations

import re
from urllib.parse import unquote_plus

_USERINFO = re.compile(
    r"""(?P<sq>'(?:[A-Za-z][A-Za-z0-9+.-]*:)?//)(?:\\.|[^\s'\\])*@"""  # in '...' (a repr)
    r"""|(?P<dq>"(?:[A-Za-z][A-Za-z0-9+.-]*:)?//)(?:\\.|[^\s"\\])*@"""  # in "..."
)
"""A URL's ``user:password@``: from ``//`` to the last ``@`` before the URL ends, so that a
password holding an unescaped ``@``, ``/``, ``?`` or ``#`` (``openssl rand -base64`` output:
``http://admin:Zm9v/YmFy+cw==@prom:9090``) is masked whole, although a URL parser would end the
authority at its first ``/``, ``?`` or ``#``. A URL ends at whitespace, and at a quote, or, in a
quoted URL (``repr``'s ``'http://...'``), at its closing quote only, so a later URL in the same
message is never swallowed when a space or a quote separates them. Text cannot tell such a
password from an ``@`` further on in a path or query, so that is masked too:
``http://host/a@b`` shows as ``http://***@b`` (more hidden than needed, never a secret shown)."""
_TOKEN = re.compile(r"""[^\s'"]+""")
"""A run of text without whitespace or quotes: a URL in prose ends where it ends. The prose rule
is applied per token with ``str.find``/``str.rfind`` rather than as a third regex branch (from
``//`` over non-blank text to ``@``), which backtracks from every ``//`` of a token: quadratic
time in a request path of 32 KiB of slashes, the access log's input."""


def _mask_userinfo(m: re.Match[str]) -> str:
    return f"{m['sq'] or m['dq']}***@"


def _mask_token(m: re.Match[str]) -> str:
    """A prose token with its text from its first ``//`` to its last ``@`` after it as
    ``//***@`` (the rule of :data:`_USERINFO`, in linear time)."""
    token = m.group(0)
    start = token.find("//")
    end = token.rfind("@")
    if start < 0 or end < start + 2:
        return token
    return f"{token[:start]}//***@{token[end + 1 :]}"


SECRET_PARAM_WORDS = (
    "password", "passwd", "pwd", "pass", "token", "secret", "key", "apikey", "auth",
    "credential", "credentials", "signature", "sig",
)  # fmt: skip
"""A query parameter whose name holds one of these as a word (its name split at ``-``, ``_`` and
``.``, any case), or a word ending in ``password``, ``token`` or ``secret``, has its value masked:
``password``, ``sslpassword``, ``access_token``, ``api_key``, ``X-Amz-Signature``, ... but not
``keyword``, ``monkey``, ``author`` or ``passfile`` (a path)."""
_SECRET_ENDINGS = ("password", "token", "secret")
_PARAM = re.compile(r"([?&;])([^=&#?;\s'\"]+)=([^&#;\s'\"]*)")


def _secret_name(name: str) -> bool:
    words = [w for w in re.split(r"[-_.]", name.lower()) if w]
    return any(w in SECRET_PARAM_WORDS or w.endswith(_SECRET_ENDINGS) for w in words)


def _mask_param(m: re.Match[str]) -> str:
    sep, name, value = m.groups()
    return f"{sep}{name}=***" if _secret_name(name) and value else m.group(0)


def safe_uri(text: str) -> str:
    """``text`` (a URL, or a message quoting URLs) with each URL's ``user:password@`` shown as
    ``***@`` and the value of each password-like query parameter (:data:`SECRET_PARAM_WORDS`)
    as ``***``."""
    quoted = _USERINFO.sub(_mask_userinfo, text)
    return _PARAM.sub(_mask_param, _TOKEN.sub(_mask_token, quoted))


def _mask_field(field: str) -> str:
    """One ``&``-separated field of a query with its value as ``***`` when its name (percent-decoded)
    is password-like; a ``;``-separated parameter inside it is checked as well, and masked with
    everything after it (a server may split a query at ``;`` too)."""
    name, eq, value = field.partition("=")
    if eq and value and _secret_name(unquote_plus(name)):
        return f"{name}=***"
    parts = field.split(";")
    for i, part in enumerate(parts[1:], start=1):
        name, eq, value = part.partition("=")
        if eq and value and _secret_name(unquote_plus(name)):
            return ";".join([*parts[:i], f"{name}=***"])
    return field


def safe_request_target(target: str) -> str:
    """An HTTP request target (``/path?query``, as an access log line quotes it) with the value of
    each password-like query parameter as ``***``, by the rule of :func:`safe_uri`
    (:data:`SECRET_PARAM_WORDS`): ``/api/v1/incidents?access_token=***`` (RFC 6750 section 2.3
    puts a bearer token there).

    Unlike :func:`safe_uri`, which finds URLs inside prose, the query here is split as a server
    splits it: a value runs to the next ``&`` whatever it holds (a quote included), and a name is
    percent-decoded before the check (``access%5Ftoken``). The path is passed through
    :func:`safe_uri`."""
    path, sep, query = target.partition("?")
    if not sep:
        return safe_uri(target)
    return f"{safe_uri(path)}?{'&'.join(_mask_field(f) for f in query.split('&'))}"
