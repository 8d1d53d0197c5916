"""The ASGI fast lane of ``POST /api/v1/rca``: a request straight to the ranking processes."""

from __future__ import annotations

from typing import Any

from fleetmind.serving.deps import AUTH_SCOPE_KEY, replay
from fleetmind.serving.rca.pool import Ranked
from fleetmind.serving.rca.router import JSON, PATH, POOL_OUTCOME, rank_in_processes


class FastLane:
    """ASGI middleware: ``POST /api/v1/rca`` straight to the ranking processes.

    With ranking processes (``FLEETMIND_RCA_PROCESSES``), the server process only moves bytes for
    an RCA request: this lane skips FastAPI's routing and dependency resolution for it (~a third
    of the server process's CPU per request) and answers the ranking process's response as is.
    It serves only the plain case: the app started, a ranking pool, no dependency overrides, the
    bearer token right or not required, and a :class:`~fleetmind.serving.rca.pool.Ranked` answer. Everything else (a 401, a body the
    processes found invalid, a ranking error, no process alive) goes on to the route with the body
    and the processes' answer (scope key :data:`POOL_OUTCOME`), which answers exactly as before.
    Sits inside the body-size and metrics middlewares, so limits and request metrics apply; the
    request is timed under the route's template.
    """

    def __init__(self, app: Any) -> None:
        self.app = app
        self._route: Any = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != PATH or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        fast = scope.get("app")
        services = getattr(getattr(fast, "state", None), "services", None)
        pool = getattr(services, "rca_pool", None)
        if pool is None or fast.dependency_overrides or not _token_ok(services, scope):
            # (the auth middleware outside this one has already answered 401/403)
            await self.app(scope, receive, send)
            return
        chunks = []
        while True:
            message = await receive()
            if message["type"] != "http.request":  # client gone
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        model = services.registry.current.rca
        outcome = await rank_in_processes(
            pool, model, services.graphs.graph, body, services.metrics
        )
        scope["route"] = self._route = self._route or _find_route(fast)
        if not isinstance(outcome, Ranked):
            scope[POOL_OUTCOME] = outcome
            await self.app(scope, replay(body, receive), send)
            return
        payload = outcome.body
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-length", str(len(payload)).encode()),
                    (b"content-type", JSON.encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": payload})


def _token_ok(services: Any, scope: Any) -> bool:
    """The route's ``read`` scope: no token configured, or the auth middleware granted it."""
    if not services.settings.tokens():
        return True
    return "read" in scope.get(AUTH_SCOPE_KEY, ())


def _find_route(app: Any) -> Any:
    return next((r for r in app.routes if getattr(r, "path", None) == PATH), None)
