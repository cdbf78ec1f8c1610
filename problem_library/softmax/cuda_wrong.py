"""One warp per row, reduced with __shfl_down_sync but never broadcast: only lane 0 ends up
with the true row max and sum, the other lanes normalise their columns with partial ones."""

import torch
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = "torch::Tensor row_softmax(torch::Tensor x);"

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cmath>

constexpr int WARPS_PER_BLOCK = 8;

__global__ void row_softmax_kernel(const float* __restrict__ x, float* __restrict__ y,
                                   int64_t rows, int64_t cols) {
    const int lane = threadIdx.x % 32;
    const int64_t row = (int64_t)blockIdx.x * WARPS_PER_BLOCK + threadIdx.x / 32;
    if (row >= rows) return;
    const float* xr = x + row * cols;
    float* yr = y + row * cols;

    float m = -INFINITY;
    for (int64_t c = lane; c < cols; c += 32) m = fmaxf(m, xr[c]);
    for (int offset = 16; offset > 0; offset >>= 1)
        m = fmaxf(m, __shfl_down_sync(0xffffffffu, m, offset));

    float s = 0.0f;
    for (int64_t c = lane; c < cols; c += 32) s += expf(xr[c] - m);
    for (int offset = 16; offset > 0; offset >>= 1)
        s += __shfl_down_sync(0xffffffffu, s, offset);

    const float inv = 1.0f / s;
    for (int64_t c = lane; c < cols; c += 32) yr[c] = expf(xr[c] - m) * inv;
}

torch::Tensor row_softmax(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "row_softmax: x must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "row_softmax: x must be float32");
    TORCH_CHECK(x.dim() == 2, "row_softmax: x must be 2D (rows, cols)");
    x = x.contiguous();
    auto y = torch::empty_like(x);
    const int64_t rows = x.size(0);
    const int64_t cols = x.size(1);
    if (rows == 0 || cols == 0) return y;
    const unsigned blocks = (unsigned)((rows + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK);
    row_softmax_kernel<<<blocks, WARPS_PER_BLOCK * 32, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), rows, cols);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_ext = load_inline(
    name="kj_softmax_cuda_wrong",
    cpp_sources=CPP_SOURCE,
    cuda_sources=CUDA_SOURCE,
    functions=["row_softmax"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(torch.nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.row_softmax(x)
