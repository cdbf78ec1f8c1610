"""Mean with Kahan-compensated summation of the block sums, in one program."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def kahan_mean(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    total = tl.sum(tl.zeros((BLOCK,), dtype=tl.float32), axis=0)
    compensation = total
    for start in range(0, n, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        value = tl.sum(tl.load(x_ptr + offs, mask=offs < n, other=0.0), axis=0) - compensation
        step = total + value
        compensation = (step - total) - value
        total = step
    tl.store(out_ptr, total / n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty(1, device=x.device, dtype=torch.float32)
        kahan_mean[(1,)](x, out, x.numel(), BLOCK=1024)
        return out
