"""``/docs`` (Swagger UI) and ``/redoc``: FastAPI's pages, with their scripts pinned.

FastAPI's default pages load ``swagger-ui-dist@5`` and ``redoc@2`` from cdn.jsdelivr.net (a moving
major-version tag) and Google Fonts, on the service's own origin, where a browser holds the
operator's ``/ui`` session: any script the CDN served there could read incident pages and post
feedback as the operator. Here each page loads one exact release with Subresource Integrity
(W3C SRI: the browser runs the file only if its SHA-384 matches) and carries a
``Content-Security-Policy`` that allows only those files, the page's own inline script (by hash)
and requests to the service itself. The hashes are of the files in the npm packages
(``npm pack swagger-ui-dist@5.35.0 redoc@2.5.4``), which jsDelivr serves unchanged. FastAPI's
"Custom Docs UI Static Assets" (fastapi.tiangolo.com/how-to/custom-docs-ui-assets/) describes
replacing these routes; no maintained PyPI package ships the two bundles, so they are not
self-hosted, and ``/docs`` stays blank where the CDN cannot be reached (``/openapi.json`` works).
"""

from __future__ import annotations

import base64
import hashlib
import re
from dataclasses import dataclass

from fastapi import FastAPI
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import HTMLResponse

CDN = "https://cdn.jsdelivr.net/npm"
SWAGGER_UI_VERSION = "5.35.0"
REDOC_VERSION = "2.5.4"


@dataclass(frozen=True)
class Asset:
    """A pinned third-party file: its URL and its SRI ``integrity`` value."""

    url: str
    integrity: str


SWAGGER_JS = Asset(
    f"{CDN}/swagger-ui-dist@{SWAGGER_UI_VERSION}/swagger-ui-bundle.js",
    "sha384-gjRm0bEPMeTmMh5jT2cHccIwCUZSTd8YC+j0d0sXw0MdGEfScduGpSyF3ZSSLkX9",
)
SWAGGER_CSS = Asset(
    f"{CDN}/swagger-ui-dist@{SWAGGER_UI_VERSION}/swagger-ui.css",
    "sha384-WlYgdmXYOOBWL5apwjDEZwN+U3HmXSSu5R6V5aGxEcf7z+KuRNwBhoxKVN1i3D5I",
)
REDOC_JS = Asset(
    f"{CDN}/redoc@{REDOC_VERSION}/bundles/redoc.standalone.js",
    "sha384-w447zOpYfw/1Tv/5AK9NfHTlQIqE3RVR6KY62jCyy9zNDgO64cMwGGP1Fj0zJVf5",
)
FAVICON = "/favicon.ico"
_INLINE_SCRIPT = re.compile(r"<script>(.*?)</script>", re.DOTALL)
_COMMON_CSP = (
    "default-src 'none'; img-src 'self' data:; font-src 'self' data:; connect-src 'self'; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
)


def with_integrity(html: str, assets: list[Asset]) -> str:
    """``html`` with ``integrity`` and ``crossorigin`` on the tag that loads each asset.

    Raises:
        RuntimeError: an asset's URL is not in the page (FastAPI changed its template).
    """
    for asset in assets:
        for attr in ("src", "href"):
            tag = f'{attr}="{asset.url}"'
            if tag in html:
                html = html.replace(
                    tag, f'{tag} integrity="{asset.integrity}" crossorigin="anonymous"'
                )
                break
        else:
            raise RuntimeError(f"API docs page does not load {asset.url}")
    return html


def inline_script_hashes(html: str) -> str:
    """The CSP ``'sha256-...'`` sources of the page's inline scripts (CSP Level 2 hash-source)."""
    return " ".join(
        "'sha256-" + base64.b64encode(hashlib.sha256(body.encode()).digest()).decode() + "'"
        for body in _INLINE_SCRIPT.findall(html)
    )


def page(
    html: str, assets: list[Asset], script_src: str, style_src: str
) -> tuple[str, dict[str, str]]:
    """An API docs page and its headers: ``assets`` pinned by SRI, the policy allowing only them."""
    html = with_integrity(html, assets)
    scripts = " ".join(filter(None, [script_src, inline_script_hashes(html)])) or "'none'"
    csp = f"{_COMMON_CSP}; script-src {scripts}; style-src {style_src}; worker-src blob:"
    return html, {"content-security-policy": csp, "cache-control": "no-store"}


def add_api_docs(app: FastAPI, title: str) -> None:
    """Serve ``/docs``, ``/docs/oauth2-redirect`` and ``/redoc`` for ``app`` (built with
    ``docs_url=None, redoc_url=None``); authentication is by path, as for FastAPI's own
    (:data:`fleetmind.serving.deps.DOC_PATHS`)."""
    openapi_url = app.openapi_url or "/openapi.json"
    swagger_html = get_swagger_ui_html(
        openapi_url=openapi_url,
        title=f"{title} - Swagger UI",
        oauth2_redirect_url="/docs/oauth2-redirect",
        swagger_js_url=SWAGGER_JS.url,
        swagger_css_url=SWAGGER_CSS.url,
        swagger_favicon_url=FAVICON,
    ).body.decode()
    redoc_html = get_redoc_html(
        openapi_url=openapi_url,
        title=f"{title} - ReDoc",
        redoc_js_url=REDOC_JS.url,
        redoc_favicon_url=FAVICON,
        with_google_fonts=False,
    ).body.decode()
    redirect_html = get_swagger_ui_oauth2_redirect_html().body.decode()
    # Swagger UI and ReDoc set element styles from script: style-src needs 'unsafe-inline'
    swagger = page(
        swagger_html,
        [SWAGGER_JS, SWAGGER_CSS],
        SWAGGER_JS.url,
        f"{SWAGGER_CSS.url} 'unsafe-inline'",
    )
    redoc = page(redoc_html, [REDOC_JS], REDOC_JS.url, "'unsafe-inline'")
    redirect = page(redirect_html, [], "", "'none'")

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return HTMLResponse(swagger[0], headers=swagger[1])

    @app.get("/docs/oauth2-redirect", include_in_schema=False)
    async def swagger_ui_redirect() -> HTMLResponse:
        return HTMLResponse(redirect[0], headers=redirect[1])

    @app.get("/redoc", include_in_schema=False)
    async def redoc_page() -> HTMLResponse:
        return HTMLResponse(redoc[0], headers=redoc[1])
