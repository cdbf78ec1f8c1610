"""Counts the K tiles as K / BK (rounding down) instead of rounding up, so when K is not a
multiple of 16 the last partial K tile is never accumulated: every entry of C misses its last
K % 16 products."""

import torch
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = "torch::Tensor matmul_f32(torch::Tensor a, torch::Tensor b);"

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

// 64x64 tile of C per block, K consumed 16 at a time through shared memory;
// 256 threads, each owning a 4x4 patch of the tile in registers.
constexpr int BM = 64;
constexpr int BN = 64;
constexpr int BK = 16;
constexpr int TM = 4;
constexpr int TN = 4;
constexpr int THREADS = (BM / TM) * (BN / TN);

__global__ void __launch_bounds__(THREADS)
matmul_f32_kernel(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                  int M, int N, int K) {
    // A is stored transposed (k-major) so the inner loop reads a column of A contiguously;
    // the +4 pad spreads the transposed stores over more banks.
    __shared__ float As[BK][BM + 4];
    __shared__ float Bs[BK][BN];

    const int tid = threadIdx.x;
    const int tx = tid % (BN / TN);
    const int ty = tid / (BN / TN);
    const int row0 = blockIdx.y * BM;
    const int col0 = blockIdx.x * BN;

    float acc[TM][TN];
    #pragma unroll
    for (int i = 0; i < TM; ++i)
        #pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

    const int num_tiles = K / BK;
    for (int t = 0; t < num_tiles; ++t) {
        const int k0 = t * BK;
        #pragma unroll
        for (int l = 0; l < (BM * BK) / THREADS; ++l) {
            const int idx = tid + l * THREADS;
            const int r = idx / BK;
            const int c = idx % BK;
            const int gr = row0 + r;
            const int gk = k0 + c;
            As[c][r] = (gr < M && gk < K) ? A[(int64_t)gr * K + gk] : 0.0f;
        }
        #pragma unroll
        for (int l = 0; l < (BK * BN) / THREADS; ++l) {
            const int idx = tid + l * THREADS;
            const int r = idx / BN;
            const int c = idx % BN;
            const int gk = k0 + r;
            const int gc = col0 + c;
            Bs[r][c] = (gk < K && gc < N) ? B[(int64_t)gk * N + gc] : 0.0f;
        }
        __syncthreads();

        #pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            float a_frag[TM];
            float b_frag[TN];
            #pragma unroll
            for (int i = 0; i < TM; ++i) a_frag[i] = As[kk][ty * TM + i];
            #pragma unroll
            for (int j = 0; j < TN; ++j) b_frag[j] = Bs[kk][tx * TN + j];
            #pragma unroll
            for (int i = 0; i < TM; ++i)
                #pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a_frag[i], b_frag[j], acc[i][j]);
        }
        __syncthreads();
    }

    #pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int r = row0 + ty * TM + i;
        if (r >= M) continue;
        #pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int c = col0 + tx * TN + j;
            if (c < N) C[(int64_t)r * N + c] = acc[i][j];
        }
    }
}

torch::Tensor matmul_f32(torch::Tensor a, torch::Tensor b) {
    TORCH_CHECK(a.is_cuda() && b.is_cuda(), "matmul_f32: inputs must be CUDA tensors");
    TORCH_CHECK(a.scalar_type() == torch::kFloat32 && b.scalar_type() == torch::kFloat32,
                "matmul_f32: inputs must be float32");
    TORCH_CHECK(a.dim() == 2 && b.dim() == 2, "matmul_f32: inputs must be 2D");
    TORCH_CHECK(a.size(1) == b.size(0), "matmul_f32: inner dimensions differ");
    a = a.contiguous();
    b = b.contiguous();
    const int M = (int)a.size(0);
    const int K = (int)a.size(1);
    const int N = (int)b.size(1);
    auto c = torch::empty({M, N}, a.options());
    if (M == 0 || N == 0) return c;
    dim3 grid((N + BN - 1) / BN, (M + BM - 1) / BM);
    matmul_f32_kernel<<<grid, THREADS, 0, at::cuda::getCurrentCUDAStream()>>>(
        a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), M, N, K);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return c;
}
"""

_ext = load_inline(
    name="kj_matmul_cuda_wrong",
    cpp_sources=CPP_SOURCE,
    cuda_sources=CUDA_SOURCE,
    functions=["matmul_f32"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(torch.nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return _ext.matmul_f32(a, b)
