"""The split of cuda.cu into device and host code, decided from clang's parse (no compiler runs)."""

from __future__ import annotations

import pytest
import torch.utils.cpp_extension as cpp_extension

from sandbox_side.build.split import NotSplittable, split_cuda_source
from sandbox_side.build.toolchain import find_toolchain
from tests.build import candidates


def split(source: str):
    return split_cuda_source(source, find_toolchain(), cpp_extension.include_paths(), "c++17")


def line_of(text: str, needle: str) -> int:
    return text[:text.index(needle)].count("\n") + 1


def test_plain_source_splits_into_kernel_file_and_host_file_with_lines_kept():
    source = candidates.cuda_cu(candidates.PLAIN)
    result = split(source)
    assert [kernel.name for kernel in result.kernels] == ["twice_kernel"]
    device, host = result.device, result.host
    # Device code: kernels, device functions, the struct and the macro they use; no torch.
    assert "torch/" not in device.split('#line 1 "kj_launchers.cu"')[0].replace(" ", "")
    assert "__device__ __forceinline__ float twice" in device
    assert "struct Scale { float factor; };" in device
    assert "twice_kernel<<<kj_grid, kj_block, kj_shared_bytes, kj_stream>>>(in, out, n, s)" in device
    # Host code: the wrapper, calling the launcher where the launch was, on the same line.
    launch_line = line_of(source, "twice_kernel<<<")
    call = "kj_launch_twice_kernel((n + BLOCK - 1) / BLOCK, BLOCK, 0, 0, x.data_ptr<float>()"
    assert call in host
    # Both files start with a #line marker (one line) that makes line N of the file report as cuda.cu:N.
    host_body = host.split('#line 1 "cuda.cu"\n', 1)[1]
    assert line_of(host_body, "kj_launch_twice_kernel((n") == launch_line
    device_body = device.split('#line 1 "cuda.cu"\n', 1)[1]
    assert line_of(device_body, "__global__ void twice_kernel") == line_of(source, "__global__ void twice_kernel")
    assert "__device__" not in host_body.split("void kj_launch_twice_kernel")[0]


def test_template_kernel_launched_from_dispatch_gets_a_template_launcher():
    result = split(candidates.cuda_cu(candidates.DISPATCH_HALF))
    (kernel,) = result.kernels
    assert kernel.template_header == "template <typename scalar_t>"
    assert result.has_template_kernels
    assert "kj_launch_add_one_kernel<scalar_t>((n + 255) / 256, 256, 16, c10::cuda::getCurrentCUDAStream()," \
        in result.host


def test_accessor_parameters_bring_the_accessor_header_to_the_device_side():
    result = split(candidates.cuda_cu(candidates.ACCESSOR_HOST_TEMPLATE))
    assert any(header.endswith("kj_tensor_accessor.h") for header in result.device_pre_includes)
    # The launch sits in a host template: the launcher call stays inside it.
    assert "void launch_rows(torch::Tensor x, torch::Tensor out) {\n    kj_launch_rows_kernel<scalar_t>(" in result.host


@pytest.mark.parametrize(("source", "reason"), [
    (candidates.cuda_cu(candidates.CONSTANT_SYMBOL), "host code uses the device variable 'weights'"),
    (candidates.cuda_cu(candidates.KERNEL_ERROR), "device code does not parse without the torch headers"),
    ("#include <torch/types.h>\n#include \"my_helpers.cuh\"\n__global__ void k(float* x) {}\n",
     "includes <my_helpers.cuh>"),
    ("#include <cuda_runtime.h>\n#ifdef FAST\n__global__ void k(float* x) { x[0] = 1; }\n#endif\n",
     "conditional compilation"),
    ("#include <cuda_runtime.h>\nnamespace kern {\n__global__ void k(float* x) { x[0] = 1; }\n}\n",
     "CUDA code inside a namespace"),
    ("#include <cuda_runtime.h>\n__global__ void child(float* x) { x[0] = 1; }\n"
     "__global__ void parent(float* x) { child<<<1, 1>>>(x); }\n", "requires relocatable device code"),
    ("#include <torch/types.h>\n__global__ void k(float* x) { x[0] = 1; }\n__global__ void k(int* x) { x[0] = 1; }\n",
     "declared twice with different parameters"),
])
def test_what_the_split_cannot_place_falls_back_with_a_reason(source, reason):
    with pytest.raises(NotSplittable) as raised:
        split(source)
    assert reason in raised.value.reason
