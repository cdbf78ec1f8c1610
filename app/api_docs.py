"""GET /docs: Swagger UI over /openapi.json, its script and styles served by the service itself
(app/static/docs/vendor/, like the dashboard's Chart.js), so the page works without internet.
ReDoc, which FastAPI would load from a CDN, is not offered."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

DOCS_STATIC_DIR = Path(__file__).parent / "static" / "docs"
STATIC_PATH = "/docs/static"


def install(app: FastAPI) -> None:
    """Call with FastAPI(docs_url=None, redoc_url=None): this replaces the CDN-backed pages."""
    app.mount(STATIC_PATH, StaticFiles(directory=DOCS_STATIC_DIR), name="docs-static")

    @app.get("/docs", include_in_schema=False)
    def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "").rstrip("/")
        vendor = f"{root}{STATIC_PATH}/vendor"
        return get_swagger_ui_html(openapi_url=f"{root}{app.openapi_url}", title=f"{app.title} API",
                                   swagger_js_url=f"{vendor}/swagger-ui-bundle.js",
                                   swagger_css_url=f"{vendor}/swagger-ui.css",
                                   swagger_favicon_url=f"{vendor}/favicon-32x32.png")
