"""The start-up check that proves the real path: can this worker judge one evaluation?

The sandbox probe (sandbox/selfcheck.py) shows that bubblewrap starts, the GPU works inside, the
network does not and no server variable is visible. That is not enough: a server whose packages
live outside the Python prefixes the sandbox mounts (a `pip install --target` folder on PYTHONPATH,
the user site) passes it, then fails every job inside the judge. So, before a worker counts as
ready, one tiny reference and candidate go through the real engine (a judge, a candidate sandbox,
compare, trace, timing): a Triton kernel (on CPU under Triton's interpreter), or plain torch where
Triton is not installed. The verdict must be `ok`. A failure says what failed and what to fix;
`python_roots.unreachable_modules` names packages the sandbox cannot import.

`StartupCheckRun` runs it in the background (the embedded server: /v1/ready stays false until it
passes); `run_startup_check` runs it in the caller's thread (Celery workers, before they consume).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from dataclasses import dataclass

from contract.requests import EvalOptions, EvalRequest
from contract.statuses import Backend, Device, EvalStatus
from worker.engine.engine_settings import EngineSettings
from worker.engine.sandbox.python_roots import describe_unreachable, module_location, unreachable_modules

log = logging.getLogger(__name__)

REFERENCE = '''
import torch

class Model(torch.nn.Module):
    def forward(self, x):
        return x * 2.0 + 1.0

def get_inputs():
    return [torch.randn(4096)]

def get_init_inputs():
    return []
'''

TRITON_CANDIDATE = '''
import torch
import triton
import triton.language as tl

@triton.jit
def scale_shift_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 2.0 + 1.0, mask=mask)

class ModelNew(torch.nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        n = x.numel()
        scale_shift_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
        return y
'''

TORCH_CANDIDATE = '''
import torch

class ModelNew(torch.nn.Module):
    def forward(self, x):
        return torch.addcmul(torch.ones_like(x), x, torch.full_like(x, 2.0))
'''


@dataclass(frozen=True)
class StartupCheck:
    ok: bool
    message: str  # "ok", or what failed and what to do about it
    seconds: float


def check_request(device: Device) -> EvalRequest:
    """The tiny evaluation: Triton when installed, else plain torch (judged as a PyTorch rewrite)."""
    triton = module_location("triton") is not None
    options = EvalOptions(device=device, trials=1, seed=1, compile_baseline=False, timing_budget_s=0.5,
                          timing_min_runs=3, timing_max_runs=50, backend=None if triton else Backend.pytorch)
    return EvalRequest(reference=REFERENCE, candidate=TRITON_CANDIDATE if triton else TORCH_CANDIDATE,
                       options=options)


def run_startup_check(settings: EngineSettings, device: Device) -> StartupCheck:
    """One evaluation end to end through the judge and a candidate sandbox, plus the package check."""
    from worker.engine.evaluation import evaluate

    started = time.monotonic()
    # Its judge is not kept in the worker's reference cache (a cache of no entries is its own).
    own = dataclasses.replace(settings, reference_cache_entries=0, gpu_schedule=None)
    problems = []
    try:
        result = evaluate(check_request(device), settings=own)
    except Exception as exc:  # noqa: BLE001 - an engine failure is exactly what this check reports
        log.exception("the start-up evaluation failed inside the engine")
        problems.append(f"the start-up evaluation failed inside the engine: {type(exc).__name__}: {exc}")
    else:
        if result.status != EvalStatus.ok:
            error = result.error
            detail = f"{error.kind}: {error.message}" if error else "no error was reported"
            problems.append(f"a tiny reference and candidate, known to be correct, got `{result.status.value}` "
                            f"on {device.value} instead of `ok` ({detail})")
    unreachable = unreachable_modules()
    if unreachable:
        problems.append(describe_unreachable(unreachable))
    seconds = time.monotonic() - started
    if problems:
        return StartupCheck(False, "; ".join(problems), seconds)
    return StartupCheck(True, "ok", seconds)


class StartupCheckRun:
    """The check running in a background thread, once per GPU the service's lanes use (each lane's sandboxes
    see only its GPU: on two H100s the second lane's judges could not, and a check on every GPU at once
    passed); `state` is what /v1/ready reports."""

    def __init__(self, settings: EngineSettings, device: Device, gpus: list[int] | None = None) -> None:
        self.result: StartupCheck | None = None
        self.gpus: list[int | None] = list(gpus) if gpus else [None]
        self._thread = threading.Thread(target=self._run, args=(settings, device), name="startup-check",
                                        daemon=True)

    def start(self) -> StartupCheckRun:
        self._thread.start()
        return self

    def _run(self, settings: EngineSettings, device: Device) -> None:
        checks = []
        for gpu in self.gpus:
            lane = dataclasses.replace(settings, gpu_index=gpu) if gpu is not None else settings
            check = run_startup_check(lane, device)
            checks.append(check if gpu is None or check.ok else
                          StartupCheck(False, f"GPU {gpu}: {check.message}", check.seconds))
        failed = [check.message for check in checks if not check.ok]
        result = StartupCheck(not failed, "; ".join(failed) or "ok", sum(check.seconds for check in checks))
        if result.ok:
            log.info("start-up check passed in %.1fs: a tiny evaluation went through the judge and a "
                     "candidate sandbox%s", result.seconds,
                     f" on each of GPUs {self.gpus}" if self.gpus != [None] else "")
        else:
            log.error("start-up check FAILED, this server is not ready (/v1/ready is false): %s", result.message)
        self.result = result

    def wait(self, timeout_s: float | None = None) -> StartupCheck | None:
        self._thread.join(timeout_s)
        return self.result

    @property
    def ok(self) -> bool:
        return self.result is not None and self.result.ok

    @property
    def state(self) -> str:
        if self.result is None:
            return "running"
        return "ok" if self.result.ok else f"failed: {self.result.message}"
