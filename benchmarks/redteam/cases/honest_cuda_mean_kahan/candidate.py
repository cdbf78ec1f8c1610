"""Mean by shared-memory tree sums per block of 1024 elements, then a Kahan-compensated sum of the
block sums (built without fast math, so the compensation is kept)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

// One block per 1024 elements: a shared-memory tree sum of each block's elements.
__global__ void block_sums(const float* x, float* partials, int64_t n) {
    __shared__ float sums[1024];
    int64_t i = blockIdx.x * 1024LL + threadIdx.x;
    sums[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int stride = 512; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) sums[threadIdx.x] += sums[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) partials[blockIdx.x] = sums[0];
}

// The partials, Kahan-compensated, by one thread (a few thousand values).
__global__ void kahan_mean(const float* partials, float* out, int count, int64_t n) {
    float total = 0.0f, compensation = 0.0f;
    for (int i = 0; i < count; ++i) {
        float value = partials[i] - compensation;
        float step = total + value;
        compensation = (step - total) - value;
        total = step;
    }
    out[0] = total / (float)n;
}

torch::Tensor mean(torch::Tensor x) {
    int64_t n = x.numel();
    int blocks = (int)((n + 1023) / 1024);
    auto partials = torch::empty({blocks}, x.options());
    auto out = torch::empty({1}, x.options());
    auto stream = at::cuda::getCurrentCUDAStream();
    block_sums<<<blocks, 1024, 0, stream>>>(x.data_ptr<float>(), partials.data_ptr<float>(), n);
    kahan_mean<<<1, 1, 0, stream>>>(partials.data_ptr<float>(), out.data_ptr<float>(), blocks, n);
    return out;
}
"""

ext = load_inline(name="kj_kahan_mean", cpp_sources="torch::Tensor mean(torch::Tensor x);", cuda_sources=cuda_source,
                  functions=["mean"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.mean(x.contiguous())
