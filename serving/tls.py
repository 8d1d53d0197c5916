"""HTTPS for ``fleetmind serve`` and client-certificate authentication of kube-scheduler.

kube-scheduler's HTTP extender sends no ``Authorization`` header; it authenticates the way its
``KubeSchedulerConfiguration`` allows: ``enableHTTPS`` with a ``tlsConfig`` (``certFile``,
``keyFile``, ``caFile``), i.e. a client certificate (``k8s.io/kube-scheduler/config/v1``
``Extender.TLSConfig``, ``ExtenderTLSConfig``). So:

* ``FLEETMIND_TLS_CERT`` / ``FLEETMIND_TLS_KEY``: uvicorn serves HTTPS (:func:`uvicorn_options`).
* ``FLEETMIND_SCHEDULER_CLIENT_CA``: uvicorn asks for a client certificate (``CERT_OPTIONAL``) and
  the TLS layer verifies any certificate offered against that CA; a client offering one it did not
  sign fails the handshake. A connection that presented a verified certificate is marked by
  :class:`ClientCertProtocol` in the ASGI scope's ``state`` (:data:`CLIENT_CERT_KEY`: the
  certificate's subject), and :class:`fleetmind.serving.deps.AuthMiddleware` grants it the ``schedule`` scope
  on ``/api/v1/scheduler/*`` only. Every other route still needs its bearer token.

uvicorn does not put TLS details into the ASGI scope, so :class:`ClientCertProtocol` (the guarded
httptools protocol of :mod:`fleetmind.serving.http_guard`, named to uvicorn as ``fleetmind.serving.tls:ClientCertProtocol``) reads the
peer certificate from the connection's transport (``get_extra_info("peercert")``) when the
connection is made and adds it to the per-connection copy of the lifespan state that uvicorn puts
into every request's scope.

A refused handshake (a client certificate from another CA or expired, a client that does not
trust the server's certificate, plain HTTP to the HTTPS port) never reaches the protocol: no
request, no ``fleetmind_http_request_duration_seconds`` series. :class:`ClientCertProtocol` has the
server's SSL context make :class:`HandshakeCountingSSLObject` objects (``SSLContext.sslobject_class``,
used by ``wrap_bio`` in asyncio's and uvloop's TLS layers), which count each refused handshake in
``fleetmind_tls_handshake_failures_total`` (:func:`fleetmind.serving.metrics.count_tls_handshake_failure`).
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

from fleetmind.serving.http_guard import GuardedHttpToolsProtocol
from fleetmind.serving.metrics import count_tls_handshake_failure
from fleetmind.serving.settings import Settings

CLIENT_CERT_KEY = "fleetmind.client_cert"
"""Key in ``scope["state"]``: the verified client certificate's subject (``CN=...,O=...``)."""
SCHEDULER_PREFIX = "/api/v1/scheduler/"
"""The routes a scheduler client certificate opens."""


def subject_text(peercert: dict[str, Any]) -> str:
    """``CN=kube-scheduler,O=...`` from :meth:`ssl.SSLSocket.getpeercert`'s ``subject`` tuples."""
    parts = []
    for rdn in peercert.get("subject", ()):
        for key, value in rdn:
            short = {"commonName": "CN", "organizationName": "O"}.get(key, key)
            parts.append(f"{short}={value}")
    return ",".join(parts) or "(no subject)"


class HandshakeCountingSSLObject(ssl.SSLObject):
    """An :class:`ssl.SSLObject` that counts the handshakes it refuses or that fail
    (``fleetmind_tls_handshake_failures_total``); "want read/write" is no failure."""

    def do_handshake(self) -> None:
        try:
            super().do_handshake()
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            raise
        except ssl.SSLError:
            count_tls_handshake_failure()
            raise


class ClientCertProtocol(GuardedHttpToolsProtocol):
    """The service's HTTP protocol (uvicorn's httptools protocol with the connection limits of
    :mod:`fleetmind.serving.http_guard`), plus the verified client certificate of the connection in
    every request's ``scope["state"][CLIENT_CERT_KEY]`` (absent when none was presented).

    Made by the server for each accepted connection before its handshake: it sets the server's SSL
    context (uvicorn's ``config.ssl``) to make :class:`HandshakeCountingSSLObject` objects."""

    def __init__(self, config: Any, *args: Any, **kwargs: Any) -> None:
        ctx = getattr(config, "ssl", None)
        if (
            isinstance(ctx, ssl.SSLContext)
            and ctx.sslobject_class is not HandshakeCountingSSLObject
        ):
            ctx.sslobject_class = HandshakeCountingSSLObject
        super().__init__(config, *args, **kwargs)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        peer = transport.get_extra_info("peercert")
        if peer:  # verified by the TLS layer against FLEETMIND_SCHEDULER_CLIENT_CA
            self.app_state = {**self.app_state, CLIENT_CERT_KEY: subject_text(peer)}
        super().connection_made(transport)


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """Keyword arguments for ``uvicorn.run`` that serve HTTPS as the settings ask ({} for HTTP)."""
    if not (settings.tls_cert and settings.tls_key):
        return {}
    out: dict[str, Any] = {"ssl_certfile": settings.tls_cert, "ssl_keyfile": settings.tls_key}
    if settings.scheduler_client_ca:
        out.update(
            ssl_ca_certs=settings.scheduler_client_ca,
            ssl_cert_reqs=ssl.CERT_OPTIONAL,
            http=f"{__name__}:ClientCertProtocol",
        )
    return out


def scheduler_cert(scope: Any) -> str | None:
    """The verified scheduler certificate's subject for a request to ``/api/v1/scheduler/*``."""
    if not str(scope.get("path", "")).startswith(SCHEDULER_PREFIX):
        return None
    state = scope.get("state")
    value = state.get(CLIENT_CERT_KEY) if isinstance(state, dict) else None
    return str(value) if value else None
