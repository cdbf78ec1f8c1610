"""The service's pages in a real headless Chromium (Debian's, driven by Playwright): the dashboard over
real evaluations, and the API docs (/docs) with every request off this server refused.

Screenshots go to $KERNELJUDGE_TEST_ARTIFACTS (default: the test's tmp dir) as dashboard.png and job.png.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, Route, sync_playwright

from dashboard.conftest import SPAWNING_CANDIDATE
from tests.service.helpers import USER_KEY, make_config, start_server

CHROMIUM = os.environ.get("KERNELJUDGE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
RENDER_TIMEOUT_MS = 30_000
DASHBOARD_CHARTS = ["queue-chart", "devices-chart", "outcomes-chart", "speedups-chart", "rules-chart", "stages-chart"]

# The data points of the chart drawn on a canvas ([] when there is no chart yet): numbers, or
# [low, high] for floating bars. Chart.getChart is Chart.js's public lookup.
CHART_POINTS = """(id) => {
  const chart = Chart.getChart(document.getElementById(id));
  return chart ? chart.data.datasets.flatMap((d) => d.data).filter((v) => v !== null) : [];
}"""
# Sum of a chart's data points (counts: jobs per verdict, jobs per rule).
CHART_TOTAL = f"(id) => ({CHART_POINTS})(id).reduce((sum, v) => sum + v, 0)"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} not found: run scripts/setup.sh dev (installs Debian's chromium) "
                    "or set KERNELJUDGE_CHROMIUM")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def artifacts(tmp_path) -> Path:
    folder = Path(os.environ.get("KERNELJUDGE_TEST_ARTIFACTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def page(browser) -> Iterator[tuple[Page, list[str]]]:
    """A fresh tab (own sessionStorage) and the console errors and page errors it reports."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    tab = context.new_page()
    problems: list[str] = []

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            problems.append(f"console: {message.text} ({message.location})")

    tab.on("console", on_console)
    tab.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    yield tab, problems
    context.close()


def _sign_in(tab: Page, url: str) -> None:
    tab.goto(url)
    tab.locator("#api-key").fill(USER_KEY)
    tab.locator("#login button[type=submit]").click()


def test_dashboard_draws_every_chart_from_real_jobs(evaluated, page, artifacts):
    tab, problems = page
    _sign_in(tab, f"{evaluated.live.base_url}/")  # `/` redirects to /dashboard
    assert tab.url.endswith("/dashboard")
    for chart in DASHBOARD_CHARTS:
        # A function, not an expression string: the page's CSP forbids eval, which expressions need.
        tab.wait_for_function(f"(id) => ({CHART_POINTS})(id).length > 0", arg=chart, timeout=RENDER_TIMEOUT_MS)
    # The charts hold exactly what the API says (two correct jobs, one per verdict otherwise).
    assert tab.evaluate(CHART_TOTAL, "outcomes-chart") == 5
    assert tab.evaluate(CHART_TOTAL, "rules-chart") == len({h["rule"] for h in evaluated.jobs["spawning"]["result"]["rules"]})
    assert tab.evaluate("() => Chart.getChart(document.getElementById('speedups-chart')).data.labels") == ["add_one"]
    assert tab.locator("#jobs-table tbody tr").count() == len(evaluated.jobs)
    assert tab.locator("#kpi-workers").inner_text() == "1 (embedded)"
    assert tab.locator("#rules-fired").is_visible() and tab.locator("#rules-none").is_hidden()
    assert "your API key" in tab.locator("#scope").inner_text()
    assert tab.locator("#error").is_hidden()
    tab.screenshot(path=str(artifacts / "dashboard.png"), full_page=True)
    assert problems == []


