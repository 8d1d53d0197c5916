"""The published HTTP contract matches what the service does: ``/openapi.json`` declares the bearer
authentication (every protected operation requires it and lists its 401/403, the routes
:class:`fleetmind.serving.deps.AuthMiddleware` serves without a token are open, the ones
kube-scheduler's verified client certificate reaches without a token also take the OpenAPI 3.1
``mutualTLS`` scheme), the documented
``X-Total-Count`` header, and the Alertmanager webhook as the server accepts it; a 405 carries
every method of the resource in ``Allow`` (RFC 9110 section 15.5.6); ``"truncatedAlerts": true``
is not a count; requests refused before routing are counted under their route template."""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from fastapi.testclient import TestClient

from fleetmind.serving.app import create_app
from fleetmind.serving.deps import route_scope
from fleetmind.serving.settings import Settings
from fleetmind.serving.tls import CLIENT_CERT_KEY

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

TOKENS = {"read": "r-token-0123456789", "ingest": "i-token-0123456789"}
ADMIN = "a-token-0123456789"
ALL = "all-token-0123456789"
METHODS = ("get", "head", "post", "put", "patch", "delete", "options")


def make_app(tmp_path: Path, tokens: bool = True) -> Any:
    kw: dict[str, Any] = {
        "database_url": f"sqlite:///{tmp_path}/contract.db",
        "rca_model": "baseline:upstream-coverage",
        "placement_model": "heuristic:builtin-bestfit",
        "incident_worker": False,
    }
    if tokens:
        kw.update(
            read_token=TOKENS["read"],
            ingest_token=TOKENS["ingest"],
            admin_token=ADMIN,
            api_token=ALL,
        )
    return create_app(Settings(**kw))


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def concrete(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "1", path)


def operations(spec: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method, path, op)
        for path, ops in spec["paths"].items()
        for method, op in ops.items()
        if method in METHODS
    ]


