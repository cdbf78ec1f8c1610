"""Candidate builders for the policy tests: an honest Triton skeleton with a hole for one offence."""

from __future__ import annotations

from contract.requests import PolicyConfig
from contract.results import RuleHit
from contract.statuses import Backend
from tests.conftest import triton_candidate
from worker.engine.policy import check_candidate

ADD_KERNEL = '''
@triton.jit
def add_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(a_ptr + offs, mask=mask) + tl.load(b_ptr + offs, mask=mask), mask=mask)
'''


def indent(block: str, spaces: int) -> str:
    return "".join(" " * spaces + line + "\n" for line in block.strip("\n").splitlines())


def triton_add_candidate(forward: str = "", *, imports: str = "", module: str = "", init: str = "") -> str:
    """The honest Triton add candidate (tests/conftest.py's builder): `forward` runs before its launch,
    `imports` after the standard ones, `module` before ModelNew, `init` in ModelNew's __init__."""
    body = (f"out = torch.empty_like(a)\nn = out.numel()\n{forward}\n"
            "add_kernel[(triton.cdiv(n, 1024),)](a, b, out, n, BLOCK=1024)\nreturn out")
    imports = "import torch.nn as nn\n" + (imports + "\n" if imports else "")
    return triton_candidate(body, kernel=ADD_KERNEL, extra=imports, module=module, init=init, args="a, b")


CUDA_TEMPLATE = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
{includes}
__global__ void add_kernel(const float* a, const float* b, float* out, int64_t n) {{
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}}

torch::Tensor add(torch::Tensor a, torch::Tensor b) {{
    auto out = torch::empty_like(a);
    int64_t n = a.numel();
{body}
    add_kernel<<<(n + 255) / 256, 256, 0, at::cuda::getCurrentCUDAStream()>>>(
        a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}}
"""

ext = load_inline(name="t_add", cpp_sources="torch::Tensor add(torch::Tensor a, torch::Tensor b);",
                  cuda_sources=cuda_source, functions=["add"]{flags})


class ModelNew(nn.Module):
    def forward(self, a, b):
        return ext.add(a.contiguous(), b.contiguous())
'''


def cuda_candidate(body: str = "", *, includes: str = "", flags: str = "") -> str:
    return CUDA_TEMPLATE.format(includes=includes, body=indent(body, 4) if body else "", flags=flags)


def check(source: str, *, disabled: list[str] | None = None, backend: Backend | None = None) -> list[RuleHit]:
    return check_candidate(source, backend, PolicyConfig(disabled_rules=disabled or []))


def fired(source: str, **kwargs) -> set[str]:
    return {hit.rule.split("-", 1)[0] for hit in check(source, **kwargs)}
