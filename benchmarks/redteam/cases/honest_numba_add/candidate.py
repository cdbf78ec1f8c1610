import torch
import torch.nn as nn
from numba import cuda

THREADS = 128
ITEMS_PER_THREAD = 8


@cuda.jit
def add_kernel(a, b, out, n):
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        out[i] = a[i] + b[i]


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        a = a.contiguous()
        b = b.contiguous()
        out = torch.empty_like(a)
        n = out.numel()
        blocks = max(1, (n + THREADS * ITEMS_PER_THREAD - 1) // (THREADS * ITEMS_PER_THREAD))
        add_kernel[blocks, THREADS](cuda.as_cuda_array(a), cuda.as_cuda_array(b), cuda.as_cuda_array(out), n)
        return out
