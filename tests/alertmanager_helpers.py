"""A real Prometheus Alertmanager for tests, and a local receiver that records what it posts.

The binary is Debian's ``prometheus-alertmanager`` (0.25; ``make test`` installs it as root with
apt-get); tests that need it skip with the package name when it is absent. Each instance runs alone:
``--cluster.listen-address=`` (empty) turns gossip off (upstream ``cmd/alertmanager/main.go``), its
silences and notification log go to its own ``--storage.path``, and it counts as started once
``/-/ready`` answers 200 (upstream ``ui/web.go``; under ``--web.route-prefix`` the route moves with
the prefix, ``router.WithPrefix``).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from serving_helpers import free_port, wait_for

from fleetmind.data.paths import REPO_ROOT

SHIPPED = REPO_ROOT / "deploy" / "alertmanager.yml"
MISSING = "Prometheus Alertmanager not installed (Debian package prometheus-alertmanager)"


def alertmanager_binary() -> str:
    """The Alertmanager binary's path (Debian names it ``prometheus-alertmanager``); skips the
    calling test when it is not installed."""
    binary = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if binary is None:
        pytest.skip(MISSING)
    return binary


def answers_200(url: str) -> bool:
    """Whether ``url`` answers 200 within a second (False on refused or timed-out connections)."""
    try:
        return httpx.get(url, timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


@contextlib.contextmanager
def running_alertmanager(
    config: Path,
    storage: Path,
    *,
    port: int | None = None,
    route_prefix: str | None = None,
    log: Path | None = None,
    timeout: float = 30.0,
) -> Iterator[str]:
    """A real Alertmanager on ``config`` (a YAML file) with its data under ``storage``, listening
    on 127.0.0.1:``port`` (a free one when None); yields its base URL (without the route prefix)
    once ready and stops it after. Its stderr goes to ``log`` when given, which the readiness
    failure then shows."""
    binary = alertmanager_binary()
    port = port or free_port()
    command = [
        binary,
        f"--config.file={config}",
        f"--storage.path={storage}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--cluster.listen-address=",
        "--log.level=warn",
    ]
    if route_prefix is not None:
        command.append(f"--web.route-prefix={route_prefix}")
    with contextlib.ExitStack() as stack:
        stderr = stack.enter_context(open(log, "wb")) if log else subprocess.DEVNULL
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr)
        url = f"http://127.0.0.1:{port}"
        ready = f"{url}{(route_prefix or '').rstrip('/')}/-/ready"
        try:
            started = wait_for(lambda: answers_200(ready), timeout=timeout)
            assert started, f"Alertmanager not ready: {log.read_text() if log else ''}"
            yield url
        finally:
            proc.terminate()
            proc.wait(10)


class Receiver:
    """A local HTTP server standing in for a notification receiver (webhook, PagerDuty, ...):
    ``got`` holds ``(path, JSON body)`` of every POST in arrival order; each is answered
    ``status`` with ``reply(path)`` as a JSON body (none when ``reply`` is None)."""

    def __init__(
        self,
        port: int = 0,
        status: int = 200,
        reply: Callable[[str], bytes] | None = None,
    ) -> None:
        self.got: list[tuple[str, Any]] = []
        lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                raw = self.rfile.read(int(self.headers.get("content-length", 0) or 0))
                with lock:
                    outer.got.append((self.path, json.loads(raw or b"{}")))
                body = reply(self.path) if reply else b""
                self.send_response(status)
                if body:
                    self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def at(self, path: str) -> list[Any]:
        """The bodies posted to exactly ``path``, in arrival order."""
        return [b for p, b in list(self.got) if p == path]

    def under(self, prefix: str) -> list[tuple[str, Any]]:
        """``(path, body)`` of the posts to paths that start with ``prefix`` (query included)."""
        return [(p, b) for p, b in list(self.got) if p.startswith(prefix)]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> Receiver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def shipped_config(
    tmp_path: Path, fleetmind_url: str, token: str, oncall_url: str | None = None
) -> Path:
    """The shipped deploy/alertmanager.yml with fast timings (group_wait and group_interval 1 s
    instead of 30 s and 1 min, same semantics), FleetMind's URL and token, and (``oncall_url``)
    a webhook standing in for the user's on-call receivers (the paging one and the channel that
    gets warning root causes); written to ``tmp_path``/alertmanager.yml."""
    cfg = yaml.safe_load(SHIPPED.read_text())
    for route in [cfg["route"], *cfg["route"].get("routes", [])]:
        route.update(group_wait="1s", group_interval="1s", repeat_interval="1h")
    receivers = {r["name"]: r for r in cfg["receivers"]}
    hook = receivers["fleetmind"]["webhook_configs"][0]
    hook["url"] = fleetmind_url + "/api/v1/alerts"
    (tmp_path / "token").write_text(token)
    hook["http_config"]["authorization"]["credentials_file"] = str(tmp_path / "token")
    if oncall_url:
        for name in ("oncall", "team-chat"):
            receivers[name]["webhook_configs"] = [{"url": oncall_url, "send_resolved": True}]
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(cfg))
    return path
