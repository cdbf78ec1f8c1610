"""What honest kernels need must never be rejected (and mostly not even flagged)."""

from __future__ import annotations

import pytest

from contract.statuses import Backend
from policy.policy_helpers import check, cuda_candidate, fired, triton_add_candidate
from worker.engine.policy import detect_backend

HONEST_FORWARD_SNIPPETS = {
    "views-and-reshapes": "x = a.view(-1).contiguous()\ny = x.reshape(4, -1).permute(1, 0).transpose(0, 1)\n"
                          "z = y.flatten().unsqueeze(0).expand(2, -1).squeeze(0)\nw = a.T\nv = a[: n // 2]",
    "dtype-and-device-moves": "a = a.to(torch.float16).float().half().to(a.device)\nb = b.cuda().cpu().contiguous()",
    "shape-arithmetic": "rows = a.size(0) * a.stride(0) + a.dim()\nhalf = a.shape[0] // 2\nrest = a.numel() % 1024\n"
                        "block = min(triton.next_power_of_2(n), 1024)\nsteps = math.ceil(n / block)\nB, = a.shape",
    "alignment-check": "aligned = a.data_ptr() % 16 == 0 and a.is_contiguous()",
    "metadata-checks": "assert a.shape == b.shape\nif a.dtype != torch.float32:\n    raise TypeError('float32 only')\n"
                       "dev = a.device\nok = a.is_cuda or not a.is_cuda",
    "allocation": "w = torch.zeros(n, device=a.device)\nfull = torch.full((4,), 1.0)\nones = torch.ones_like(a)\n"
                  "out.zero_()\nws = a.new_empty((n,))",
    "grid-lambda": "grid = lambda meta: (triton.cdiv(n, meta['BLOCK']),)",
    "no-grad-context": "with torch.no_grad():\n    pass",
    "plain-logging": "print('launching add kernel with', n, 'elements')",
    "build-env-var": "os.environ['TORCH_CUDA_ARCH_LIST'] = '9.0'",
    "chunks-are-views": "left, right = a.chunk(2)\ntop = a.narrow(0, 0, 2)",
}


@pytest.mark.parametrize("name", sorted(HONEST_FORWARD_SNIPPETS))
def test_honest_forward_code_fires_nothing(name):
    source = triton_add_candidate(HONEST_FORWARD_SNIPPETS[name], imports="import math\nimport os")
    assert check(source) == []


def test_reading_parameters_and_passing_them_to_a_kernel_is_fine():
    source = triton_add_candidate(
        "w = self.weight\nscale = self.weight.shape[0] * 2\nadd_kernel[(1,)](a, self.weight, out, scale, BLOCK=16)",
        init="self.weight = nn.Parameter(torch.randn(16))\nself.eps = 1e-5",
    )
    assert check(source) == []


def test_honest_cuda_kernel_with_python_reshapes_is_clean():
    source = cuda_candidate().replace(
        "return ext.add(a.contiguous(), b.contiguous())",
        "shape = a.shape\nreturn ext.add(a.reshape(-1).contiguous(), b.reshape(-1).contiguous()).view(shape)".replace(
            "\n", "\n        "
        ),
    )
    assert check(source) == []


def test_extension_functions_named_like_torch_ops_are_clean():
    source = cuda_candidate().replace('functions=["add"]', 'functions=["add", "matmul"]').replace(
        "return ext.add(a.contiguous(), b.contiguous())", "return ext.matmul(a, b)"
    )
    assert check(source) == []


def test_custom_op_registered_by_the_extension_is_clean():
    source = cuda_candidate().replace(
        "return ext.add(a.contiguous(), b.contiguous())", "return torch.ops.kjlib.add(a, b)"
    )
    assert check(source) == []


def test_a_candidate_registering_operators_in_its_own_namespace_is_clean():
    # Only ATen's namespace (or every one) is the harness's too; a library of the candidate's own is its business.
    registration = ('TORCH_LIBRARY(kjlib, m) { m.def("add(Tensor a, Tensor b) -> Tensor"); }\n'
                    'TORCH_LIBRARY_IMPL(kjlib, CUDA, m) { m.impl("add", add); }')
    source = cuda_candidate().replace("#include <ATen/cuda/CUDAContext.h>\n",
                                      "#include <ATen/cuda/CUDAContext.h>\n" + "torch::Tensor add(torch::Tensor a, "
                                      "torch::Tensor b);\n" + registration + "\n")
    assert check(source) == []
    custom_op = triton_add_candidate(module='@torch.library.custom_op("kjlib::scale", mutates_args=())\n'
                                            'def scale(x: torch.Tensor) -> torch.Tensor:\n    return x.clone()\n')
    assert "KJ303" not in fired(custom_op)