def test_spec_declares_bearer_auth_as_the_middleware_enforces_it(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    with TestClient(app) as c:
        spec = c.get("/openapi.json", headers=bearer(TOKENS["read"])).json()
        schemes = spec["components"]["securitySchemes"]
        assert sorted(schemes) == ["bearerAuth", "mutualTLS"]
        name, scheme = "bearerAuth", schemes["bearerAuth"]
        assert scheme["type"] == "http" and scheme["scheme"].lower() == "bearer"
        assert spec["security"] == [{name: []}]
        opened = set()
        for method, path, op in operations(spec):
            where = f"{method.upper()} {path}"
            security = op.get("security", spec["security"])
            # the open list comes from the middleware's own rule, not a copy of it
            scope = {"type": "http", "path": concrete(path), "method": method.upper()}
            public = route_scope(app, scope) == "public"
            answer = c.request(method.upper(), concrete(path)).status_code
            if public:
                opened.add(path)
                assert security == [], where
                assert answer not in (401, 403), f"{where} without a token -> {answer}"
            else:
                assert security in ([{name: []}], [{name: []}, {"mutualTLS": []}]), where
                assert {"401", "403"} <= set(op["responses"]), where
                for code in ("401", "403"):
                    content = op["responses"][code]["content"]["application/json"]
                    assert content["schema"] == {"$ref": "#/components/schemas/ErrorOut"}, where
                assert answer == 401, f"{where} without a token -> {answer}"
        assert opened == {"/healthz", "/readyz", "/metrics"}  # the probes (security.md)


def test_mutual_tls_is_declared_where_the_scheduler_certificate_reaches(tmp_path: Path) -> None:
    """kube-scheduler's verified client certificate (no token) gets the ``schedule`` scope on
    ``/api/v1/scheduler/*`` (``AuthMiddleware``): exactly the operations it reaches list the
    ``mutualTLS`` scheme (OpenAPI 3.1.0, "Security Scheme Object": ``type: mutualTLS``) as an
    alternative to the bearer token; the others require the token only."""
    app = make_app(tmp_path)
    with TestClient(app) as c:
        spec = c.get("/openapi.json", headers=bearer(TOKENS["read"])).json()
        assert spec["openapi"].startswith("3.1")
        assert spec["components"]["securitySchemes"]["mutualTLS"]["type"] == "mutualTLS"
        c.app_state[CLIENT_CERT_KEY] = "CN=system:kube-scheduler"  # what ClientCertProtocol sets
        reached = set()
        for method, path, op in operations(spec):
            security = op.get("security", spec["security"])
            if security == []:
                continue
            answer = c.request(method.upper(), concrete(path)).status_code
            if answer not in (401, 403):
                reached.add((method, path))
                assert security == [{"bearerAuth": []}, {"mutualTLS": []}], (method, path)
            else:
                assert security == [{"bearerAuth": []}], (method, path)
        assert {p for _, p in reached} >= {
            "/api/v1/scheduler/filter",
            "/api/v1/scheduler/prioritize",
        }
        assert all(p.startswith("/api/v1/scheduler/") for _, p in reached)


def test_x_total_count_is_published_and_sent(tmp_path: Path) -> None:
    with TestClient(make_app(tmp_path)) as c:
        spec = c.get("/openapi.json", headers=bearer(ALL)).json()
        ok = spec["paths"]["/api/v1/incidents"]["get"]["responses"]["200"]
        assert ok["headers"]["X-Total-Count"]["schema"]["type"] == "integer"
        r = c.get("/api/v1/incidents", headers=bearer(ALL))
        assert r.status_code == 200 and r.headers["X-Total-Count"] == "0"


def test_405_allow_lists_every_method_of_the_path(tmp_path: Path) -> None:
    with TestClient(make_app(tmp_path)) as c:
        spec = c.get("/openapi.json", headers=bearer(ALL)).json()
        r = c.post("/api/v1/graph", headers=bearer(ALL))
        assert r.status_code == 405
        assert r.headers["allow"] == "GET, HEAD, PUT"  # was "GET" (the first route's only)
        for path, ops in spec["paths"].items():
            served = {m.upper() for m in ops if m in METHODS}
            if "GET" in served:
                served.add("HEAD")
            r = c.request("PATCH", concrete(path), headers=bearer(ALL))  # no route takes PATCH
            assert r.status_code == 405, path
            assert set(r.headers["allow"].split(", ")) == served, path
            for method in served:  # each method listed is served, none refused as 405
                assert c.request(method, concrete(path), headers=bearer(ALL)).status_code != 405


def _hook(**envelope: Any) -> dict[str, Any]:
    labels = {"alertname": "Contract", "cluster": "c0", "node": "c0-h1"}
    return {"alerts": [{"labels": labels, "startsAt": "2026-05-02T00:00:00Z"}], **envelope}


@pytest.mark.parametrize("value", [True, False])
def test_truncated_alerts_boolean_is_not_a_count(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, value: bool
) -> None:
    with TestClient(make_app(tmp_path, tokens=False)) as c:
        caplog.set_level(logging.WARNING, logger="fleetmind.serving")
        r = c.post("/api/v1/alerts", json=_hook(truncatedAlerts=value))
        assert r.status_code == 200 and r.json()["truncated"] == 0  # true was read as 1
        assert any("truncatedAlerts" in m and "read as 0" in m for m in caplog.messages)
        assert "fleetmind_alerts_truncated_total 0.0" in c.get("/metrics").text


ACCEPTED_WEBHOOKS = {
    "label value over 8,192 characters (clipped)": {
        "alerts": [
            {
                "labels": {"alertname": "Long", "summary": "x" * 9000},
                "startsAt": "2026-05-02T00:00:00Z",
            }
        ]
    },
    "annotation over 8,192 characters (clipped)": {
        "alerts": [
            {
                "labels": {"alertname": "LongNote"},
                "annotations": {"description": "y" * 9000},
                "startsAt": "2026-05-02T00:00:00Z",
            }
        ]
    },
    "generatorURL over 8,192 characters (clipped)": {
        "alerts": [
            {
                "labels": {"alertname": "LongURL"},
                "generatorURL": "http://p/graph?g0.expr=" + "a" * 9000,
                "startsAt": "2026-05-02T00:00:00Z",
            }
        ]
    },
    "receiver over 256 characters (ignored)": _hook(receiver="r" * 300),
    '"version": 4 (ignored)': _hook(version=4),
    '"groupLabels": null (ignored)': _hook(groupLabels=None),
    # Alertmanager's field is a uint64 (notify/webhook/webhook.go, Message.TruncatedAlerts)
    "truncatedAlerts over 2**31-1 (read as 0)": _hook(truncatedAlerts=2**40),
}


@pytest.mark.parametrize("name", sorted(ACCEPTED_WEBHOOKS))
def test_published_webhook_schema_accepts_what_the_server_accepts(
    tmp_path: Path, name: str
) -> None:
    body = ACCEPTED_WEBHOOKS[name]
    with TestClient(make_app(tmp_path, tokens=False)) as c:
        spec = c.get("/openapi.json").json()
        media = spec["paths"]["/api/v1/alerts"]["post"]["requestBody"]["content"]
        schema = {**media["application/json"]["schema"], "components": spec["components"]}
        errors = [
            e.message[:120] for e in jsonschema.Draft202012Validator(schema).iter_errors(body)
        ]
        assert errors == [], f"{name}: {errors}"
        r = c.post("/api/v1/alerts", content=json.dumps(body))
        assert r.status_code == 200 and r.json()["accepted"] == 1, r.text


def _counted(metrics: str, method: str, route: str, status: int) -> float:
    pattern = (
        r"^fleetmind_http_request_duration_seconds_count\{"
        + rf'(?=[^}}]*method="{method}")(?=[^}}]*route="{re.escape(route)}")'
        + rf'(?=[^}}]*status="{status}")[^}}]*\}} (\S+)$'
    )
    found = re.search(pattern, metrics, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def test_requests_refused_before_routing_count_under_their_route(tmp_path: Path) -> None:
    with TestClient(make_app(tmp_path)) as c:
        assert c.post("/api/v1/alerts", json={"alerts": []}).status_code == 401
        plain = {**bearer(ALL), "Content-Type": "text/plain"}
        assert c.post("/api/v1/alerts", content=b'{"alerts": []}', headers=plain).status_code == 415
        assert c.get("/api/v1/incidents").status_code == 401
        assert c.get("/api/v1/incidents", headers=bearer(TOKENS["ingest"])).status_code == 403
        assert c.get("/no/such/route", headers=bearer(ALL)).status_code == 404
        text = c.get("/metrics").text
    assert _counted(text, "POST", "/api/v1/alerts", 401) == 1
    assert _counted(text, "POST", "/api/v1/alerts", 415) == 1
    assert _counted(text, "GET", "/api/v1/incidents", 401) == 1
    assert _counted(text, "GET", "/api/v1/incidents", 403) == 1
    assert _counted(text, "GET", "unmatched", 404) == 1  # a path no route has stays unmatched
    for status in (401, 403, 415):
        assert _counted(text, "POST", "unmatched", status) == 0
        assert _counted(text, "GET", "unmatched", status) == 0
