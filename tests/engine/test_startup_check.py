"""The start-up check proves the real path: one tiny evaluation through a judge and a candidate
sandbox. A deployment whose packages the sandbox cannot import (here: all of them on PYTHONPATH, as
a `pip install --target` folder would be) passes the sandbox probe but fails this check, which
names the packages, where they are, and what to do."""

from __future__ import annotations

import json
import os
import subprocess
import sysconfig
from pathlib import Path

import pytest

from contract.statuses import Device
from tests.sandbox.venvs import remove, system_venv
from worker.engine.engine_settings import EngineSettings
from worker.engine.sandbox.python_roots import describe_unreachable, unreachable_modules
from worker.engine.startup_check import run_startup_check

REPO = Path(__file__).resolve().parents[2]

CHECK = """
import json, logging
from worker.engine.sandbox.selfcheck import check_sandbox
from worker.engine.engine_settings import EngineSettings
from worker.engine.startup_check import run_startup_check
from contract.statuses import Device
logging.disable(logging.CRITICAL)
probe = check_sandbox(gpu_nodes=[], isolate_network=True)
check = run_startup_check(EngineSettings.configured(), Device.cpu)
print(json.dumps({"probe": probe.ok, "ok": check.ok, "message": check.message}))
"""


def test_the_startup_check_passes_through_the_real_engine(settings):
    check = run_startup_check(settings, Device.cpu)
    assert check.ok, check.message
    assert check.message == "ok"


@pytest.mark.gpu
def test_the_startup_check_passes_on_the_gpu_with_triton(settings):
    check = run_startup_check(settings, Device.cuda)
    assert check.ok, check.message


@pytest.fixture
def target_folder_deployment():
    """An interpreter that sees none of the packages itself; the server gets them from PYTHONPATH."""
    folder = system_venv(sees_packages=False)
    yield folder
    remove(folder)


def test_packages_only_on_pythonpath_fail_the_check_with_the_fix(target_folder_deployment, tmp_path):
    python = target_folder_deployment / "venv" / "bin" / "python"
    env = {"PATH": os.environ.get("PATH", ""), "KERNELJUDGE_DATA_DIR": str(tmp_path / "data"),
           "PYTHONPATH": f"{REPO}:{sysconfig.get_path('purelib')}", "KERNELJUDGE_WARM_SANDBOXES": "0"}
    done = subprocess.run([str(python), "-c", CHECK], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["probe"], "the sandbox probe alone does not see this deployment's problem"
    assert not report["ok"]
    message = report["message"]
    assert "instead of `ok`" in message  # the evaluation itself failed (the judge cannot import torch)
    assert f"torch is at {os.path.realpath(sysconfig.get_path('purelib'))}/torch" in message
    assert f"install them into {target_folder_deployment / 'venv'}" in message


def test_a_module_off_the_isolated_path_is_named_with_its_location(tmp_path, monkeypatch):
    package = tmp_path / "kj_only_on_pythonpath"
    package.mkdir()
    (package / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    (found,) = unreachable_modules(("kj_only_on_pythonpath", "json"))
    assert found.name == "kj_only_on_pythonpath" and found.location == str(package)
    assert "--target folder or the user site" in describe_unreachable([found])


def test_the_check_runs_once_per_gpu_and_names_the_gpu_that_failed(monkeypatch):
    from worker.engine import startup_check
    from worker.engine.startup_check import StartupCheck, StartupCheckRun

    seen: list[int | None] = []

    def check(settings, device):
        seen.append(settings.gpu_index)
        if settings.gpu_index == 1:
            return StartupCheck(False, "a tiny reference and candidate got `sandbox_error` (no CUDA GPU)", 1.0)
        return StartupCheck(True, "ok", 1.0)

    monkeypatch.setattr(startup_check, "run_startup_check", check)
    run = StartupCheckRun(EngineSettings(), Device.cuda, gpus=[0, 1]).start()
    result = run.wait(30)
    assert seen == [0, 1]
    assert not run.ok and result.message.startswith("GPU 1: ") and "no CUDA GPU" in result.message
    assert run.state.startswith("failed: GPU 1")
