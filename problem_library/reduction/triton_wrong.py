"""Loops over n_cols // BLOCK_SIZE blocks (rounding down), so the last partial block of each
row is skipped: when DIM is not a multiple of 1024 the tail's squares are missing and every
norm comes out too small (the load mask is there but never sees the tail)."""

import torch
import triton
import triton.language as tl


@triton.jit
def _row_l2_norm_kernel(x_ptr, y_ptr, n_cols, row_stride, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    row_ptr = x_ptr + row * row_stride
    offsets = tl.arange(0, BLOCK_SIZE)
    # Lane-wise partial sums, folded once at the end: fewer rounding steps than a scalar running sum.
    acc = tl.zeros((BLOCK_SIZE,), dtype=tl.float32)
    num_blocks = n_cols // BLOCK_SIZE
    for block in range(0, num_blocks):
        cols = block * BLOCK_SIZE + offsets
        x = tl.load(row_ptr + cols, mask=cols < n_cols, other=0.0)
        acc += x * x
    tl.store(y_ptr + row, tl.sqrt(tl.sum(acc, axis=0)))


class ModelNew(torch.nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        rows, cols = x.shape
        y = torch.empty((rows,), dtype=x.dtype, device=x.device)
        _row_l2_norm_kernel[(rows,)](x, y, cols, x.stride(0), BLOCK_SIZE=1024, num_warps=4)
        return y
