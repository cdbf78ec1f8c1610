"""Trivial sources for real end-to-end evaluations on CPU (Triton runs in its interpreter)."""

REFERENCE = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x + 1


def get_inputs():
    return [torch.randn(1000)]


def get_init_inputs():
    return []
'''

TRITON_CANDIDATE = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_one_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + 1, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        add_one_kernel[(triton.cdiv(n, 256),)](x, out, n, BLOCK=256)
        return out
'''

WRONG_CANDIDATE = TRITON_CANDIDATE.replace("x + 1, mask", "x + 2, mask")

COMPLETION = "I will write a Triton kernel.\n\n```python\n" + TRITON_CANDIDATE + "```\n"

NO_CODE_COMPLETION = "I am not sure how to write this kernel, sorry."

FAST_OPTIONS = {"trials": 1, "timing": False}
