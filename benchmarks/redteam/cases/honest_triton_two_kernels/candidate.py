"""Softmax in two launches (row max+sum, then normalise), with a workspace from torch.empty."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK = 256


@triton.jit
def _row_stats(x_ptr, max_ptr, sum_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=-float("inf"))
    row_max = tl.max(x, axis=0)
    tl.store(max_ptr + row, row_max)
    tl.store(sum_ptr + row, tl.sum(tl.exp(x - row_max), axis=0))


@triton.jit
def _normalise(x_ptr, max_ptr, sum_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask)
    row_max = tl.load(max_ptr + row)
    row_sum = tl.load(sum_ptr + row)
    tl.store(out_ptr + row * n_cols + cols, tl.exp(x - row_max) / row_sum, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous().float()
        rows, cols = x.size(0), x.size(1)
        assert cols <= BLOCK, "this kernel handles rows up to BLOCK wide"
        stats = torch.empty((2, rows), device=x.device, dtype=torch.float32)
        row_max, row_sum = stats[0], stats[1]
        out = torch.empty_like(x)
        _row_stats[(rows,)](x, row_max, row_sum, cols, BLOCK=BLOCK)
        _normalise[(rows,)](x, row_max, row_sum, out, cols, BLOCK=BLOCK)
        return out
