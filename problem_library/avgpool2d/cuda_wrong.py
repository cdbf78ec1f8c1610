"""Off by one in the window's row loop (`kh < KSIZE - 1`): the last row of every 3x3 window is
left out of the sum."""

import torch
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = "torch::Tensor avgpool2d_f32(torch::Tensor x);"

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

constexpr int KSIZE = 3;
constexpr int STRIDE = 2;
constexpr int PAD = 1;
constexpr int THREADS = 256;

// One thread per output element; consecutive threads take consecutive output columns, so the
// loads of a warp are close together in each input row.
__global__ void avgpool2d_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n_out,
                                 int height, int width, int out_h, int out_w) {
    const int64_t idx = (int64_t)blockIdx.x * THREADS + threadIdx.x;
    if (idx >= n_out) return;
    const int ow = (int)(idx % out_w);
    const int oh = (int)((idx / out_w) % out_h);
    const int64_t plane = idx / ((int64_t)out_w * out_h);
    const float* src = x + plane * height * width;
    float total = 0.0f;
    #pragma unroll
    for (int kh = 0; kh < KSIZE - 1; ++kh) {
        const int ih = oh * STRIDE - PAD + kh;
        if (ih < 0 || ih >= height) continue;
        #pragma unroll
        for (int kw = 0; kw < KSIZE; ++kw) {
            const int iw = ow * STRIDE - PAD + kw;
            if (iw < 0 || iw >= width) continue;
            total += src[ih * width + iw];
        }
    }
    // The padding counts in the divisor (count_include_pad=True).
    y[idx] = total * (1.0f / (KSIZE * KSIZE));
}

torch::Tensor avgpool2d_f32(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32 && x.dim() == 4,
                "avgpool2d_f32: x must be a CUDA float32 (N, C, H, W) tensor");
    x = x.contiguous();
    const int height = (int)x.size(2);
    const int width = (int)x.size(3);
    const int out_h = (height + 2 * PAD - KSIZE) / STRIDE + 1;
    const int out_w = (width + 2 * PAD - KSIZE) / STRIDE + 1;
    auto y = torch::empty({x.size(0), x.size(1), out_h, out_w}, x.options());
    const int64_t n_out = y.numel();
    if (n_out == 0) return y;
    const int64_t blocks = (n_out + THREADS - 1) / THREADS;
    avgpool2d_kernel<<<(unsigned)blocks, THREADS, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), n_out, height, width, out_h, out_w);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_ext = load_inline(
    name="kj_lib_avgpool2d_wrong",
    cpp_sources=CPP_SOURCE,
    cuda_sources=CUDA_SOURCE,
    functions=["avgpool2d_f32"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(torch.nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.avgpool2d_f32(x)
