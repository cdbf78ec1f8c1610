"""/v1/ready waits for the start-up check (`kerneljudge serve` runs it in the background) and says why
it failed; the check itself is tested in tests/engine/test_startup_check.py."""

from __future__ import annotations

import argparse

import uvicorn

from app import serve_cli
from contract.statuses import Device
from worker.engine.engine_settings import EngineSettings
from worker.engine.startup_check import StartupCheck, StartupCheckRun


def test_ready_is_false_until_the_startup_check_passes_and_names_its_failure(working_server):
    app = working_server.server.config.app
    check = StartupCheckRun(EngineSettings.configured(), Device.cpu)  # not started: still running
    app.state.startup_check = check
    with working_server.client(key=None) as client:
        running = client.get("/v1/ready")
        assert running.status_code == 503 and running.json()["selfcheck"] == "running"
        check.result = StartupCheck(False, "the server's packages are outside the Python prefixes ...", 2.0)
        failed = client.get("/v1/ready")
        assert failed.status_code == 503
        assert failed.json()["selfcheck"].startswith("failed: the server's packages are outside")
        check.result = StartupCheck(True, "ok", 2.0)
        passed = client.get("/v1/ready")
        assert passed.status_code == 200
        assert passed.json()["ready"] is True and passed.json()["selfcheck"] == "ok"


def test_ready_without_a_startup_check_reports_none(queued_server):
    with queued_server.client(key=None) as client:
        assert client.get("/v1/ready").json()["selfcheck"] is None


def test_serve_runs_the_startup_check_in_the_background(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELJUDGE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("KERNELJUDGE_API_KEYS", "serve-test-key")
    for name in ("KERNELJUDGE_DATABASE_URL", "KERNELJUDGE_BROKER_URL", "KERNELJUDGE_SKIP_SELFCHECK"):
        monkeypatch.delenv(name, raising=False)
    served = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: served.append(app))
    parser = argparse.ArgumentParser()
    serve_cli.add_arguments(parser)
    assert serve_cli.run(parser.parse_args(["--device", "cpu", "--workers", "0"])) == 0
    [app] = served
    try:
        result = app.state.startup_check.wait(600)
        assert result is not None and result.ok, result
        assert app.state.startup_check.state == "ok"
    finally:
        app.state.store.close()
