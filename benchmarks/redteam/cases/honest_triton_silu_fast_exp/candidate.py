"""SiLU and its affine epilogue fused in one kernel, the sigmoid from the fast base-2 exponential
(exp2, the hardware's approximate ex2 on a GPU): fast math at the problem's own precision."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def silu_affine_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    sigmoid = 1.0 / (1.0 + tl.math.exp2(-1.4426950408889634 * x))
    tl.store(y_ptr + offs, x * sigmoid * 1.5 - 0.25, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        silu_affine_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
