"""Engine test helpers: real sandboxed evaluations on CPU (Triton under its interpreter)."""

from __future__ import annotations

import os
import shutil
import textwrap

import pytest

from worker.engine import evaluate
from worker.engine.settings import EngineSettings
from worker.models import EvalOptions, EvalRequest, EvalResult

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

TRITON_HEADER = textwrap.dedent('''
    import torch
    import triton
    import triton.language as tl
''')

SILU_KERNEL = textwrap.dedent('''
    @triton.jit
    def silu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        tl.store(y_ptr + offs, x * tl.sigmoid(x), mask=mask)
''')


def triton_candidate(forward_body: str, *, kernel: str = SILU_KERNEL, extra: str = "") -> str:
    """A Triton candidate whose forward is `forward_body` (indented by this function)."""
    body = textwrap.indent(textwrap.dedent(forward_body).strip(), " " * 8)
    return (TRITON_HEADER + extra + kernel
            + "\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n" + body + "\n")


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
    settings = EngineSettings.from_env()
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
