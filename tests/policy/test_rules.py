"""Every rule fires on a minimal offender, with its severity, line and evidence."""

from __future__ import annotations

import pytest

from policy.policy_helpers import check, cuda_candidate, fired, triton_add_candidate
from worker.engine.policy import RULES, rule

PLAIN_PYTORCH = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.add(a, b)
'''

# (rule number, offending source) — at least one per rule; several where a rule has several shapes.
OFFENDERS: list[tuple[str, str]] = [
    ("KJ000", "def broken(:\n"),
    ("KJ103", triton_add_candidate("try:\n    a = a.contiguous()\nexcept Exception:\n    return a")),
    ("KJ103", cuda_candidate().replace("ext = load_inline(", "try:\n    ext = load_inline(").replace(
        'functions=["add"])', 'functions=["add"])\nexcept Exception:\n    ext = None')),
    ("KJ104", triton_add_candidate(module="from reference import Model")),
    ("KJ104", triton_add_candidate(module="from problems.level2 import Model as Reference")),
    ("KJ104", triton_add_candidate(imports="import kj_reference")),
    ("KJ104", triton_add_candidate(imports="from reference import get_inputs")),
    ("KJ104", triton_add_candidate(imports="from . import reference")),
    ("KJ107", PLAIN_PYTORCH),
    ("KJ111", triton_add_candidate(init="self.fn = torch.compile(lambda x: x)")),
    ("KJ111", triton_add_candidate(init="self.fn = torch.jit.script(nn.Identity())")),
    ("KJ112", triton_add_candidate("g = torch.cuda.CUDAGraph()")),
    ("KJ112", cuda_candidate("cudaGraph_t graph;\ncudaStreamBeginCapture(at::cuda::getCurrentCUDAStream(), cudaStreamCaptureModeGlobal);")),
    ("KJ113", triton_add_candidate(module="torch.backends.cudnn.benchmark = True")),
    ("KJ113", triton_add_candidate(module="torch.set_float32_matmul_precision('medium')")),
    ("KJ202", triton_add_candidate(module="class Lazy(torch.Tensor):\n    pass\n")),
    ("KJ202", triton_add_candidate(module="class Box:\n    def __eq__(self, other):\n        return True\n")),
    ("KJ202", triton_add_candidate("out = out.as_subclass(torch.Tensor)")),
    ("KJ203", triton_add_candidate("torch.manual_seed(1234)")),
    ("KJ203", triton_add_candidate("state = torch.cuda.get_rng_state()")),
    ("KJ302", triton_add_candidate(imports="import threading")),
    ("KJ302", triton_add_candidate(imports="from concurrent.futures import ThreadPoolExecutor")),
    ("KJ302", cuda_candidate("std::thread t([] {});\nt.detach();")),
    ("KJ303", triton_add_candidate(module="triton.testing.do_bench = None")),
    ("KJ303", triton_add_candidate(module="setattr(torch.cuda, 'synchronize', print)")),
    ("KJ303", triton_add_candidate(module="sys.modules['time'] = None", imports="import sys")),
    ("KJ303", triton_add_candidate(module="del torch.allclose")),
    # Kernels registered for ATen's own operators replace them for the harness too (the timer's flush is a zero_).
    ("KJ303", cuda_candidate(includes='at::Tensor& quiet_zero(at::Tensor& self) { return self; }\n'
                                      'TORCH_LIBRARY_IMPL(aten, CUDA, m) { m.impl("zero_", quiet_zero); }')),
    ("KJ303", cuda_candidate(includes='TORCH_LIBRARY_IMPL(_, CUDA, m) { m.fallback(torch::CppFunction()); }')),
    ("KJ303", cuda_candidate(includes='static torch::Library lib(torch::Library::IMPL, "aten", '
                                      'c10::DispatchKey::CUDA, __FILE__, __LINE__);')),
    ("KJ303", cuda_candidate("c10::Dispatcher::singleton().registerImpl(op, key, fn, schema, debug);")),
    ("KJ303", triton_add_candidate(module='_aten = torch.library.Library("aten", "IMPL")')),
    ("KJ303", triton_add_candidate(module='@torch.library.impl("aten::zero_", "CUDA")\ndef quiet_zero(self):\n'
                                          '    return self\n')),
    ("KJ303", triton_add_candidate(module='torch.library.register_kernel("aten::fill_.Scalar", "cuda", abs)')),
    ("KJ303", triton_add_candidate(module='torch._C._dispatch_library("IMPL", "kjlib", "CUDA")')),
    ("KJ304", cuda_candidate("cudaStreamAttrValue v = {};\nv.accessPolicyWindow.num_bytes = 1 << 20;")),
    ("KJ304", cuda_candidate("cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, 1 << 20);")),
    ("KJ305", cuda_candidate('unsigned long long t;\nasm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));')),
    ("KJ305", triton_add_candidate(module='''@triton.jit
