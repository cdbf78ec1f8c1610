"""Mean in one program: 1024 float32 accumulators, each a sequential sum over every 1024th element (a
grid-stride loop's per-thread sums), then a tree sum of the accumulators."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def lane_mean(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, n, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr, tl.sum(acc, axis=0) / n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty(1, device=x.device, dtype=torch.float32)
        lane_mean[(1,)](x, out, x.numel(), BLOCK=1024)
        return out
