"""How a GPU sandbox's CUDA waits for the device (KERNELJUDGE_CUDA_SYNC_WAIT, sandbox_side/runtime/cuda_sync.py).
CUDA's default spins a core through every wait of a judge or a runner; `blocking` sleeps in the driver. The
flags themselves are read back on the GPU (tests/engine/test_gpu.py); here, what each sandbox is told and what a
process does without a driver."""

from __future__ import annotations

import subprocess
import sys

import pytest
from pydantic import ValidationError

from contract.statuses import SandboxKind
from worker.config.engine_section import EngineSection
from worker.engine.launch import RunnerConfig, RunnerPaths, runner_spec
from worker.engine.sandbox import ResourceLimits


@pytest.mark.parametrize("role", ["reference", "candidate"])
@pytest.mark.parametrize("wait", ["auto", "blocking"])
def test_a_gpu_lane_s_judges_and_runners_are_told_the_configured_wait(settings, role, wait):
    settings.cuda_sync_wait = wait
    config = RunnerConfig(role=role, mode="run", device="cuda", paths=RunnerPaths(), sandbox=SandboxKind.bwrap)
    assert runner_spec(config, settings, ResourceLimits()).env["KJ_CUDA_SYNC_WAIT"] == wait


@pytest.mark.parametrize(("device", "mode"), [("cuda", "build"), ("cpu", "run")])
def test_sandboxes_without_a_gpu_are_told_no_wait(settings, device, mode):
    settings.cuda_sync_wait = "blocking"
    config = RunnerConfig(role="candidate", mode=mode, device=device, paths=RunnerPaths(), sandbox=SandboxKind.bwrap)
    assert "KJ_CUDA_SYNC_WAIT" not in runner_spec(config, settings, ResourceLimits()).env


def test_an_unknown_wait_is_refused_with_the_variable_s_name(monkeypatch):
    monkeypatch.setenv("KERNELJUDGE_CUDA_SYNC_WAIT", "sometimes")
    with pytest.raises(ValidationError, match="KERNELJUDGE_CUDA_SYNC_WAIT must be one of auto, blocking"):
        EngineSection()


PROBE = ("import json, os; from sandbox_side.runtime import cuda_sync; "
         "print(json.dumps([cuda_sync.set_primary_wait_from_env(), cuda_sync.primary_wait()]))")


def _driver_loads() -> bool:
    import ctypes

    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


@pytest.mark.parametrize(("asked", "seen_on_a_gpu"), [(None, 0), ("auto", 0), ("blocking", 4), ("sometimes", 0)])
def test_a_process_sets_the_wait_it_is_told_or_says_why_not(asked, seen_on_a_gpu):
    """With a driver (the GPU machine) the primary context's flags read back as asked; without one (CI) the
    default stays and the runner's environment says why. `auto` never touches the driver; an unknown name is
    refused there too."""
    import json
    import os

    env = {key: value for key, value in os.environ.items() if key != "KJ_CUDA_SYNC_WAIT"}
    if asked is not None:
        env["KJ_CUDA_SYNC_WAIT"] = asked
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    reason, seen = json.loads(out.stdout)
    if asked == "sometimes":
        assert reason == "unknown wait 'sometimes'"
    elif asked == "blocking" and not _driver_loads():
        assert reason.startswith("no CUDA driver")
    else:
        assert reason is None
    assert seen == (seen_on_a_gpu if _driver_loads() else None)
