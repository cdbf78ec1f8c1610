import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void row_sum_atomic(const float* x, float* out, int rows, int cols) {
    int r = blockIdx.y;
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows && c < cols) atomicAdd(out + r, x[(int64_t)r * cols + c]);
}

void row_sum_into(torch::Tensor x, torch::Tensor out) {
    int rows = x.size(0), cols = x.size(1);
    dim3 grid((cols + 255) / 256, rows);
    row_sum_atomic<<<grid, 256, 0, at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), out.data_ptr<float>(), rows, cols);
}
"""

ext = load_inline(name="kj_row_sum_atomic", cpp_sources="void row_sum_into(torch::Tensor x, torch::Tensor out);",
                  cuda_sources=cuda_source, functions=["row_sum_into"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        out = torch.zeros(x.size(0), device=x.device, dtype=torch.float32)
        ext.row_sum_into(x, out)
        return out