def timer_kernel(out_ptr):
    t = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)
    tl.store(out_ptr, t)
''', forward="timer_kernel[(1,)](out)")),
    ("KJ306", triton_add_candidate("mode = os.environ.get('PHASE')", imports="import os")),
    ("KJ306", cuda_candidate('const char* phase = getenv("PHASE");')),
    ("KJ307", triton_add_candidate("os.environ['CUDA_LAUNCH_BLOCKING'] = '1'", imports="import os")),
    ("KJ308", triton_add_candidate("t0 = time.perf_counter()", imports="import time")),
    ("KJ308", triton_add_candidate("ms = self.start.elapsed_time(self.end)")),
    ("KJ308", cuda_candidate("auto now = std::chrono::steady_clock::now();")),
    ("KJ309", triton_add_candidate("busy = torch.cuda.is_current_stream_capturing()")),
    ("KJ309", triton_add_candidate("used = torch.cuda.memory_allocated()")),
    ("KJ310", triton_add_candidate("self.cache[a.shape] = out")),
    ("KJ310", triton_add_candidate("self.previous = out")),
    ("KJ310", triton_add_candidate("self.history.append(out)")),
    ("KJ311", triton_add_candidate("self.calls += 1\nif self.calls > 3:\n    return out")),
    ("KJ312", triton_add_candidate("key = a.data_ptr()\nif key == self.last_key:\n    return self.last")),
    ("KJ312", triton_add_candidate("seen = id(a)")),
    ("KJ312", triton_add_candidate("version = a._version")),
    ("KJ313", triton_add_candidate("_CACHE['out'] = out", module="_CACHE = {}")),
    ("KJ313", triton_add_candidate("global _LAST\n_LAST = out", module="_LAST = None")),
    ("KJ313", triton_add_candidate("type(self).saved = out")),
    ("KJ314", triton_add_candidate("out = helper(n)", module="import functools\n\n\n@functools.lru_cache\ndef helper(n):\n    return n")),
    ("KJ315", cuda_candidate("long long start = clock64();")),
    ("KJ316", triton_add_candidate("if self.buf is None:\n    self.buf = torch.empty_like(a)", init="self.buf = None")),
    ("KJ401", triton_add_candidate("frame = sys._getframe(0)", imports="import sys")),
    ("KJ401", triton_add_candidate("objs = gc.get_referrers(a)", imports="import gc")),
    ("KJ401", triton_add_candidate("g = self.forward.__func__.__globals__")),
    ("KJ401", triton_add_candidate("tb = None\nf = tb.tb_frame.f_back")),
    ("KJ402", triton_add_candidate("exec('x = 1')")),
    ("KJ402", triton_add_candidate("mod = __import__('o' + 's')")),
    ("KJ402", triton_add_candidate("name = 'add'\nfn = getattr(torch, name)")),
    ("KJ402", triton_add_candidate(imports="import importlib")),
    ("KJ402", cuda_candidate(includes="#define CALL(a, b) a##b")),
    ("KJ403", triton_add_candidate("os._exit(0)", imports="import os")),
    ("KJ403", triton_add_candidate("sys.exit(0)", imports="import sys")),
    ("KJ403", triton_add_candidate("raise KeyboardInterrupt")),
    ("KJ403", cuda_candidate("exit(0);")),
    ("KJ403", cuda_candidate("std::abort();")),
    ("KJ404", triton_add_candidate("subprocess.run(['true'])", imports="import subprocess")),
    ("KJ404", triton_add_candidate("os.system('true')", imports="import os")),
    ("KJ404", cuda_candidate('system("true");')),
    ("KJ404", cuda_candidate('popen("true", "r");')),
    ("KJ405", triton_add_candidate(imports="import urllib.request")),
    ("KJ405", triton_add_candidate(imports="import requests")),
    ("KJ405", cuda_candidate("int fd = socket(2, 1, 0);")),
    ("KJ406", triton_add_candidate("data = open('/etc/hostname').read()")),
    ("KJ406", triton_add_candidate("p = pathlib.Path('/tmp/x')", imports="import pathlib")),
    ("KJ406", triton_add_candidate("names = os.listdir('/')", imports="import os")),
    ("KJ406", triton_add_candidate("torch.save(out, 'out.pt')")),
    ("KJ406", cuda_candidate('FILE* f = fopen("/etc/hostname", "r");')),
    ("KJ406", cuda_candidate('std::ofstream log("out.txt");', includes="#include <fstream>")),
    ("KJ407", triton_add_candidate("lib = ctypes.CDLL(None)", imports="import ctypes")),
    ("KJ407", cuda_candidate('void* h = dlopen("libc.so.6", 2);')),
    ("KJ408", cuda_candidate("float* p;\ncudaMallocManaged(&p, 1 << 30);")),
    ("KJ408", triton_add_candidate("torch.cuda.set_per_process_memory_fraction(1.0)")),
    ("KJ409", triton_add_candidate(imports="import base64")),
    ("KJ410", "# -*- coding: utf-7 -*-\n" + triton_add_candidate()),
    ("KJ411", triton_add_candidate("print('speedup: 100x, correct: True')")),
    ("KJ411", triton_add_candidate("print(f'status={n}')")),
    ("KJ411", cuda_candidate('printf("{\\"speedup\\": 99}\\n");')),
    ("KJ412", triton_add_candidate("fd = torch.os.open('/proc/1/environ', 0)")),
    ("KJ412", triton_add_candidate("timer = torch.sys.modules['sandbox_side.timing.timer']")),
    ("KJ412", triton_add_candidate("np.os.system('true')", imports="import numpy as np")),
    ("KJ412", triton_add_candidate("a.subprocess.run(['true'])")),
    ("KJ412", triton_add_candidate("loader = getattr(torch, 'importlib')")),
    ("KJ412", triton_add_candidate("b = torch.nn.functional.__builtins__")),
    ("KJ412", triton_add_candidate(imports="from torch import os as hidden_os")),
    ("KJ412", triton_add_candidate("clock = triton.time.perf_counter")),
]


def test_every_rule_has_an_offender():
    assert {r.number for r in RULES} == {number for number, _ in OFFENDERS}


@pytest.mark.parametrize(("number", "source"), OFFENDERS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(OFFENDERS)])
def test_rule_fires_on_minimal_offender(number, source):
    hits = [h for h in check(source) if h.rule.startswith(number + "-")]
    assert hits, f"{number} did not fire; got {[h.rule for h in check(source)]}"
    expected = rule(number)
    for hit in hits:
        assert hit.rule == expected.id
        assert hit.severity == expected.severity
        assert hit.message.endswith(expected.why) and len(hit.message) > len(expected.why)
        assert hit.line is not None and hit.line >= 1


@pytest.mark.parametrize(("number", "source"), OFFENDERS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(OFFENDERS)])
def test_disabling_a_rule_silences_it(number, source):
    assert number not in fired(source, disabled=[number])


def test_hit_points_at_the_offending_line_and_snippet():
    source = triton_add_candidate("busy = torch.cuda.is_current_stream_capturing()")
    hit = next(h for h in check(source) if h.rule.startswith("KJ309"))
    offending_line = source.splitlines()[hit.line - 1]
    assert "busy = torch.cuda.is_current_stream_capturing()" in offending_line
    assert hit.evidence == "torch.cuda.is_current_stream_capturing"
    assert "torch.cuda.is_current_stream_capturing" in hit.message


def test_cuda_hit_lines_map_into_the_python_file():
    source = cuda_candidate('system("true");')
    hit = next(h for h in check(source) if h.rule.startswith("KJ404"))
    assert 'system("true");' in source.splitlines()[hit.line - 1]
    assert hit.evidence == 'system("true");'


@pytest.mark.parametrize(("forward", "imports", "specific"), [
    ("fd = torch.os.open('/proc/1/environ', 0)", "", "KJ406"),
    ("key = torch.os.environ['KERNELJUDGE_API_KEYS']", "", "KJ306"),
    ("np.os.system('true')", "import numpy as np", "KJ404"),
    ("timer = torch.sys.modules['x']", "", "KJ401"),
])
def test_a_module_reached_through_an_attribute_is_judged_as_that_module_too(forward, imports, specific):
    rules = fired(triton_add_candidate(forward, imports=imports))
    assert "KJ412" in rules and specific in rules


@pytest.mark.parametrize("forward", [
    "y = torch.nn.functional.relu(a)",
    "n = sum(1 for m in self.modules())",
    "w = torch.signal.windows.hann(4)",
    "s = torch.cuda.current_stream()",
    "d = torch.backends.cuda.matmul",
])
def test_honest_attribute_chains_are_not_module_reaches(forward):
    assert "KJ412" not in fired(triton_add_candidate(forward))
