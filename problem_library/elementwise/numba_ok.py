import math

import numpy as np
import torch
from numba import cuda

THREADS = 128
# Each thread handles this many elements, one grid apart (a grid-stride loop): loads stay coalesced.
ITEMS_PER_THREAD = 8


@cuda.jit
def silu_affine_kernel(x, y, n, scale, shift):
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        v = x[i]
        y[i] = v / (1.0 + math.exp(-v)) * scale + shift


class ModelNew(torch.nn.Module):
    def __init__(self, scale: float, shift: float):
        super().__init__()
        # float32 scalars keep the kernel's arithmetic in fp32 on the GPU.
        self.scale = np.float32(scale)
        self.shift = np.float32(shift)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        per_block = THREADS * ITEMS_PER_THREAD
        blocks = max(1, (n + per_block - 1) // per_block)
        silu_affine_kernel[blocks, THREADS](cuda.as_cuda_array(x), cuda.as_cuda_array(y), n, self.scale, self.shift)
        return y
