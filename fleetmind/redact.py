"""Secrets kept out of what FleetMind shows: the ``user:password@`` of URLs.

Database, Prometheus and MLflow URLs may carry basic-auth credentials, and the messages that quote
them reach logs, API answers, MLflow params and read-scope clients::

    >>> from fleetmind.redact import safe_uri
    >>> safe_uri("cannot query http://admin:s3cr@t@prom:9090/api: refused")
    'cannot query http://***@prom:9090/api: refused'
"""

from __future__ import annotations

import re

_USERINFO = re.compile(r"//[^/?#\s'\"]*@")
"""A URL's authority up to its last ``@`` (an unescaped ``@`` in a password included)."""


def safe_uri(text: str) -> str:
    """``text`` (a URL, or a message quoting URLs) with each URL's ``user:password@`` shown as
    ``***@``."""
    return _USERINFO.sub("//***@", text)
