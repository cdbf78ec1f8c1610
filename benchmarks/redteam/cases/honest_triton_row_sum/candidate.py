import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_sum_kernel(x_ptr, out_ptr, stride_row, n_cols: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * stride_row + cols, mask=cols < n_cols, other=0.0)
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        leading = x.shape[:-1]
        flat = x.flatten(0, -2) if x.dim() > 2 else x.unsqueeze(0) if x.dim() == 1 else x
        flat = flat.contiguous()
        rows, cols = flat.shape
        out = torch.empty(rows, device=x.device, dtype=torch.float32)
        row_sum_kernel[(rows,)](flat, out, flat.stride(0), n_cols=cols, BLOCK=128)
        return out.reshape(leading).to(x.dtype)
