"""HTTP clients whose proxies from the environment follow Go's rules (``fleetmind.http_client``).

Every ``httpx.Client`` FleetMind makes (the Prometheus scraper, the notifier, ``replay``,
``data fetch``, ``demo``) comes from :func:`client`, so the service and the command line pick a
proxy the same way ``fleetmind graph build`` (the Kubernetes client) and Go programs such as
Prometheus and kubectl do (``golang.org/x/net/http/httpproxy``,
https://pkg.go.dev/golang.org/x/net/http/httpproxy#Config):

* ``HTTPS_PROXY`` is used for ``https://`` URLs, ``HTTP_PROXY`` for ``http://`` ones; the upper-case
  name wins over the lower-case one when both are set (Go's ``getEnvAny``). ``ALL_PROXY`` is used
  for a scheme whose own variable is unset (httpx and curl read it; Go does not). A value without
  a scheme (``proxy:3128``) is an ``http://`` proxy.
* ``NO_PROXY`` is a comma-separated list of host names (``example.com`` matches it and its
  subdomains, ``.example.com`` and ``*.example.com`` its subdomains only), IP addresses (IPv6 with
  or without brackets), CIDR networks (``10.0.0.0/8``, ``fd00::/8``), each optionally with
  ``:port``; ``*`` turns every proxy off.
* ``localhost`` and loopback addresses (``127.0.0.0/8``, ``::1``) are never proxied.

httpx's own reading of the environment (``trust_env=True``) differs: it ignores CIDR entries,
proxies loopback addresses, and an IPv6 CIDR such as ``fd00::/8`` in ``NO_PROXY`` made every client
raise ``httpx.InvalidURL: Invalid port: ':'`` when it was made (encode/httpx#3221). The clients
here are made with ``trust_env=False`` and route each request (redirections included) through a
transport chosen by the rules above; the CA bundle named by ``SSL_CERT_FILE`` or ``SSL_CERT_DIR``
is still trusted (``httpx.create_ssl_context``), and no ``.netrc`` is read (httpx reads one only
when asked to, with ``httpx.NetRCAuth``).

A connection that fails through a proxy is reported as the proxy's (:func:`proxy_note`: which
proxy, from which variable), not as a refusal of the server asked for; an error status answered
to a plain ``http://`` request that went through a proxy names the proxy as its possible author
(:func:`proxied_answer_note`).

A client can also be held to a :class:`Deadline` (:func:`hold_to`): every connect, read and write of
the request in flight then ends by it, however slowly the server trickles its answer.

httpx is imported only when a client is made.
"""

from __future__ import annotations

import functools
import ipaddress
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from fleetmind.errors import ConfigError
from fleetmind.redact import safe_uri

PROXY_VARS = ("ALL_PROXY", "HTTPS_PROXY", "HTTP_PROXY")
"""The proxy variables read (each upper- and lower-case), besides ``NO_PROXY``."""

_DEFAULT_PORTS = {"http": "80", "https": "443"}

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def env_value(name: str, environ: Mapping[str, str] | None = None) -> str:
    """The value of ``name`` (upper-case) or else of its lower-case form, stripped; "" when both
    are unset or empty (Go's ``getEnvAny``)."""
    env = os.environ if environ is None else environ
    for key in (name, name.lower()):
        value = (env.get(key) or "").strip()
        if value:
            return value
    return ""


def _address(host: str) -> IPAddress | None:
    """``host`` (brackets allowed) as an IP address, an IPv4-mapped IPv6 one as IPv4; or None."""
    try:
        ip = ipaddress.ip_address(host.strip().removeprefix("[").removesuffix("]"))
    except ValueError:
        return None
    mapped = getattr(ip, "ipv4_mapped", None)
    return mapped if mapped is not None else ip


