"""``/docs`` and ``/redoc`` load exact releases with Subresource Integrity and a policy that
allows nothing else (W3C Subresource Integrity; CSP Level 2 hash-source; FastAPI's "Custom Docs
UI Static Assets" for replacing the docs routes). The pinned hashes are those of the files in the
npm packages (``npm pack swagger-ui-dist@5.35.0 redoc@2.5.4``), served unchanged by jsDelivr."""

from __future__ import annotations

import re
from typing import Any

import pytest
from fastapi.testclient import TestClient

from fleetmind.serving.api_docs import REDOC_JS, SWAGGER_CSS, SWAGGER_JS, inline_script_hashes
from fleetmind.serving.app import create_app
from fleetmind.serving.settings import Settings


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("docs")
    settings = Settings(
        database_url=f"sqlite:///{tmp}/d.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
    )
    with TestClient(create_app(settings)) as c:
        yield c


def _loaded(html: str) -> list[str]:
    return re.findall(r'(?:src|href)="(https?://[^"]+)"', html)


def test_swagger_ui_loads_only_pinned_files_with_integrity(client: TestClient) -> None:
    r = client.get("/docs")
    assert r.status_code == 200
    assert sorted(_loaded(r.text)) == sorted([SWAGGER_JS.url, SWAGGER_CSS.url])
    for asset in (SWAGGER_JS, SWAGGER_CSS):
        assert f'"{asset.url}" integrity="{asset.integrity}" crossorigin="anonymous"' in r.text
    csp = r.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "connect-src 'self'" in csp
    assert f"script-src {SWAGGER_JS.url} {inline_script_hashes(r.text)};" in csp
    assert "@5/" not in r.text and "fonts.googleapis" not in r.text


def test_redoc_loads_only_the_pinned_bundle(client: TestClient) -> None:
    r = client.get("/redoc")
    assert r.status_code == 200
    assert _loaded(r.text) == [REDOC_JS.url]
    assert f'integrity="{REDOC_JS.integrity}"' in r.text
    assert f"script-src {REDOC_JS.url};" in r.headers["content-security-policy"]


def test_oauth2_redirect_runs_only_its_own_script(client: TestClient) -> None:
    r = client.get("/docs/oauth2-redirect")
    assert r.status_code == 200 and not _loaded(r.text)
    assert f"script-src {inline_script_hashes(r.text)};" in r.headers["content-security-policy"]


def test_versions_are_exact(client: TestClient) -> None:
    for asset in (SWAGGER_JS, SWAGGER_CSS, REDOC_JS):
        assert re.search(r"@\d+\.\d+\.\d+/", asset.url), asset.url
        assert asset.integrity.startswith("sha384-")
    assert client.get("/openapi.json").status_code == 200
