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
from bisect import bisect_left
from urllib.parse import unquote_plus

_QUOTED_URL = re.compile(r"""(['"])(?:[A-Za-z][A-Za-z0-9+.-]*:)?//""")
"""The start of a quoted URL (``repr``'s ``'http://...'``, or ``"..."``): its quote, scheme and
``//``."""
_TOKEN = re.compile(r"""[^\s'"]+""")
"""A run of text without whitespace or quotes: a URL in prose ends where it ends."""


def _userinfo_spans(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of each URL's ``user:password@`` in ``text``, without its ``@``: from
    ``//`` to the last ``@`` before the URL ends, so that a password holding an unescaped ``@``,
    ``/``, ``?`` or ``#`` (``openssl rand -base64`` output: ``http://admin:Zm9v/YmFy+cw==@prom``)
    is masked whole, although a URL parser would end the authority at its first ``/``, ``?`` or
    ``#``. A URL in prose ends at whitespace or a quote; a quoted URL at its closing quote (one
    escaped with ``\\`` does not close it) or whitespace, so a later URL in the same message is
    never swallowed when a space or a quote separates them. Text cannot tell such a password from
    an ``@`` further on in a path or query, so that is masked too: ``http://host/a@b`` shows as
    ``http://***@b`` (more hidden than needed, never a secret shown).

    Linear in ``len(text)``: each quoted URL is scanned once, and the next search starts after it
    (a regular expression backtracking from every ``//`` or quote was quadratic in a request path
    the access log masks)."""
    spans: list[tuple[int, int]] = []
    if "//" not in text:  # no URL: most access lines and messages
        return spans
    pos = 0
    while (m := _QUOTED_URL.search(text, pos)) is not None:
        quote, i, last_at = m.group(1), m.end(), -1
        while i < len(text) and text[i] != quote and not text[i].isspace():
            if text[i] == "\\":
                i += 1
            elif text[i] == "@":
                last_at = i
            i += 1
        if last_at >= 0:
            spans.append((m.end(), min(last_at, len(text))))
        pos = max(i, m.end())
    for t in _TOKEN.finditer(text):
        token = t.group(0)
        start, end = token.find("//"), token.rfind("@")
        if start >= 0 and end >= start + 2:
            spans.append((t.start() + start + 2, t.start() + end))
    return spans


SECRET_PARAM_WORDS = (
    "password", "passwd", "pwd", "pass", "token", "secret", "key", "apikey", "auth",
    "credential", "credentials", "signature", "sig",
)  # fmt: skip
"""A query parameter whose name holds one of these as a word (its name split at ``-``, ``_`` and
``.``, any case), or a word ending in ``password``, ``token`` or ``secret``, has its value masked:
``password``, ``sslpassword``, ``access_token``, ``api_key``, ``X-Amz-Signature``, ... but not
``keyword``, ``monkey``, ``author`` or ``passfile`` (a path)."""
_SECRET_ENDINGS = ("password", "token", "secret")
_PARAM_START = re.compile(r"[?&;]")
_NAME_STOP = re.compile(r"[=&#?;\s'\"]")
_VALUE_STOP = re.compile(r"[&#;\s'\"]")


def _secret_name(name: str) -> bool:
    words = [w for w in re.split(r"[-_.]", name.lower()) if w]
    return any(w in SECRET_PARAM_WORDS or w.endswith(_SECRET_ENDINGS) for w in words)


def _param_spans(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of the value of each password-like query parameter in ``text``: a name
    after ``?``, ``&`` or ``;`` up to ``=``, its value up to the next ``&``, ``#``, ``;``,
    whitespace or quote. Every separator is tried, also one inside another parameter's value or a
    URL's user part (``u:Tr0ub&d=or@db/fm?sslpassword=...``: a scan resuming after the match of
    ``&d=`` never saw ``sslpassword``); the ends are looked up in the separators' positions, so
    the scan stays O(n log n)."""
    if "=" not in text:  # no parameter: most access lines and messages
        return []
    name_stops = [m.start() for m in _NAME_STOP.finditer(text)]
    value_stops = [m.start() for m in _VALUE_STOP.finditer(text)]

    def next_stop(stops: list[int], i: int) -> int:
        k = bisect_left(stops, i)
        return stops[k] if k < len(stops) else len(text)

    spans = []
    for m in _PARAM_START.finditer(text):
        start = m.end()
        eq = next_stop(name_stops, start)
        if eq == start or eq >= len(text) or text[eq] != "=":
            continue
        end = next_stop(value_stops, eq + 1)
        if end > eq + 1 and _secret_name(text[start:eq]):
            spans.append((eq + 1, end))
    return spans


def safe_uri(text: str) -> str:
    """``text`` (a URL, or a message quoting URLs) with each URL's ``user:password@`` shown as
    ``***@`` and the value of each password-like query parameter (:data:`SECRET_PARAM_WORDS`)
    as ``***``."""
    spans = _userinfo_spans(text) + _param_spans(text)
    # both rules on the original text, their spans merged: applied one after the other, the
    # first could hide the other's context (``?password=`` inside a masked user part) and show
    # the tail of a secret (``password=Hunter@2024x`` after ``//u@db/``)
    merged: list[list[int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    out, done = [], 0
    for start, end in merged:
        out += [text[done:start], "***"]
        done = end
    out.append(text[done:])
    return "".join(out)


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
