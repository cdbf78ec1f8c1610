"""Shared-memory tree reduction that halves s = blockDim.x / 2 each step assumes a power-of-two
block, but the kernel runs 192 threads: after the s = 3 step the partial in slot 2 is never
folded in, so about a third of each row's sum of squares is lost and every norm is too small."""

import torch
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = "torch::Tensor row_l2_norm(torch::Tensor x);"

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

// 6 warps per block.
constexpr int THREADS = 192;

__global__ void row_l2_norm_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t cols) {
    __shared__ float partial[THREADS];
    const float* xr = x + (int64_t)blockIdx.x * cols;
    float s = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
        const float v = xr[c];
        s = fmaf(v, v, s);
    }
    partial[threadIdx.x] = s;
    __syncthreads();
    for (unsigned stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) y[blockIdx.x] = sqrtf(partial[0]);
}

torch::Tensor row_l2_norm(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "row_l2_norm: x must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "row_l2_norm: x must be float32");
    TORCH_CHECK(x.dim() == 2, "row_l2_norm: x must be 2D (batch, dim)");
    x = x.contiguous();
    const int64_t rows = x.size(0);
    auto y = torch::empty({rows}, x.options());
    if (rows == 0) return y;
    row_l2_norm_kernel<<<(unsigned)rows, THREADS, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), x.size(1));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_ext = load_inline(
    name="kj_reduction_cuda_wrong",
    cpp_sources=CPP_SOURCE,
    cuda_sources=CUDA_SOURCE,
    functions=["row_l2_norm"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(torch.nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.row_l2_norm(x)
