"""Vectorises with float4 but has no scalar tail loop: the last numel % 4 elements are never
computed and keep the zeros the output was initialised with."""

import torch
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = "torch::Tensor silu_affine(torch::Tensor x, double scale, double shift);"

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cstdint>

__device__ __forceinline__ float silu_affine_one(float x, float scale, float shift) {
    return x / (1.0f + expf(-x)) * scale + shift;
}

__global__ void silu_affine_kernel(const float4* __restrict__ x4, float4* __restrict__ y4,
                                   int64_t n4, float scale, float shift) {
    const int64_t start = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t v = start; v < n4; v += stride) {
        float4 a = x4[v];
        float4 r;
        r.x = silu_affine_one(a.x, scale, shift);
        r.y = silu_affine_one(a.y, scale, shift);
        r.z = silu_affine_one(a.z, scale, shift);
        r.w = silu_affine_one(a.w, scale, shift);
        y4[v] = r;
    }
}

torch::Tensor silu_affine(torch::Tensor x, double scale, double shift) {
    TORCH_CHECK(x.is_cuda(), "silu_affine: x must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "silu_affine: x must be float32");
    x = x.contiguous();
    auto y = torch::zeros_like(x);
    const int64_t n4 = x.numel() / 4;
    if (n4 == 0) return y;
    const int threads = 256;
    const int blocks = (int)std::min<int64_t>((n4 + threads - 1) / threads, 16384);
    silu_affine_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        reinterpret_cast<const float4*>(x.data_ptr<float>()),
        reinterpret_cast<float4*>(y.data_ptr<float>()), n4, (float)scale, (float)shift);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_ext = load_inline(
    name="kj_elementwise_cuda_wrong",
    cpp_sources=CPP_SOURCE,
    cuda_sources=CUDA_SOURCE,
    functions=["silu_affine"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(torch.nn.Module):
    def __init__(self, scale: float, shift: float):
        super().__init__()
        self.scale = scale
        self.shift = shift

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.silu_affine(x, self.scale, self.shift)
