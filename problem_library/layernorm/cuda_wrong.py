"""One-pass variance, E[x^2] - E[x]^2, in fp32: for rows whose mean (~0.5) is large next to their
spread (variance 1e-4) the two terms cancel and the variance is off by ~10%."""

import torch
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = "torch::Tensor layernorm_f32(torch::Tensor x, torch::Tensor w, torch::Tensor b, double eps);"

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

constexpr int THREADS = 256;

// Sum over the block, returned to every thread (the scratch is reused, hence the barriers).
__device__ float block_sum_all(float v) {
    __shared__ float warp_sums[THREADS / 32];
    __shared__ float total;
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    const int lane = threadIdx.x % 32;
    const int warp = threadIdx.x / 32;
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < THREADS / 32 ? warp_sums[lane] : 0.0f;
        for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
        if (lane == 0) total = v;
    }
    __syncthreads();
    const float result = total;
    __syncthreads();
    return result;
}

// One block per row, one pass for both moments.
__global__ void layernorm_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                 const float* __restrict__ b, float* __restrict__ y, int n_cols, float eps) {
    const float* row = x + (int64_t)blockIdx.x * n_cols;
    float* out = y + (int64_t)blockIdx.x * n_cols;
    float s = 0.0f;
    float sq = 0.0f;
    for (int i = threadIdx.x; i < n_cols; i += THREADS) {
        s += row[i];
        sq += row[i] * row[i];
    }
    const float mean = block_sum_all(s) / n_cols;
    const float var = block_sum_all(sq) / n_cols - mean * mean;
    const float rstd = rsqrtf(fmaxf(var, 0.0f) + eps);
    for (int i = threadIdx.x; i < n_cols; i += THREADS) out[i] = (row[i] - mean) * rstd * w[i] + b[i];
}

torch::Tensor layernorm_f32(torch::Tensor x, torch::Tensor w, torch::Tensor b, double eps) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32 && x.dim() == 2,
                "layernorm_f32: x must be a CUDA float32 (rows, cols) tensor");
    x = x.contiguous();
    w = w.contiguous();
    b = b.contiguous();
    auto y = torch::empty_like(x);
    if (x.numel() == 0) return y;
    layernorm_kernel<<<(unsigned)x.size(0), THREADS, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), w.data_ptr<float>(), b.data_ptr<float>(), y.data_ptr<float>(), (int)x.size(1), (float)eps);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_ext = load_inline(
    name="kj_lib_layernorm_wrong",
    cpp_sources=CPP_SOURCE,
    cuda_sources=CUDA_SOURCE,
    functions=["layernorm_f32"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(torch.nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        # Same construction and draws as the reference, so the parameters are identical.
        self.norm = torch.nn.LayerNorm(hidden, eps=1e-5)
        with torch.no_grad():
            self.norm.weight.normal_(1.0, 0.2)
            self.norm.bias.normal_(0.0, 0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.layernorm_f32(x, self.norm.weight, self.norm.bias, self.norm.eps)
