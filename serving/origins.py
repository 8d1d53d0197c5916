"""Origins and ``Host`` headers compared as browsers mean them (RFC 6454 section 4, RFC 9110
section 4.2.3): scheme and host case-insensitive, a default port the same as none. One
implementation for the API's :class:`~fleetmind.serving.origin_guard.OriginGuard` and the ``/ui``
forms (:func:`fleetmind.serving.ui.auth.origin_refusal`); no FleetMind imports, so both can use it.
"""

from __future__ import annotations

from urllib.parse import urlsplit

DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}
"""The port an origin of each scheme has when it names none."""


def split_host(value: str) -> tuple[str, int | None]:
    """A ``Host`` header's (host, port): the host lower-case, without IPv6 brackets or a final
    dot; the port ``None`` when absent or unreadable."""
    value = value.strip().lower()
    port: int | None = None
    if value.startswith("["):
        host, _, rest = value[1:].partition("]")
        if rest.startswith(":") and rest[1:].isdigit():
            port = int(rest[1:])
    else:
        host, sep, tail = value.rpartition(":")
        if sep and tail.isdigit() and ":" not in host:
            port = int(tail)
        else:
            host = value
    return host.rstrip("."), port


def origin_of(url: str) -> tuple[str, str, int] | None:
    """The (scheme, host, port) of a URL or a serialised origin; ``None`` for ``null`` or
    anything unreadable. The port defaults to the scheme's."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if not parts.hostname or scheme not in DEFAULT_PORTS:
        return None
    return scheme, parts.hostname.rstrip(".").lower(), port or DEFAULT_PORTS[scheme]


def same_origin(origin: str, host_header: str | None, public_url: str) -> bool:
    """Whether an ``Origin`` header names the service itself: the host (and port, where the
    ``Host`` header gives one) the request was sent to, or ``FLEETMIND_PUBLIC_URL``'s origin."""
    got = origin_of(origin)
    if got is None:
        return False
    if got == origin_of(public_url):
        return True
    if not host_header:
        return False
    host, port = split_host(host_header)
    if host != got[1]:
        return False
    # no port in Host: the scheme's default, which Origin then omits too (behind a TLS proxy the
    # request's own scheme may differ from the browser's)
    return port == got[2] if port is not None else got[2] == DEFAULT_PORTS[got[0]]
