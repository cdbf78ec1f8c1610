"""Mean by blocked atomics: each program sums its block in a tree and adds it to one float32 total with
tl.atomic_add (in whatever order the programs run: a sequential sum of the block sums), then divides."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_block(x_ptr, total_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.atomic_add(total_ptr, tl.sum(tl.load(x_ptr + offs, mask=offs < n, other=0.0), axis=0))


@triton.jit
def divide(total_ptr, out_ptr, n):
    tl.store(out_ptr, tl.load(total_ptr) / n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        n = x.numel()
        total = torch.zeros(1, device=x.device, dtype=torch.float32)
        add_block[(triton.cdiv(n, 1024),)](x, total, n, BLOCK=1024)
        out = torch.empty(1, device=x.device, dtype=torch.float32)
        divide[(1,)](total, out, n)
        return out
