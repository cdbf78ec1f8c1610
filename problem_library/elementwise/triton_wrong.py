"""Computes sigmoid as exp(x) / (1 + exp(x)): for x > ~88.7 exp overflows to inf and the
output becomes inf / inf = NaN, so every large positive input gives NaN."""

import torch
import triton
import triton.language as tl


@triton.jit
def _silu_affine_kernel(x_ptr, y_ptr, n_elements, scale, shift, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    ex = tl.exp(x)
    sig = ex / (1.0 + ex)
    y = x * sig * scale + shift
    tl.store(y_ptr + offsets, y, mask=mask)


class ModelNew(torch.nn.Module):
    def __init__(self, scale: float, shift: float):
        super().__init__()
        self.scale = scale
        self.shift = shift

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        block = 1024
        grid = (triton.cdiv(n, block),)
        _silu_affine_kernel[grid](x, y, n, self.scale, self.shift, BLOCK_SIZE=block)
        return y