def _split_host_port(entry: str) -> tuple[str, str]:
    """``entry`` as Go's ``net.SplitHostPort`` reads it (``host:port``, ``[v6]:port``), else the
    whole entry as the host and no port (a bare IPv6 address, a name)."""
    if entry.startswith("["):
        host, sep, rest = entry[1:].partition("]")
        if sep and rest.startswith(":") and rest[1:].isdigit():
            return host, rest[1:]
        return (host if sep and not rest else entry), ""
    host, sep, port = entry.rpartition(":")
    if sep and ":" not in host and port.isdigit():
        return host, port
    return entry, ""


@dataclass(frozen=True)
class NoProxy:
    """A parsed ``NO_PROXY`` list: ``everything`` (``*``), CIDR ``networks``, ``addresses``
    (address, port or "") and ``domains`` (".suffix", port or "", whether the bare name matches)."""

    everything: bool = False
    networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()
    addresses: tuple[tuple[IPAddress, str], ...] = ()
    domains: tuple[tuple[str, str, bool], ...] = ()

    @classmethod
    def parse(cls, text: str) -> NoProxy:
        """``text`` (``NO_PROXY``'s value) read entry by entry as Go's ``httpproxy`` does; an
        entry that is none of the forms matches nothing."""
        networks, addresses, domains = [], [], []
        for raw in text.split(","):
            entry = raw.strip().lower()
            if not entry:
                continue
            if entry == "*":
                return cls(everything=True)
            if "/" in entry:
                try:
                    networks.append(ipaddress.ip_network(entry, strict=False))
                except ValueError:
                    pass
                continue
            host, port = _split_host_port(entry)
            ip = _address(host)
            if ip is not None:
                addresses.append((ip, port))
                continue
            host = host[1:] if host.startswith("*.") else host
            if host and host != ".":
                domains.append(("." + host.lstrip("."), port, not host.startswith(".")))
        return cls(False, tuple(networks), tuple(addresses), tuple(domains))

    def matches(self, host: str, port: str) -> bool:
        """Whether a request to ``host`` (lower-case, no brackets) on ``port`` goes direct."""
        if self.everything:
            return True
        ip = _address(host)
        if ip is not None:
            if any(ip in net for net in self.networks if net.version == ip.version):
                return True
            if any(ip == a and p in ("", port) for a, p in self.addresses):
                return True
        return any(
            (host.endswith(suffix) or (bare and host == suffix[1:])) and p in ("", port)
            for suffix, p, bare in self.domains
        )


@dataclass(frozen=True)
class ProxyRules:
    """The proxies of the environment: ``http`` and ``https`` (a proxy URL or "") by the scheme
    of the request, and the hosts that go direct (``no_proxy``)."""

    http: str = ""
    https: str = ""
    no_proxy: NoProxy = NoProxy()

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> ProxyRules:
        """The rules set by ``environ`` (default ``os.environ``); see the module's docstring."""
        every = env_value("ALL_PROXY", environ)
        return cls(
            http=_with_scheme(env_value("HTTP_PROXY", environ) or every),
            https=_with_scheme(env_value("HTTPS_PROXY", environ) or every),
            no_proxy=NoProxy.parse(env_value("NO_PROXY", environ)),
        )

    def proxy_for(self, url: str) -> str | None:
        """The proxy URL a request to ``url`` goes through, or None when it goes direct."""
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        proxy = {"http": self.http, "https": self.https}.get(scheme, "")
        if not proxy:
            return None
        host = (parts.hostname or "").lower()
        try:
            port = str(parts.port or _DEFAULT_PORTS[scheme])
        except ValueError:
            port = ""
        ip = _address(host)
        if host == "localhost" or (ip is not None and ip.is_loopback):
            return None
        return None if self.no_proxy.matches(host, port) else proxy


def _with_scheme(value: str) -> str:
    """A proxy variable's ``value`` with ``http://`` in front when it names no scheme."""
    return value if not value or "://" in value else f"http://{value}"


