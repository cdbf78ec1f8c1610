"""The dashboard's pages: `GET /` redirects to `/dashboard`; the pages and their scripts are static files.

The pages hold no data and need no key: their scripts ask for the API key once per browser tab
(sessionStorage), then call /v1/dashboard/... with `Authorization: Bearer`, like any client. No
cookie carries the key, so no other site can make the browser act with it (no CSRF); the strict
Content-Security-Policy below allows only this server's own scripts, and the scripts insert what
jobs contain as text, never as HTML.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, FastAPI
from fastapi.responses import FileResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

STATIC_DIR = Path(__file__).parent / "static" / "dashboard"

PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}

router = APIRouter(include_in_schema=False)


def _page(name: str) -> FileResponse:
    return FileResponse(STATIC_DIR / name, media_type="text/html; charset=utf-8", headers=PAGE_HEADERS)


@router.get("/")
def root() -> RedirectResponse:
    return RedirectResponse("/dashboard", status_code=307)


@router.get("/dashboard")
def dashboard_page() -> FileResponse:
    return _page("index.html")


@router.get("/dashboard/jobs/{job_id}")
def job_page(job_id: str) -> FileResponse:
    """The job page reads `job_id` from its own URL and fetches the job with the key."""
    return _page("job.html")


def install(app: FastAPI) -> None:
    app.include_router(router)
    app.mount("/dashboard/static", StaticFiles(directory=STATIC_DIR), name="dashboard-static")
