"""Engine test helpers: real sandboxed evaluations on CPU (Triton under its interpreter)."""

from __future__ import annotations

import os
import shutil
import textwrap

import pytest

from contract.requests import EvalOptions, EvalRequest
from contract.results import EvalResult

# The Triton candidate builder and the SiLU kernel it writes by default are shared with the policy tests
# (tests/conftest.py); the engine tests take them from here, with the SiLU problem.
from tests.conftest import SILU_KERNEL as SILU_KERNEL
from tests.conftest import TRITON_HEADER as TRITON_HEADER
from tests.conftest import triton_candidate as triton_candidate
from worker.engine import evaluate
from worker.engine.engine_settings import EngineSettings

SILU_REFERENCE = textwrap.dedent('''
    import torch
    N = 1000

    class Model(torch.nn.Module):
        def forward(self, x):
            return x * torch.sigmoid(x)

    def get_inputs():
        return [torch.randn(N)]

    def get_init_inputs():
        return []
''')

HONEST_SILU = triton_candidate('''
    y = torch.empty_like(x)
    n = x.numel()
    silu_kernel[(triton.cdiv(n, 256),)](x, y, n, BLOCK=256)
    return y
''')


@pytest.fixture
def settings(tmp_path) -> EngineSettings:
    if shutil.which("bwrap") is None:
        pytest.fail("bubblewrap is required for the engine tests: apt-get install bubblewrap")
    settings = EngineSettings.configured()
    settings.work_root = tmp_path / "work"
    if not os.environ.get("KERNELJUDGE_DATA_DIR"):
        # Builds are cached per candidate source; a shared data dir lets GPU runs reuse them.
        settings.build_cache = tmp_path / "cache"
    settings.cpu_threads = 1
    return settings


@pytest.fixture
def run_eval(settings):
    def run(reference: str, candidate: str, **options) -> EvalResult:
        options.setdefault("timing", False)
        request = EvalRequest(reference=reference, candidate=candidate, options=EvalOptions(**options))
        return evaluate(request, settings=settings)

    return run