def proxy_for(url: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The proxy a request to ``url`` takes by the environment's rules, or None (direct)."""
    return ProxyRules.from_environment(environ).proxy_for(url)


def proxy_source(url: str, environ: Mapping[str, str] | None = None) -> str:
    """The variable whose proxy a request to ``url`` takes (``HTTPS_PROXY``, ``https_proxy``,
    ``HTTP_PROXY``, ``http_proxy``, ``ALL_PROXY`` or ``all_proxy``, as set), or "" when it goes
    direct."""
    env = os.environ if environ is None else environ
    if proxy_for(url, env) is None:
        return ""
    scheme = urlsplit(url).scheme.lower()
    for var in (f"{scheme.upper()}_PROXY", "ALL_PROXY"):
        for key in (var, var.lower()):
            if (env.get(key) or "").strip():
                return key
    return ""


def proxy_note(err: BaseException, url: str, environ: Mapping[str, str] | None = None) -> str:
    """Where a failed request went, for an error message: ``" via proxy URL (from VAR;
    NO_PROXY does not match HOST:PORT)"`` (the proxy's URL masked; the port the request's, its
    scheme's default when the URL names none; an IPv6 host in brackets) when ``err`` is a
    connection failure (``httpx.ConnectError``, ``httpx.ConnectTimeout``, ``httpx.ProxyError``)
    of a request that went through a proxy, so that a proxy's refusal is not read as the
    target's; :func:`proxied_answer_note` when ``err`` is an error status
    (``httpx.HTTPStatusError``); else "".

    ``url``: the request's URL, used when ``err`` carries no request (the one of a redirection
    otherwise); ``environ``: the variables read (default ``os.environ``).
    """
    import httpx

    kinds = (httpx.ConnectError, httpx.ConnectTimeout, httpx.ProxyError, httpx.HTTPStatusError)
    if not isinstance(err, kinds):
        return ""
    try:
        url = str(err.request.url)
    except RuntimeError:  # (an error made without its request)
        pass
    if isinstance(err, httpx.HTTPStatusError):
        return proxied_answer_note(url, environ)
    proxy = proxy_for(url, environ)
    if proxy is None:
        return ""
    return (
        f" via proxy {safe_uri(proxy)} (from {proxy_source(url, environ)}; "
        f"NO_PROXY does not match {_host_port(url)})"
    )


def _host_port(url: str) -> str:
    """``url``'s ``host:port`` as ``NO_PROXY`` would have to name it: the port the URL's, else
    its scheme's default (none for another scheme); an IPv6 address in brackets."""
    parts = urlsplit(url)
    host = parts.hostname or url
    try:
        port = str(parts.port or _DEFAULT_PORTS.get(parts.scheme.lower(), ""))
    except ValueError:  # a port that is no number: the host alone
        port = ""
    shown = f"[{host}]" if ":" in host and parts.hostname else host
    return f"{shown}:{port}" if port else shown


def proxied_answer_note(url: str, environ: Mapping[str, str] | None = None) -> str:
    """For a message about an error status (not 2xx) answered to a request to ``url``: ``" through
    proxy URL (from VAR); the answer may be the proxy's"`` (the proxy's URL masked) when ``url`` is
    an ``http://`` one that went through a proxy (``environ``: the variables read, default
    ``os.environ``), else "".

    A proxy forwards a plain-HTTP request itself and may answer it in the server's place (Squid's
    ``403 Forbidden`` ``ERR_ACCESS_DENIED`` page, a ``407``, a ``502`` for a host it cannot
    reach): nothing in the answer tells whose it is. An ``https://`` request goes through a
    ``CONNECT`` tunnel instead, whose refusal httpx raises as ``httpx.ProxyError``
    (:func:`proxy_note`); the answers through the tunnel are the server's.
    """
    if urlsplit(url).scheme.lower() != "http":
        return ""
    proxy = proxy_for(url, environ)
    if proxy is None:
        return ""
    return (
        f" through proxy {safe_uri(proxy)} (from {proxy_source(url, environ)}); "
        "the answer may be the proxy's"
    )


def _named(socks_only: bool) -> str:
    """The proxy variables set (masked), for a message; only SOCKS ones when ``socks_only``."""
    found = []
    for var in PROXY_VARS:
        for key in (var, var.lower()):
            value = os.environ.get(key)
            if value and (not socks_only or value.lower().startswith("socks")):
                found.append(f"{key}={safe_uri(value)}")
    return ", ".join(found) or "a proxy variable"


def proxy_transport(url: str, **kwargs: Any) -> Any:
    """An ``httpx.HTTPTransport`` through the proxy at ``url`` (``kwargs``: the transport's).

    Raises:
        ConfigError: the proxy cannot be used (SOCKS without socksio, not a URL, an unknown
            scheme); one line, its password left out.
    """
    import httpx

    try:
        return httpx.HTTPTransport(proxy=httpx.Proxy(url), **kwargs)
    except ImportError:  # a SOCKS proxy needs the optional socksio
        raise ConfigError(
            f"the SOCKS proxy in {_named(True)} needs SOCKS support: install httpx[socks] "
            "(socksio), or unset the variable"
        ) from None
    except httpx.InvalidURL:  # its reason may quote the password, so it is left out
        raise ConfigError(
            f"cannot use the proxy in {_named(False)}: not a valid URL (a password with '/', '@' or "
            "':' must be percent-encoded); fix or unset the variable"
        ) from None
    except ValueError:  # e.g. HTTP_PROXY=ftp://...: a proxy scheme httpx does not know
        raise ConfigError(
            f"cannot use the proxy in {_named(False)}: httpx takes http://, https:// and "
            "socks5:// proxies; fix or unset the variable"
        ) from None


def check_proxies(environ: Mapping[str, str] | None = None) -> None:
    """Raise :class:`ConfigError` (one line) when a proxy variable of ``environ`` (default
    ``os.environ``) names a proxy httpx cannot use; a check before a server starts."""
    rules = ProxyRules.from_environment(environ)
    for url in {rules.http, rules.https} - {""}:
        proxy_transport(url).close()


@functools.cache
def _router_class() -> type:
    """The transport class that sends each request direct or through its proxy (made on first
    use, so that importing this module does not import httpx)."""
    import httpx

    class ProxyRouter(httpx.BaseTransport):
        """Each request through the transport :class:`ProxyRules` picks for its URL."""

        def __init__(self, rules: ProxyRules, direct: httpx.BaseTransport, **kwargs: Any) -> None:
            self.rules = rules
            self.direct = direct
            self.proxied = {p: proxy_transport(p, **kwargs) for p in {rules.http, rules.https} if p}

        @property
        def transports(self) -> list[httpx.BaseTransport]:
            """Every transport it may use: the direct one, then one per proxy."""
            return [self.direct, *self.proxied.values()]

        def handle_request(self, request: httpx.Request) -> httpx.Response:
            proxy = self.rules.proxy_for(str(request.url))
            transport = self.direct if proxy is None else self.proxied[proxy]
            return transport.handle_request(request)

        def close(self) -> None:
            for transport in self.transports:
                transport.close()

    return ProxyRouter


def client(
    *,
    verify: Any = True,
    transport: Any = None,
    environ: Mapping[str, str] | None = None,
    **kwargs: Any,
) -> Any:
    """An ``httpx.Client`` that takes the environment's proxies by Go's rules (see the module's
    docstring), deciding for each request, redirections included.

    ``verify``: as httpx's (True: httpx's CAs, ``SSL_CERT_FILE`` or ``SSL_CERT_DIR`` when set, else
    certifi's bundle; or an ``ssl.SSLContext``); ``transport``: one to use as it is (a test's: no
    proxy then); ``environ``: the variables to read (default ``os.environ``); ``kwargs``: the
    client's (``timeout`` in s, ``base_url``, ``follow_redirects``, ...).

    Raises:
        ConfigError: a proxy variable names a proxy httpx cannot use (one line).
    """
    import httpx

    if transport is not None:
        return httpx.Client(transport=transport, trust_env=False, **kwargs)
    rules = ProxyRules.from_environment(environ)
    ssl_context = httpx.create_ssl_context(verify=verify, trust_env=True)
    made = httpx.Client(verify=ssl_context, trust_env=False, **kwargs)
    direct = getattr(made, "_transport", None)  # (httpx keeps its transport there)
    if type(direct) is httpx.HTTPTransport:  # httpx's own: not one a test put in its place
        made._transport = _router_class()(rules, direct, verify=ssl_context)
    elif direct is None:  # httpx moved its internals: keep its own reading of the environment
        made.close()
        made = httpx.Client(verify=ssl_context, **kwargs)
    return made


class Deadline:
    """The deadline by which a client's network work in flight must end, per thread: ``at`` is a
    ``clock()`` value (seconds), ``None`` for none. A client held to it (:func:`hold_to`) waits
    on connecting, the TLS handshake and each read and write no longer than what is left, so a
    server sending a byte now and then cannot stretch a request (httpx's read timeout starts
    again at each byte). The notifier's posts and ``data fetch``'s downloads use one each.

    Args:
        clock: monotonic seconds (tests pass a fake one).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._local = threading.local()

    @property
    def at(self) -> float | None:
        """This thread's deadline (``clock()`` seconds), ``None`` for none."""
        return getattr(self._local, "at", None)

    @at.setter
    def at(self, value: float | None) -> None:
        self._local.at = value

    def left(self, timeout: float | None, expired: type[Exception]) -> float | None:
        """``timeout`` (s, ``None``: none) cut to what is left before :attr:`at`; raises
        ``expired`` (an httpcore or httpx timeout class) when nothing is."""
        at = self.at
        if at is None:
            return timeout
        left = at - self.clock()
        if left <= 0:
            raise expired("the deadline passed")
        return left if timeout is None else min(timeout, left)


class _DeadlineStream:
    """An httpcore connection whose every read and write waits no longer than its
    :class:`Deadline` allows."""

    def __init__(self, stream: Any, deadline: Deadline) -> None:
        self._stream, self._deadline = stream, deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        import httpcore

        return self._stream.read(max_bytes, self._deadline.left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        import httpcore

        self._stream.write(buffer, self._deadline.left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(self, ssl_context: Any, server_hostname: Any = None, timeout: Any = None) -> Any:
        import httpcore

        left = self._deadline.left(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(
            self._stream.start_tls(ssl_context, server_hostname, left), self._deadline
        )

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _DeadlineBackend:
    """httpcore's network backend whose connecting waits no longer than a :class:`Deadline`
    allows and whose connections are :class:`_DeadlineStream`."""

    def __init__(self, backend: Any, deadline: Deadline) -> None:
        self._backend, self._deadline = backend, deadline

    def connect_tcp(self, host: str, port: int, timeout: Any = None, **kw: Any) -> Any:
        import httpcore

        left = self._deadline.left(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._backend.connect_tcp(host, port, left, **kw), self._deadline)

    def connect_unix_socket(self, path: str, timeout: Any = None, **kw: Any) -> Any:
        import httpcore

        left = self._deadline.left(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._backend.connect_unix_socket(path, left, **kw), self._deadline)

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


def hold_to(made: Any, deadline: Deadline) -> int:
    """Hold the connections of the ``httpx.Client`` ``made`` (from :func:`client`: its direct and
    proxy transports, and any mounted one) to ``deadline``; returns how many of httpx's own
    transports were wrapped (0 for a test's transport, or when httpx moved its internals: the
    caller says so)."""
    import httpx

    transports = getattr(made._transport, "transports", [made._transport])
    wrapped = 0
    for t in list(transports) + list(getattr(made, "_mounts", {}).values()):
        pool = getattr(t, "_pool", None)
        backend = getattr(pool, "_network_backend", None)
        if isinstance(t, httpx.HTTPTransport) and backend is not None:
            if not isinstance(backend, _DeadlineBackend):
                pool._network_backend = _DeadlineBackend(backend, deadline)  # type: ignore[union-attr]
            wrapped += 1
    return wrapped
