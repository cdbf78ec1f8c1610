"""Numba `@cuda.jit` candidates: detected as the numba backend, their kernels are the candidate's own
names, honest ones get no static finding, and the parts of Numba that are not its CUDA target stay
rejected as native code."""

from __future__ import annotations

import pytest

from contract.statuses import Backend
from policy.policy_helpers import check, fired
from problem_library.catalog import NUMBA_KINDS, load_library
from worker.engine.policy import detect_backend
from worker.engine.verdict.kernel_names import own_kernel_names

NUMBA_ADD = '''import torch
import torch.nn as nn
{imports}


{decorator}
def add_kernel(a, b, out, n):
    for i in range({cuda}.grid(1), n, {cuda}.gridsize(1)):
        out[i] = {helper}(a[i], b[i])


{device_decorator}
def plus(x, y):
    return x + y


class ModelNew(nn.Module):
    def forward(self, a, b):
        out = torch.empty_like(a)
        n = out.numel()
{forward}
        add_kernel[4, 128]({cuda}.as_cuda_array(a), {cuda}.as_cuda_array(b), {cuda}.as_cuda_array(out), n)
        return out
'''

SPELLINGS = {
    "from-numba-import-cuda": dict(imports="from numba import cuda", decorator="@cuda.jit", cuda="cuda",
                                   device_decorator="@cuda.jit(device=True)"),
    "import-numba": dict(imports="import numba", decorator="@numba.cuda.jit", cuda="numba.cuda",
                         device_decorator="@numba.cuda.jit(device=True)"),
    "aliased-module": dict(imports="import numba.cuda as nc", decorator="@nc.jit", cuda="nc",
                           device_decorator="@nc.jit(device=True)"),
    "signature-string": dict(imports="from numba import cuda",
                             decorator='@cuda.jit("void(float32[:], float32[:], float32[:], int64)")',
                             cuda="cuda", device_decorator="@cuda.jit(device=True, inline=True)"),
}


def numba_candidate(spelling: str = "from-numba-import-cuda", forward: str = "", imports: str = "") -> str:
    fields = dict(SPELLINGS[spelling])
    fields["imports"] += ("\n" + imports) if imports else ""
    body = "".join(" " * 8 + line + "\n" for line in forward.splitlines())
    return NUMBA_ADD.format(helper="plus", forward=body, **fields)


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_a_cuda_jit_kernel_makes_the_numba_backend_and_an_own_kernel_name(spelling):
    source = numba_candidate(spelling)
    assert detect_backend(source) == Backend.numba
    # The device function is called by the kernel, never launched: it is not a kernel name.
    assert own_kernel_names(source) == {"add_kernel"}


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_honest_numba_candidates_get_no_finding(spelling):
    assert check(numba_candidate(spelling)) == []


def test_a_kernel_bound_by_calling_cuda_jit_is_one_too():
    source = ("import torch\nfrom numba import cuda\n\n\ndef scale(x, out):\n    out[0] = x[0] * 2\n\n\n"
              "scale_kernel = cuda.jit(scale)\n\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n"
              "        out = torch.empty_like(x)\n        scale_kernel[1, 1](x, out)\n        return out\n")
    assert detect_backend(source) == Backend.numba
    assert own_kernel_names(source) == {"scale_kernel"}
    assert check(source) == []


def test_only_device_functions_are_no_kernel_of_its_own():
    source = ("import torch\nfrom numba import cuda\n\n\n@cuda.jit(device=True)\ndef plus(x, y):\n    return x + y\n\n\n"
              "class ModelNew(torch.nn.Module):\n    def forward(self, a, b):\n        return a + b\n")
    assert detect_backend(source) == Backend.pytorch
    assert own_kernel_names(source) == frozenset()
    assert fired(source) == {"KJ107"}


def test_triton_is_reported_over_numba_when_both_define_kernels():
    source = numba_candidate().replace(
        "import torch\n", "import torch\nimport triton\n\n\n@triton.jit\ndef copy_kernel(x):\n    pass\n", 1)
    assert detect_backend(source) == Backend.triton
    assert own_kernel_names(source) == {"add_kernel", "copy_kernel"}


@pytest.mark.parametrize(("forward", "imports"), [
    # Host-side native code: Numba's CPU JIT and raw-address arrays.
    ("fast = numba.njit(lambda v: v)", "import numba"),
    ("view = numba.carray(a.data_ptr(), (n,))", "import numba"),
    ("fn = cfunc('void()')(lambda: None)", "from numba import cfunc"),
    # The CUDA driver and NVVM internals under numba.cuda.
    ("ctx = driver.driver.get_device_count()", "from numba.cuda.cudadrv import driver"),
    # CUDA C or PTX linked into a kernel, out of the policy's sight.
    ("code = cuda.CUSource('extern \"C\" __device__ int f(int* r) { return 0; }')", ""),
    ("clock = cuda.declare_device('read_clock', 'int64()')", ""),
])
def test_numba_outside_its_cuda_target_is_native_code(forward, imports):
    assert fired(numba_candidate(forward=forward, imports=imports)) == {"KJ407"}


def test_numba_scalar_types_and_the_bare_package_import_are_fine():
    source = numba_candidate(forward="zero = numba.float32(0.0)\nkind = numba.types.float32", imports="import numba")
    assert check(source) == []


LIBRARY_NUMBA = [(p.name, kind) for p in load_library() for kind in NUMBA_KINDS if kind in p.candidates]


def test_the_library_has_numba_candidates_for_elementwise_activation_and_reduction():
    classes = {p.kernel_class for p in load_library() if "numba_ok" in p.candidates}
    assert {"elementwise", "activation", "reduction"} <= classes


@pytest.mark.parametrize(("name", "kind"), LIBRARY_NUMBA)
def test_library_numba_candidates_are_numba_with_no_static_finding(name, kind):
    source = next(p for p in load_library() if p.name == name).candidate(kind)
    assert detect_backend(source) == Backend.numba
    assert own_kernel_names(source)
    assert check(source) == []
