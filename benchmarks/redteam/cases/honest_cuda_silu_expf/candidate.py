"""SiLU and its affine epilogue fused in one kernel, with the fast intrinsics __expf and __fdividef:
fast math at the problem's own precision (a few ulps), not lower precision."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void silu_affine(const float* x, float* y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        y[i] = __fdividef(v, 1.0f + __expf(-v)) * 1.5f - 0.25f;
    }
}

torch::Tensor silu_affine_forward(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int64_t n = x.numel();
    silu_affine<<<(int)((n + 255) / 256), 256, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""

ext = load_inline(name="kj_silu_expf", cpp_sources="torch::Tensor silu_affine_forward(torch::Tensor x);",
                  cuda_sources=cuda_source, functions=["silu_affine_forward"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.silu_affine_forward(x.contiguous())
