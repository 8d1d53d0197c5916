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
SECRET_PARAM_WORDS = ("pass", "pwd", "token", "secret", "key", "auth", "credential", "signature")
"""A query parameter whose name holds one of these (any case) has its value masked: ``password``,
``passwd``, ``sslpassword``, ``access_token``, ``api_key``, ``X-Amz-Signature``, ..."""
_SECRET_PARAM = re.compile(
    r"([?&;][^=&#?;\s'\"]*(?:" + "|".join(SECRET_PARAM_WORDS) + r")[^=&#?;\s'\"]*=)"
    r"[^&#;\s'\"]*",
    re.IGNORECASE,
)


def safe_uri(text: str) -> str:
    """``text`` (a URL, or a message quoting URLs) with each URL's ``user:password@`` shown as
    ``***@`` and the value of each password-like query parameter (:data:`SECRET_PARAM_WORDS`)
    as ``***``."""
    return _SECRET_PARAM.sub(r"\1***", _USERINFO.sub("//***@", text))