def test_custom_autograd_function_is_followed_into_its_forward():
    source = triton_add_candidate(
        "return AddFn.apply(a, b)",
        module='''class AddFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        out = torch.empty_like(a)
        add_kernel[(1,)](a, b, out, a.numel(), BLOCK=1024)
        return out
''',
    )
    assert check(source) == []
    # The autograd forward is in the forward path: what it does is checked like forward itself.
    assert "KJ312" in fired(source.replace("out = torch.empty_like(a)\n", "out = torch.empty_like(a)\n        seen = id(a)\n", 1))


def test_triton_heuristics_and_device_functions_are_clean():
    source = triton_add_candidate(
        "scale_kernel[(1,)](out, n)",
        module='''@triton.jit
def _double(x):
    return x * 2


@triton.heuristics({"BLOCK": lambda args: 128})
@triton.jit
def scale_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, _double(tl.load(x_ptr + offs, mask=offs < n)), mask=offs < n)
''',
    )
    assert check(source) == []


# Streams are judged at run time, from the kernel trace (KJ-R03): no static rule reads them.
def test_correct_multistream_triton_kernel_joined_back_is_accepted():
    source = triton_add_candidate(
        "side = torch.cuda.Stream()\nside.wait_stream(torch.cuda.current_stream())\n"
        "with torch.cuda.stream(side):\n    add_kernel[(1,)](a, b, out, n, BLOCK=1024)\n"
        "torch.cuda.current_stream().wait_stream(side)\nout.record_stream(side)"
    )
    assert check(source) == []


def test_two_side_streams_created_lazily_on_self_and_joined_with_events_are_accepted():
    source = triton_add_candidate(
        "if self.streams is None:\n"
        "    self.streams = [torch.cuda.Stream() for _ in range(2)]\n"
        "    self.done = [torch.cuda.Event(), torch.cuda.Event()]\n"
        "current = torch.cuda.current_stream()\n"
        "for stream, event in zip(self.streams, self.done):\n"
        "    stream.wait_stream(current)\n"
        "    with torch.cuda.stream(stream):\n"
        "        add_kernel[(1,)](a, b, out, n, BLOCK=1024)\n"
        "        event.record(stream)\n"
        "    current.wait_event(event)",
        init="self.streams = None\nself.done = None",
    )
    assert check(source) == []


def test_correct_multistream_cuda_kernel_is_accepted():
    source = cuda_candidate(
        "auto side = at::cuda::getStreamFromPool();\ncudaEvent_t done;\n"
        "cudaEventCreateWithFlags(&done, cudaEventDisableTiming);\ncudaEventRecord(done, side.stream());\n"
        "cudaStreamWaitEvent(at::cuda::getCurrentCUDAStream(), done, 0);"
    )
    assert check(source) == []


def test_comments_and_strings_in_cuda_sources_are_not_code():
    source = cuda_candidate(
        '// never call system("rm") or fopen here\n/* cudaStreamCreate(&s); exit(1); */\n'
        'const char* note = "dlopen( and socket( are only words here";'
    )
    assert check(source) == []


def test_std_algorithms_and_device_math_are_not_libc_calls():
    source = cuda_candidate("float m = std::max(1.0f, fmaxf(2.0f, 3.0f));\nint k = std::min<int>(n, 4);")
    assert check(source) == []


@pytest.mark.parametrize(
    ("source", "backend"),
    [
        (triton_add_candidate(), Backend.triton),
        (cuda_candidate(), Backend.cuda),
        ("import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n", Backend.pytorch),
        ("def broken(:\n", Backend.pytorch),
    ],
)
def test_detect_backend(source, backend):
    assert detect_backend(source) == backend


def test_cuda_wins_when_both_backends_appear():
    both = cuda_candidate().replace("import torch\n", "import torch\nimport triton\n\n\n@triton.jit\ndef k(x):\n    pass\n", 1)
    assert detect_backend(both) == Backend.cuda


def test_explicit_pytorch_backend_switches_the_custom_kernel_rules_off():
    source = "import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, a, b):\n        return a + b\n"
    assert fired(source) == {"KJ107"}
    assert fired(source, backend=Backend.pytorch) == set()


def test_rules_can_be_disabled_by_full_id():
    source = triton_add_candidate("busy = torch.cuda.is_current_stream_capturing()")
    assert fired(source) == {"KJ309"}
    assert fired(source, disabled=["KJ309-phase-sniffing"]) == set()
