"""Small load_inline candidates written for these tests, one per case the split must handle."""

from __future__ import annotations

HEADER = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

'''

FOOTER = '''
class ModelNew(nn.Module):
    def forward(self, x):
        return ext.{function}(x)
'''


def candidate(name: str, cuda_source: str, cpp_source: str, function: str, **options: str) -> str:
    extra = "".join(f", {key}={value}" for key, value in options.items())
    return (HEADER + f'cuda_source = """{cuda_source}"""\n\ncpp_source = "{cpp_source}"\n\n'
            f'ext = load_inline(name="{name}", cpp_sources=cpp_source, cuda_sources=cuda_source, '
            f'functions=["{function}"]{extra})\n' + FOOTER.format(function=function))


PLAIN = candidate("kj_test_plain", '''
#include <torch/extension.h>
#include <cuda_runtime.h>
#define BLOCK 256

struct Scale { float factor; };

__device__ __forceinline__ float twice(float v, Scale s) { return v * s.factor; }

__global__ void twice_kernel(const float* __restrict__ in, float* out, int n, Scale s) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = twice(in[i], s);
}

torch::Tensor twice_cuda(torch::Tensor x) {
    auto out = torch::empty_like(x);
    int n = x.numel();
    twice_kernel<<<(n + BLOCK - 1) / BLOCK, BLOCK>>>(x.data_ptr<float>(), out.data_ptr<float>(), n, Scale{2.0f});
    return out;
}
''', "torch::Tensor twice_cuda(torch::Tensor x);", "twice_cuda", extra_cflags='["-O3"]')

# A kernel template that only the host code instantiates (through AT_DISPATCH, Half included),
# launched on torch's current stream with dynamic shared memory.
DISPATCH_HALF = candidate("kj_test_dispatch", '''
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

template <typename scalar_t>
__global__ void add_one_kernel(const scalar_t* in, scalar_t* out, int64_t n) {
    extern __shared__ char scratch[];
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] + scalar_t(1);
}

torch::Tensor add_one(torch::Tensor x) {
    auto out = torch::empty_like(x);
    const int64_t n = x.numel();
    AT_DISPATCH_FLOATING_TYPES_AND_HALF(x.scalar_type(), "add_one", ([&] {
        add_one_kernel<scalar_t><<<(n + 255) / 256, 256, 16, c10::cuda::getCurrentCUDAStream()>>>(
            x.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), n);
    }));
    return out;
}
''', "torch::Tensor add_one(torch::Tensor x);", "add_one")

ACCESSOR_HOST_TEMPLATE = candidate("kj_test_accessor", '''
#include <torch/extension.h>

template <typename scalar_t>
__global__ void rows_kernel(torch::PackedTensorAccessor32<scalar_t, 2, torch::RestrictPtrTraits> x,
                            torch::PackedTensorAccessor32<scalar_t, 2, torch::RestrictPtrTraits> out) {
    int r = blockIdx.x, c = threadIdx.x;
    if (c < x.size(1)) out[r][c] = x[r][c] * 2;
}

template <typename scalar_t>
void launch_rows(torch::Tensor x, torch::Tensor out) {
    rows_kernel<scalar_t><<<x.size(0), x.size(1)>>>(
        x.packed_accessor32<scalar_t, 2, torch::RestrictPtrTraits>(),
        out.packed_accessor32<scalar_t, 2, torch::RestrictPtrTraits>());
}

torch::Tensor rows(torch::Tensor x) {
    auto out = torch::empty_like(x);
    launch_rows<float>(x, out);
    return out;
}
''', "torch::Tensor rows(torch::Tensor x);", "rows")

# The two below fall back to the full build, which on a CPU machine costs minutes when it compiles
# torch's headers: they include none (no_implicit_headers, plain pybind11 bindings), so the full
# build takes seconds. Their functions take raw device addresses; they are built, never run.
LIGHT_CPP_HEADER = "#include <pybind11/pybind11.h>\\n#include <cstdint>\\n"
LIGHT_OPTIONS = {"no_implicit_headers": "True", "with_pytorch_error_handling": "False"}

CONSTANT_SYMBOL = candidate("kj_test_constant", '''
#include <cuda_runtime.h>
#include <cstdint>

__constant__ float weights[4];

__global__ void weigh_kernel(const float* in, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] * weights[i % 4];
}

void weigh(std::uintptr_t in, std::uintptr_t out, int n) {
    float host[4] = {1, 2, 3, 4};
    cudaMemcpyToSymbol(weights, host, sizeof(host));
    weigh_kernel<<<1, 256>>>(reinterpret_cast<const float*>(in), reinterpret_cast<float*>(out), n);
}
''', LIGHT_CPP_HEADER + "void weigh(std::uintptr_t in, std::uintptr_t out, int n);", "weigh", **LIGHT_OPTIONS)

# An error in the kernel: the message must name the candidate's own line.
KERNEL_ERROR = candidate("kj_test_error", '''
#include <cuda_runtime.h>
#include <cstdint>

__global__ void broken_kernel(const float* in, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = in[i] * undeclared_factor;
}

void broken(std::uintptr_t in, std::uintptr_t out, int n) {
    broken_kernel<<<1, 32>>>(reinterpret_cast<const float*>(in), reinterpret_cast<float*>(out), n);
}
''', LIGHT_CPP_HEADER + "void broken(std::uintptr_t in, std::uintptr_t out, int n);", "broken", **LIGHT_OPTIONS)

KERNEL_ERROR_LINE = 'out[i] = in[i] * undeclared_factor;'

# The reference PLAIN answers (twice_cuda doubles its input), for the GPU test.
PLAIN_REFERENCE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * 2


def get_inputs():
    return [torch.randn(4096)]


def get_init_inputs():
    return []
'''


def cuda_cu(candidate_source: str) -> str:
    """The cuda.cu load_inline writes for one of these candidates (its header lines first, if any)."""
    body = candidate_source.split('cuda_source = """', 1)[1].split('"""', 1)[0]
    if "no_implicit_headers=True" in candidate_source:
        return body
    return "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n" + body
