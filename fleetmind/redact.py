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

_USERINFO = re.compile(r"//[^/?#\s'\"]*@")
"""A URL's authority up to its last ``@`` (an unescaped ``@`` in a password included)."""
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
    return _PARAM.sub(_mask_param, _USERINFO.sub("//***@", text))
