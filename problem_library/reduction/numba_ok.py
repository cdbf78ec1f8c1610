import math

import torch
from numba import cuda, float32

THREADS = 64  # a power of two: the tree reduction halves it down to one lane


@cuda.jit
def row_l2_norm_kernel(x, y):
    row = cuda.blockIdx.x
    lane = cuda.threadIdx.x
    partial = cuda.shared.array(THREADS, float32)
    acc = float32(0.0)
    for col in range(lane, x.shape[1], THREADS):
        v = x[row, col]
        acc += v * v
    partial[lane] = acc
    cuda.syncthreads()
    step = THREADS // 2
    while step > 0:
        if lane < step:
            partial[lane] += partial[lane + step]
        cuda.syncthreads()
        step //= 2
    if lane == 0:
        y[row] = math.sqrt(partial[0])


class ModelNew(torch.nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        rows = x.shape[0]
        y = torch.empty((rows,), dtype=x.dtype, device=x.device)
        row_l2_norm_kernel[rows, THREADS](cuda.as_cuda_array(x), cuda.as_cuda_array(y))
        return y
