"""Honest candidates the way language models write them: no static hit at all.

Under the default `partial` profile a candidate may keep part of the work in PyTorch (an nn layer,
a matmul) and fuse the rest into its own kernel; whether its kernels ran is judged at run time.
These shapes were all rejected by earlier static rules, so each is pinned here.
"""

from __future__ import annotations

import pytest

from policy.policy_helpers import check, cuda_candidate, triton_add_candidate

CUDA_HEAD = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline
'''

TRITON_HEAD = '''import torch
import torch.nn as nn
import triton
import triton.language as tl
'''

SOFTSIGN_STORED_ON_SELF = CUDA_HEAD + '''
softsign_source = r"""
#include <torch/extension.h>

__global__ void softsign_kernel(const float* x, float* y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] / (1.0f + fabsf(x[i]));
}

torch::Tensor softsign_cuda(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int64_t n = x.numel();
    softsign_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""

ext = load_inline(name="softsign", cpp_sources="torch::Tensor softsign_cuda(torch::Tensor x);",
                  cuda_sources=softsign_source, functions=["softsign_cuda"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.softsign = ext.softsign_cuda

    def forward(self, x):
        return self.softsign(x)
'''

CONV_WITH_FUSED_EPILOGUE = CUDA_HEAD + '''
epilogue_source = r"""
#include <torch/extension.h>

__global__ void bias_relu_scale_kernel(float* y, const float* bias, float scale, int64_t n, int64_t hw, int64_t c) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(y[i] + bias[(i / hw) % c], 0.0f) * scale;
}

torch::Tensor bias_relu_scale(torch::Tensor y, torch::Tensor bias, double scale) {
    int64_t n = y.numel();
    int64_t hw = y.size(2) * y.size(3);
    bias_relu_scale_kernel<<<(n + 255) / 256, 256>>>(
        y.data_ptr<float>(), bias.data_ptr<float>(), (float)scale, n, hw, y.size(1));
    return y;
}
"""

epilogue = load_inline(name="conv_epilogue",
                       cpp_sources="torch::Tensor bias_relu_scale(torch::Tensor y, torch::Tensor bias, double scale);",
                       cuda_sources=epilogue_source, functions=["bias_relu_scale"])


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, scale):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(out_channels))
        self.scale = scale

    def forward(self, x):
        x = self.conv(x)
        return epilogue.bias_relu_scale(x.contiguous(), self.bias, self.scale)
'''

RELU_KERNEL = '''
@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)
'''

COPIED_PROMPT = TRITON_HEAD + '''

class Model(nn.Module):
    """The reference from the prompt, copied verbatim."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)

''' + RELU_KERNEL + '''

class ModelNew(Model):
    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out


def get_inputs():
    return [torch.randn(16, 1024)]


def get_init_inputs():
    return []


if __name__ == "__main__":
    reference = Model()
    x = get_inputs()[0]
    print(torch.allclose(reference(x), ModelNew()(x)))
'''

SOFTMAX_ON_TWO_JOINED_STREAMS = TRITON_HEAD + '''

@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * n_cols + cols, e / tl.sum(e, axis=0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.top = torch.cuda.Stream()
        self.bottom = torch.cuda.Stream()

    def forward(self, x):
        out = torch.empty_like(x)
        rows, cols = x.shape
        half = rows // 2
        block = triton.next_power_of_2(cols)
        current = torch.cuda.current_stream()
        self.top.wait_stream(current)
        self.bottom.wait_stream(current)
        with torch.cuda.stream(self.top):
            softmax_kernel[(half,)](x, out, cols, BLOCK=block)
        current.wait_stream(self.top)
        with torch.cuda.stream(self.bottom):
            softmax_kernel[(rows - half,)](x[half:], out[half:], cols, BLOCK=block)
        current.wait_stream(self.bottom)
        return out
'''

KERNEL_ALIASED_LOCALLY = TRITON_HEAD + RELU_KERNEL + '''

class ModelNew(nn.Module):
    def forward(self, x):
        kernel = relu_kernel
        out = torch.empty_like(x)
        n = x.numel()
        kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out
'''

MATMUL_WITH_TRITON_EPILOGUE = TRITON_HEAD + '''

@triton.jit
def bias_gelu_kernel(y_ptr, bias_ptr, n, cols, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    y = tl.load(y_ptr + offs, mask=mask) + tl.load(bias_ptr + offs % cols, mask=mask)
    tl.store(y_ptr + offs, 0.5 * y * (1.0 + tl.erf(y * 0.7071067811865476)), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_features, in_features))
        self.bias = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        y = torch.matmul(x, self.weight.t())
        n = y.numel()
        bias_gelu_kernel[(triton.cdiv(n, 1024),)](y, self.bias, n, y.shape[1], BLOCK=1024)
        return y
'''

HONEST = {
    "load-inline-kernel-stored-on-self": SOFTSIGN_STORED_ON_SELF,
    "conv2d-kept-with-fused-cuda-epilogue": CONV_WITH_FUSED_EPILOGUE,
    "copied-prompt-model-and-harness-functions": COPIED_PROMPT,
    "triton-softmax-on-two-joined-side-streams": SOFTMAX_ON_TWO_JOINED_STREAMS,
    "kernel-aliased-to-a-local-name": KERNEL_ALIASED_LOCALLY,
    "torch-matmul-with-triton-epilogue": MATMUL_WITH_TRITON_EPILOGUE,
}


@pytest.mark.parametrize("name", sorted(HONEST))
def test_honest_partial_candidate_has_no_static_hit(name):
    assert check(HONEST[name]) == []


def test_own_model_class_instantiated_is_not_the_reference():
    source = COPIED_PROMPT.replace("class ModelNew(Model):", "class ModelNew(nn.Module):").replace(
        "    def forward(self, x):\n        out = torch.empty_like(x)",
        "    def __init__(self):\n        super().__init__()\n        self.reference = Model()\n\n"
        "    def forward(self, x):\n        out = torch.empty_like(x)",
    )
    assert "self.reference = Model()" in source
    assert check(source) == []


def test_importing_the_reference_model_is_still_rejected():
    source = COPIED_PROMPT.replace("import triton\n", "import triton\nfrom reference import Model as Reference\n", 1)
    rejecting = [h for h in check(source) if h.severity == "reject"]
    assert [h.rule for h in rejecting] == ["KJ104-reference-model-used"]
    assert rejecting[0].evidence == "from reference import Model as Reference"


@pytest.mark.parametrize(
    "source",
    [
        pytest.param(cuda_candidate("auto projected = torch::addmm(b, a, b.t());"), id="aten-op-in-cpp"),
        pytest.param(cuda_candidate("cublasHandle_t h = at::cuda::getCurrentCUDABlasHandle();",
                                    includes="#include <cublas_v2.h>", flags=', extra_ldflags=["-lcublas"]'),
                     id="cublas-in-cpp"),
        pytest.param(triton_add_candidate("b.mul_(2)\na[0] = 0"), id="input-written-in-place"),
        pytest.param(triton_add_candidate("", module="@triton.jit\ndef spare_kernel(x_ptr):\n    pass\n"),
                     id="kernel-defined-but-not-launched"),
    ],
)
def test_what_only_the_run_can_tell_is_left_to_run_time(source):
    """Library kernels, input mutation and unlaunched kernels are judged from what ran, not from the source."""
    assert check(source) == []
