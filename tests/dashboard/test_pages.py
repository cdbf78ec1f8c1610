"""The dashboard's pages and static files: served without a key, locked down, shipped in the package."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import tomllib

from app.api_docs import DOCS_STATIC_DIR
from app.dashboard import STATIC_DIR

REPO = Path(__file__).resolve().parents[2]


def test_root_redirects_to_the_dashboard(evaluated):
    with evaluated.client(None) as client:
        response = client.get("/", follow_redirects=False)
    assert response.status_code == 307 and response.headers["Location"] == "/dashboard"


def test_pages_need_no_key_and_allow_only_this_servers_scripts(evaluated):
    with evaluated.client(None) as client:
        dashboard = client.get("/dashboard")
        job = client.get("/dashboard/jobs/0123abcd")
    for page, script in ((dashboard, "dashboard.js"), (job, "job.js")):
        assert page.status_code == 200 and page.headers["Content-Type"].startswith("text/html")
        policy = page.headers["Content-Security-Policy"]
        assert "script-src 'self'" in policy and "default-src 'none'" in policy and "frame-ancestors 'none'" in policy
        assert f'src="/dashboard/static/{script}"' in page.text
        assert 'src="/dashboard/static/vendor/chart.umd.min.js"' in page.text
        assert "<script>" not in page.text  # no inline script: the policy would block it


def test_served_chart_js_is_the_vendored_release_named_in_its_notice(evaluated):
    notice = (STATIC_DIR / "vendor" / "README.md").read_text()
    recorded = re.search(r"sha256 of `chart.umd.min.js`: `([0-9a-f]{64})`", notice).group(1)
    with evaluated.client(None) as client:
        served = client.get("/dashboard/static/vendor/chart.umd.min.js")
    assert served.status_code == 200 and "javascript" in served.headers["Content-Type"]
    assert hashlib.sha256(served.content).hexdigest() == recorded
    assert served.content.startswith(b"/*!\n * Chart.js v4.6.1")


def test_every_static_file_is_declared_package_data():
    """Users install the package (air-gapped): a file left out of package-data would 404 there."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["app"]
    app_dir = REPO / "app"
    declared = {path for pattern in patterns for path in app_dir.glob(pattern) if path.is_file()}
    shipped = {path for path in (app_dir / "static").rglob("*") if path.is_file()}
    assert STATIC_DIR.parent == DOCS_STATIC_DIR.parent == app_dir / "static"
    assert shipped and shipped <= declared, sorted(str(p) for p in shipped - declared)


def test_api_docs_use_the_vendored_swagger_ui(evaluated):
    notice = (DOCS_STATIC_DIR / "vendor" / "README.md").read_text()
    with evaluated.client(None) as client:
        page = client.get("/docs")
        assert page.status_code == 200 and "cdn" not in page.text.lower()
        for name in ("swagger-ui-bundle.js", "swagger-ui.css"):
            assert f'"/docs/static/vendor/{name}"' in page.text
            recorded = re.search(rf"sha256 of `{re.escape(name)}`: `([0-9a-f]{{64}})`", notice).group(1)
            served = client.get(f"/docs/static/vendor/{name}")
            assert served.status_code == 200 and hashlib.sha256(served.content).hexdigest() == recorded
        assert client.get("/redoc").status_code == 404  # ReDoc would need a CDN: not offered
