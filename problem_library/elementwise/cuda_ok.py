import torch
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = "torch::Tensor silu_affine(torch::Tensor x, double scale, double shift);"

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cstdint>

__device__ __forceinline__ float silu_affine_one(float x, float scale, float shift) {
    // x / (1 + exp(-x)) saturates cleanly: exp(-x) = inf gives -0, never inf / inf.
    return x / (1.0f + expf(-x)) * scale + shift;
}

// Float4 body over the first n4 * 4 elements, then a scalar tail for the last n % 4.
__global__ void silu_affine_kernel(const float* __restrict__ x, float* __restrict__ y,
                                   int64_t n, int64_t n4, float scale, float shift) {
    const int64_t start = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    float4* y4 = reinterpret_cast<float4*>(y);
    for (int64_t v = start; v < n4; v += stride) {
        float4 a = x4[v];
        float4 r;
        r.x = silu_affine_one(a.x, scale, shift);
        r.y = silu_affine_one(a.y, scale, shift);
        r.z = silu_affine_one(a.z, scale, shift);
        r.w = silu_affine_one(a.w, scale, shift);
        y4[v] = r;
    }
    for (int64_t i = n4 * 4 + start; i < n; i += stride) {
        y[i] = silu_affine_one(x[i], scale, shift);
    }
}

torch::Tensor silu_affine(torch::Tensor x, double scale, double shift) {
    TORCH_CHECK(x.is_cuda(), "silu_affine: x must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "silu_affine: x must be float32");
    x = x.contiguous();
    auto y = torch::empty_like(x);
    const int64_t n = x.numel();
    if (n == 0) return y;
    const bool aligned = (reinterpret_cast<uintptr_t>(x.data_ptr<float>()) % 16 == 0) &&
                         (reinterpret_cast<uintptr_t>(y.data_ptr<float>()) % 16 == 0);
    // Misaligned views fall back to the scalar loop for every element.
    const int64_t n4 = aligned ? n / 4 : 0;
    const int threads = 256;
    const int64_t work = n4 > 0 ? n4 : n;
    const int blocks = (int)std::min<int64_t>((work + threads - 1) / threads, 16384);
    silu_affine_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), n, n4, (float)scale, (float)shift);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_ext = load_inline(
    name="kj_elementwise_cuda_ok",
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
