import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAStream.h>

__global__ void row_sum(const float* x, float* out, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float acc = 0.0f;
    for (int c = 0; c < cols; ++c) acc += x[(int64_t)r * cols + c];
    out[r] = acc;
}

// Splits the rows over two pool streams, each ordered after the caller's stream, and makes
// the caller's stream wait for both before returning: nothing escapes the caller's timing.
torch::Tensor row_sum_two_streams(torch::Tensor x) {
    int rows = x.size(0), cols = x.size(1);
    auto out = torch::empty({rows}, x.options());
    auto current = at::cuda::getCurrentCUDAStream();
    cudaEvent_t ready, done[2];
    cudaEventCreateWithFlags(&ready, cudaEventDisableTiming);
    cudaEventRecord(ready, current.stream());
    int half = rows / 2;
    for (int part = 0; part < 2; ++part) {
        auto side = at::cuda::getStreamFromPool();
        cudaStreamWaitEvent(side.stream(), ready, 0);
        int first = part * half, count = part == 0 ? half : rows - half;
        row_sum<<<(count + 127) / 128, 128, 0, side.stream()>>>(
            x.data_ptr<float>() + (int64_t)first * cols, out.data_ptr<float>() + first, count, cols);
        cudaEventCreateWithFlags(&done[part], cudaEventDisableTiming);
        cudaEventRecord(done[part], side.stream());
        cudaStreamWaitEvent(current.stream(), done[part], 0);
    }
    cudaEventDestroy(ready);
    cudaEventDestroy(done[0]);
    cudaEventDestroy(done[1]);
    return out;
}
"""

ext = load_inline(name="kj_row_sum_streams", cpp_sources="torch::Tensor row_sum_two_streams(torch::Tensor x);",
                  cuda_sources=cuda_source, functions=["row_sum_two_streams"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.row_sum_two_streams(x.contiguous())
