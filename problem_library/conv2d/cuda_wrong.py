"""Replicates the border instead of zero padding: out-of-image taps read the nearest edge pixel
(clamped coordinates), so every output on the image border is off."""

import torch
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = "torch::Tensor conv3x3_f32(torch::Tensor x, torch::Tensor w, torch::Tensor b);"

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

constexpr int TILE = 16;        // output tile of TILE x TILE pixels per block
constexpr int OC_PER_BLOCK = 8; // output channels per block, sharing the staged input tile

// The (TILE + 2)^2 input patch of one input channel is staged in shared memory and reused by the
// 9 taps of OC_PER_BLOCK output channels.
__global__ void conv3x3_kernel(const float* __restrict__ x, const float* __restrict__ w,
                               const float* __restrict__ b, float* __restrict__ y,
                               int in_channels, int out_channels, int height, int width) {
    __shared__ float patch[TILE + 2][TILE + 2];
    const int tiles_x = (width + TILE - 1) / TILE;
    const int tile_y0 = (blockIdx.x / tiles_x) * TILE;
    const int tile_x0 = (blockIdx.x % tiles_x) * TILE;
    const int oc0 = blockIdx.y * OC_PER_BLOCK;
    const int n = blockIdx.z;
    const int ty = threadIdx.y;
    const int tx = threadIdx.x;
    const int oh = tile_y0 + ty;
    const int ow = tile_x0 + tx;

    float acc[OC_PER_BLOCK];
    #pragma unroll
    for (int k = 0; k < OC_PER_BLOCK; ++k) acc[k] = 0.0f;

    for (int ic = 0; ic < in_channels; ++ic) {
        const float* plane = x + ((int64_t)n * in_channels + ic) * height * width;
        for (int i = ty * TILE + tx; i < (TILE + 2) * (TILE + 2); i += TILE * TILE) {
            const int py = i / (TILE + 2);
            const int px = i % (TILE + 2);
            const int ih = tile_y0 + py - 1;
            const int iw = tile_x0 + px - 1;
            patch[py][px] = plane[min(max(ih, 0), height - 1) * width + min(max(iw, 0), width - 1)];
        }
        __syncthreads();
        #pragma unroll
        for (int k = 0; k < OC_PER_BLOCK; ++k) {
            const int oc = oc0 + k;
            if (oc >= out_channels) break;
            const float* filt = w + ((int64_t)oc * in_channels + ic) * 9;
            float s = 0.0f;
            #pragma unroll
            for (int kh = 0; kh < 3; ++kh)
                #pragma unroll
                for (int kw = 0; kw < 3; ++kw) s += filt[kh * 3 + kw] * patch[ty + kh][tx + kw];
            acc[k] += s;
        }
        __syncthreads();
    }
    if (oh >= height || ow >= width) return;
    #pragma unroll
    for (int k = 0; k < OC_PER_BLOCK; ++k) {
        const int oc = oc0 + k;
        if (oc >= out_channels) break;
        y[(((int64_t)n * out_channels + oc) * height + oh) * width + ow] = acc[k] + b[oc];
    }
}

torch::Tensor conv3x3_f32(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32 && x.dim() == 4,
                "conv3x3_f32: x must be a CUDA float32 (N, C, H, W) tensor");
    TORCH_CHECK(w.dim() == 4 && w.size(1) == x.size(1) && w.size(2) == 3 && w.size(3) == 3,
                "conv3x3_f32: w must be (C_OUT, C_IN, 3, 3)");
    x = x.contiguous();
    w = w.contiguous();
    b = b.contiguous();
    const int n = (int)x.size(0);
    const int in_channels = (int)x.size(1);
    const int height = (int)x.size(2);
    const int width = (int)x.size(3);
    const int out_channels = (int)w.size(0);
    auto y = torch::empty({n, out_channels, height, width}, x.options());
    if (y.numel() == 0) return y;
    const dim3 block(TILE, TILE);
    const dim3 grid(((height + TILE - 1) / TILE) * ((width + TILE - 1) / TILE),
                    (out_channels + OC_PER_BLOCK - 1) / OC_PER_BLOCK, n);
    conv3x3_kernel<<<grid, block, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), w.data_ptr<float>(), b.data_ptr<float>(), y.data_ptr<float>(),
        in_channels, out_channels, height, width);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_ext = load_inline(
    name="kj_lib_conv2d_wrong",
    cpp_sources=CPP_SOURCE,
    cuda_sources=CUDA_SOURCE,
    functions=["conv3x3_f32"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(torch.nn.Module):
    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        # Same construction as the reference, so the parameters are drawn identically.
        self.conv = torch.nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.conv3x3_f32(x, self.conv.weight, self.conv.bias)
