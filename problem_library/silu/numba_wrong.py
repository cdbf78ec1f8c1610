"""Clamps x to [-8, 8] before the exponential (a "safe exp" guard): sigmoid saturates differently
from the true one beyond the clamp, so every output with x < -8 is several times too large
(randn * 4 inputs put about 2% of the values there)."""

import math

import torch
from numba import cuda

THREADS = 128
ITEMS_PER_THREAD = 8
CLAMP = 8.0


@cuda.jit
def silu_kernel(x, y, n):
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        v = x[i]
        safe = min(max(v, -CLAMP), CLAMP)
        y[i] = v / (1.0 + math.exp(-safe))


class ModelNew(torch.nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        per_block = THREADS * ITEMS_PER_THREAD
        blocks = max(1, (n + per_block - 1) // per_block)
        silu_kernel[blocks, THREADS](x.view(-1), y.view(-1), n)
        return y
