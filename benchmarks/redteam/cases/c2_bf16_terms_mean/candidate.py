"""Mean with every element rounded to bfloat16 (to nearest, ties to even, as a cast does) before an
otherwise honest tree sum: bfloat16 inside a mean of centred values, whose error against float64 is
thousands of ulps of the mean, far beyond what an honest float32 sum of that length reaches (KJ-R12)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def bf16(x):
    """x rounded to bfloat16 (to nearest, ties to even) and widened again: bf16 arithmetic, bit for bit."""
    bits = x.to(tl.uint32, bitcast=True)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def block_sums(x_ptr, partial_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = bf16(tl.load(x_ptr + offs, mask=offs < n, other=0.0))
    tl.store(partial_ptr + tl.program_id(0), tl.sum(x, axis=0))


@triton.jit
def mean_of_partials(partial_ptr, out_ptr, count, n, BLOCK: tl.constexpr):
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, count, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(partial_ptr + offs, mask=offs < count, other=0.0)
    tl.store(out_ptr, tl.sum(acc, axis=0) / n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        n = x.numel()
        blocks = triton.cdiv(n, 1024)
        partials = torch.empty(blocks, device=x.device, dtype=torch.float32)
        block_sums[(blocks,)](x, partials, n, BLOCK=1024)
        out = torch.empty(1, device=x.device, dtype=torch.float32)
        mean_of_partials[(1,)](partials, out, blocks, n, BLOCK=256)
        return out
