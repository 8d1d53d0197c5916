"""IPv6 addresses where FleetMind reads or binds them.

* An alert's ``instance`` that is a bare IPv6 address (``fd00:10::5``: node-exporter's ``instance``
  on a single-stack IPv6 cluster without a port relabelled in) was cut at its last colon, so the
  alert named the node ``fd00:10:`` and mapped onto no host; addresses are compared by value
  (``FD00:10:0::5`` is ``fd00:10::5``), as Prometheus writes them
  (https://github.com/prometheus/prometheus/blob/main/discovery/kubernetes/node.go: the address
  joined with its port by ``net.JoinHostPort``, ``[fd00:10::5]:9100``).
* ``fleetmind serve --host '[::1]'`` passed every check and loaded the models, then uvicorn's
  ``getaddrinfo('[::1]')`` failed ("Name or service not known", exit 3): uvicorn
  (``uvicorn/server.py``: ``loop.create_server(..., host=config.host)``) takes no brackets.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from fleetmind.cli import main
from fleetmind.data.graph import DependencyGraph, instance_address
from fleetmind.serving.settings import get_settings


def _graph() -> DependencyGraph:
    return DependencyGraph.from_json(
        {
            "name": "v6",
            "nodes": [
                {
                    "id": "c0/host/gpu-0",
                    "kind": "host",
                    "cluster": "c0",
                    "match": {"cluster": "c0", "node": "gpu-0"},
                    "attrs": {"addresses": ["FD00:10:0::5", "10.0.0.5"]},
                },
                {
                    "id": "c0/host/gpu-1",
                    "kind": "host",
                    "cluster": "c0",
                    "match": {"cluster": "c0", "node": "gpu-1"},
                    "attrs": {"addresses": ["fd00:10::6", "gpu-1.example"]},
                },
            ],
            "edges": [],
        }
    )


@pytest.mark.parametrize(
    ("instance", "node"),
    [
        ("[fd00:10::5]:9100", "gpu-0"),
        ("[fd00:10::5]", "gpu-0"),
        ("fd00:10::5", "gpu-0"),  # a bare IPv6 address: no port to cut
        ("fd00:10:0:0:0:0:0:5", "gpu-0"),  # another spelling of the same address
        ("[FD00:10::6]:9100", "gpu-1"),
        ("10.0.0.5:9100", "gpu-0"),
        ("10.0.0.5", "gpu-0"),
        ("gpu-1.example:9100", "gpu-1"),
        ("fd00:10::99", "fd00:10::99"),  # no host's: the address itself, whole
        ("gpu-7:9100", "gpu-7"),
        ("[::ffff:10.0.0.5]:9100", "gpu-0"),  # an IPv4-mapped spelling of 10.0.0.5
    ],
)
def test_an_ipv6_instance_maps_onto_its_host(instance: str, node: str) -> None:
    labels = {"alertname": "NodeDown", "cluster": "c0", "instance": instance}
    assert _graph().alert_subject(labels)["node"] == node


def test_instance_address_keeps_a_name_and_canonicalises_an_address() -> None:
    assert instance_address(" [FD00::0:1]:9100 ") == "fd00::1"
    assert instance_address("node-a:9100") == "node-a"
    assert instance_address("fe80::1%eth0") == "fe80::1%eth0"


@pytest.mark.parametrize(
    ("instance", "node"),
    [
        ("[fd00:10::5]:9400", "fd00:10::5"),
        ("fd00:10::5", "fd00:10::5"),
        ("10.0.0.5:9400", "10.0.0.5"),
    ],
)
def test_telemetry_names_a_dcgm_series_by_its_instance_address(instance: str, node: str) -> None:
    """A DCGM series with no node or Hostname label is named by its scrape target's address, as
    the graph names it (an IPv6 target was cut at its last colon: ``fd00:10:``)."""
    from fleetmind.serving.telemetry.prometheus import _node_name

    assert _node_name({"instance": instance}, {}, "c0") == node


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6_loopback(), reason="this machine has no IPv6 loopback")
@pytest.mark.parametrize("given", ["[::1]", " [::1] ", "::1"])
def test_serve_on_a_bracketed_ipv6_host_listens_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: str
) -> None:
    """``serve`` hands uvicorn ``::1``; uvicorn then listens with it and answers on
    ``http://[::1]:<port>``."""
    import uvicorn

    seen: dict[str, Any] = {}

    def record(app: Any, **kwargs: Any) -> None:
        seen.update(kwargs, bind_env=os.environ.get("FLEETMIND_BIND_HOST"))

    monkeypatch.setattr(uvicorn, "run", record)
    for var in ("API", "READ", "INGEST", "SCHEDULE", "ADMIN"):
        monkeypatch.delenv(f"FLEETMIND_{var}_TOKEN", raising=False)
    monkeypatch.setenv("FLEETMIND_DATABASE_URL", f"sqlite:///{tmp_path}/serve.db")
    with socket.socket(socket.AF_INET6) as s:
        s.bind(("::1", 0))
        port = s.getsockname()[1]
    try:
        assert main(["serve", "--host", given, "--port", str(port)]) == 0
    finally:
        get_settings.cache_clear()
    assert (seen["host"], seen["bind_env"]) == ("::1", "::1")

    async def hello(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    server = uvicorn.Server(uvicorn.Config(hello, host=seen["host"], port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.started, "uvicorn did not listen on the host serve gave it"
        r = httpx.get(f"http://[::1]:{port}/", trust_env=False, timeout=5)
        assert (r.status_code, r.text) == (200, "ok")
    finally:
        server.should_exit = True
        thread.join(10)
