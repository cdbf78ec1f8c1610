"""Builds through the service's build stage (sandboxed, no GPU), on a CPU torch with the pip nvcc.

What a CPU machine can check: both halves compile (nvcc for the device half, the host compiler
against the precompiled torch header for the host half), ninja accepts the result as up to date for
the command lines torch wrote, and the host half loads into CPU torch with its functions registered.
What it cannot: linking against CUDA torch (libtorch_cuda, libc10_cuda are not in a CPU wheel) and
running a kernel; tests/build/test_gpu.py does that on the device machine.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.build import candidates
from worker.engine import build
from worker.models import SandboxKind


def build_candidate(settings, tmp_path, source: str, sandbox: SandboxKind = SandboxKind.bwrap, **kwargs):
    path = tmp_path / "candidate.py"
    path.write_text(source)
    return build.build_cuda_candidate(path, source, settings=settings, limit_s=600, sandbox=sandbox,
                                      torch_version=torch.__version__, **kwargs)


def only_extension(outcome) -> dict:
    (extension,) = outcome.record.extensions
    return extension


def test_plain_candidate_takes_the_fast_path_and_ninja_sees_it_up_to_date(build_settings, tmp_path):
    # Unsandboxed, so that build.ninja names real paths and ninja can be asked from here (an unsandboxed
    # build has a cache entry of its own: other tests build PLAIN in the sandbox).
    source = candidates.PLAIN
    outcome = build_candidate(build_settings, tmp_path, source, sandbox=SandboxKind.none)
    assert outcome.record.summary()["path"] == "fast", outcome.record
    extension = only_extension(outcome)
    assert extension["abi_check"] == "loaded; functions: twice_cuda"
    assert extension["merge"] == "" and "host+main" in extension["steps"], "main.cpp and the host half as one unit"
    directory = outcome.ext_dir / "kj_test_plain"
    # What the candidate's own load_inline runs at import (the sandbox's ninja, the interpreter's
    # environment's): ninja must find nothing to do.
    ninja = str(Path(sys.executable).parent / "ninja")
    dry_run = subprocess.run([ninja, "-n", "-d", "explain", "main.o", "cuda.cuda.o"], cwd=directory,
                             capture_output=True, text=True, check=True)
    assert "no work to do" in dry_run.stdout, dry_run.stderr
    assert "__global__" in (directory / "cuda.cu").read_text()  # the real sources are back in place
    # The same source again is served from the cache.
    again = build_candidate(build_settings, tmp_path, source, sandbox=SandboxKind.none)
    assert again.cached and again.ext_dir == outcome.ext_dir


@pytest.mark.parametrize(("source", "function"), [
    (candidates.DISPATCH_HALF, "add_one"),
    (candidates.ACCESSOR_HOST_TEMPLATE, "rows"),
])
def test_templates_instantiated_by_host_code_take_the_fast_path(build_settings, tmp_path, source, function):
    outcome = build_candidate(build_settings, tmp_path, source)
    assert outcome.record.path == "fast", outcome.record
    assert only_extension(outcome)["abi_check"] == f"loaded; functions: {function}"


def test_constant_memory_written_from_host_code_falls_back_to_the_full_build(build_settings, tmp_path):
    outcome = build_candidate(build_settings, tmp_path, candidates.CONSTANT_SYMBOL)
    assert outcome.record.path == "full"
    assert "host code uses the device variable 'weights'" in outcome.record.reason
    # On a CPU torch the full build stops at the objects; both compiled.
    directory = outcome.ext_dir / "kj_test_constant"
    assert (directory / "main.o").exists() and (directory / "cuda.cuda.o").exists()


def test_kernel_error_is_reported_at_the_candidates_own_line(build_settings, tmp_path):
    with pytest.raises(build.BuildFailure) as raised:
        build_candidate(build_settings, tmp_path, candidates.KERNEL_ERROR)
    failure = raised.value
    assert failure.kind == "compile_error"
    line = candidates.KERNEL_ERROR[:candidates.KERNEL_ERROR.index(candidates.KERNEL_ERROR_LINE)].count("\n") + 1
    assert f"candidate.py:{line} (cuda.cu:" in failure.detail
    assert "undeclared_factor" in failure.detail
    assert failure.record.path == "full"
    assert "undeclared_factor" in failure.record.reason