def test_rule_example_opens_the_job_with_its_evidence_and_source(evaluated, page, artifacts):
    tab, problems = page
    spawning = evaluated.jobs["spawning"]
    _sign_in(tab, f"{evaluated.live.base_url}/dashboard")
    example = tab.locator("#rules-table a").first
    example.wait_for(timeout=RENDER_TIMEOUT_MS)
    example.click()
    tab.wait_for_url(f"**/dashboard/jobs/{spawning['id']}")
    # Same tab: the key kept in sessionStorage signs the job page in without asking again.
    tab.locator("#candidate .line").first.wait_for(timeout=RENDER_TIMEOUT_MS)
    assert tab.locator("#job-id").inner_text() == spawning["id"]
    assert tab.locator("#job-outcome").inner_text() == "rejected"
    hits = spawning["result"]["rules"]
    assert tab.locator("#rules-table tbody tr").count() == len(hits)
    assert tab.locator("#rules-table tbody").inner_text().count("import subprocess") >= 1
    lines = tab.locator("#candidate .line")
    assert lines.count() == len(SPAWNING_CANDIDATE.split("\n"))
    marked = {int(tab.locator("#candidate .line.marked .line-number").nth(i).inner_text())
              for i in range(tab.locator("#candidate .line.marked").count())}
    assert marked == {h["line"] for h in hits}
    tab.wait_for_function("() => Chart.getChart(document.getElementById('stages-chart'))?.data.labels.length > 0",
                          timeout=RENDER_TIMEOUT_MS)
    tab.screenshot(path=str(artifacts / "job.png"), full_page=True)
    assert problems == []


def test_open_mode_shows_an_empty_dashboard_without_asking_for_a_key(page, tmp_path):
    tab, problems = page
    live = start_server(make_config(tmp_path / "data", api_keys={}, open_mode=True, local_workers=0))
    try:
        tab.goto(f"{live.base_url}/dashboard")
        tab.wait_for_function(f"() => ({CHART_POINTS})('queue-chart').length > 0", timeout=RENDER_TIMEOUT_MS)
        # The window's 48 time buckets label the outcomes chart once the aggregates are drawn.
        tab.wait_for_function("() => Chart.getChart(document.getElementById('outcomes-chart')).data.labels.length === 48",
                              timeout=RENDER_TIMEOUT_MS)
        assert tab.locator("#error").is_hidden()
        assert tab.locator("#login").is_hidden()
        assert "all API keys" in tab.locator("#scope").inner_text()
        assert tab.locator("#kpi-workers").inner_text() == "0 (embedded)"
        assert tab.evaluate(CHART_TOTAL, "outcomes-chart") == 0
        assert tab.locator("#jobs-table tbody tr").count() == 0
        # No rule fired: the section says so instead of drawing an empty axis.
        assert tab.locator("#rules-none").is_visible() and "none yet" in tab.locator("#rules-none").inner_text()
        assert tab.locator("#rules-fired").is_hidden()
        assert problems == []
    finally:
        live.stop()


def test_api_docs_render_every_operation_without_internet(page, tmp_path):
    """Swagger UI's script and styles come from the service (app/static/docs/vendor/): with every
    request to another host refused, /docs still draws the operations of /openapi.json."""
    tab, problems = page
    live = start_server(make_config(tmp_path / "data", local_workers=0))
    refused: list[str] = []

    def only_this_server(route: Route) -> None:
        if route.request.url.startswith(live.base_url + "/"):
            route.continue_()
        else:
            refused.append(route.request.url)
            route.abort("internetdisconnected")

    tab.context.route("**/*", only_this_server)
    try:
        tab.goto(f"{live.base_url}/docs")
        tab.locator(".opblock").first.wait_for(timeout=RENDER_TIMEOUT_MS)
        with live.client(None) as client:
            schema = client.get("/openapi.json").json()
        expected = {(method.upper(), path) for path, item in schema["paths"].items() for method in item}
        shown = {(tab.locator(".opblock-summary-method").nth(i).inner_text().strip(),
                  tab.locator(".opblock-summary-path").nth(i).get_attribute("data-path"))
                 for i in range(tab.locator(".opblock").count())}
        assert shown == expected
        assert "kerneljudge" in tab.locator(".info .title").inner_text()
        assert refused == [] and problems == []
    finally:
        live.stop()
