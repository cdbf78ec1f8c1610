"""Builds through the service's build stage (sandboxed, no GPU), on a CPU torch with the pip nvcc.

What a CPU machine can check: both halves compile (nvcc for the device half, the host compiler
against the precompiled torch header for the host half), ninja accepts the result as up to date for
the command lines torch wrote, and the host half loads into CPU torch with its functions registered.
What it cannot: linking against CUDA torch (libtorch_cuda, libc10_cuda are not in a CPU wheel) and
running a kernel; tests/build/test_gpu.py does that on the device machine.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from contract.statuses import SandboxKind
from tests.build import candidates
from tests.conftest import sandbox_reply
from worker.engine.build import builder as build
from worker.engine.launch import RunnerConfig, RunnerPaths, runner_spec
from worker.engine.sandbox import ResourceLimits
from worker.engine.sandbox.spec import MIB


def build_candidate(settings, tmp_path, source: str, sandbox: SandboxKind = SandboxKind.bwrap, **kwargs):
    path = tmp_path / "candidate.py"
    path.write_text(source)
    return build.build_cuda_candidate(path, source, settings=settings, limit_s=600, sandbox=sandbox,
                                      torch_version=torch.__version__, **kwargs)


def only_extension(outcome) -> dict:
    (extension,) = outcome.record.extensions
    return extension


# Inside a run's sandbox: the built extension installed as the runner installs it before the
# candidate's load_inline, then ninja asked what it would do there.
NINJA_IN_RUN = r"""
import json, os, subprocess, sys
sys.path.insert(0, os.environ["KJ_LIB"])
from sandbox_side.runtime.runner import install_built_extension
install_built_extension()
ninja = os.path.join(os.path.dirname(sys.executable), "ninja")
folder = os.path.join(os.environ["TORCH_EXTENSIONS_DIR"], "kj_test_plain")
done = subprocess.run([ninja, "-n", "-d", "explain", "main.o", "cuda.cuda.o"], cwd=folder, capture_output=True,
                      text=True)
os.write(int(os.environ["KJ_MSG_FD"]), (json.dumps({"out": done.stdout, "err": done.stderr}) + "\n").encode())
"""


def test_plain_candidate_takes_the_fast_path_and_ninja_sees_it_up_to_date_in_the_run(build_settings, tmp_path):
    source = candidates.PLAIN
    outcome = build_candidate(build_settings, tmp_path, source)
    assert outcome.record.summary().path == "fast", outcome.record
    extension = only_extension(outcome)
    assert extension["abi_check"] == "loaded; functions: twice_cuda"
    assert extension["merge"] == "" and "host+main" in extension["steps"], "main.cpp and the host half as one unit"
    directory = outcome.ext_dir / "kj_test_plain"
    assert "__global__" in (directory / "cuda.cu").read_text()  # the real sources are back in place
    # What the candidate's own load_inline runs at import in the run's sandbox (the cache entry mounted
    # read-only, copied into the run's own extension folder): ninja must find nothing to do.
    config = RunnerConfig(role="candidate", mode="run", device="cpu", paths=RunnerPaths(ext_dir=outcome.ext_dir))
    reply = sandbox_reply(runner_spec(config, build_settings, ResourceLimits()), NINJA_IN_RUN, "ninja-check")
    assert "no work to do" in reply["out"], reply
    # The same source again is served from the cache.
    again = build_candidate(build_settings, tmp_path, source)
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


# The build sandbox writes only into size-capped tmpfs folders; its built folder comes back as its reply's payload.
FILLS_ITS_EXTENSION_FOLDER = '''import os
with open(os.path.join(os.environ["TORCH_EXTENSIONS_DIR"], "fill"), "wb") as handle:
    for _ in range(256):
        handle.write(b"x" * (1 << 20))
''' + candidates.PLAIN


def test_a_build_that_fills_its_extension_folder_stops_at_the_cap(build_settings, tmp_path):
    settings = dataclasses.replace(build_settings, sandbox_ext_bytes=64 * MIB)
    with pytest.raises(build.BuildFailure) as raised:
        build_candidate(settings, tmp_path, FILLS_ITS_EXTENSION_FOLDER)
    assert "No space left on device" in raised.value.message
    key = build.cache_key(FILLS_ITS_EXTENSION_FOLDER, torch.__version__, settings)
    assert not (settings.build_cache / key).exists()


# An atexit handler that would hold the process for a minute: a build leaves without the interpreter's teardown,
# as a runner does (sandbox_side/runtime/leave.py), so it never runs and the supervisor's close finds the build gone.
SLOW_TEARDOWN = '''import atexit, time
atexit.register(time.sleep, 60)
''' + candidates.PLAIN


def test_a_build_leaves_without_the_interpreters_teardown(build_settings, tmp_path, caplog):
    with caplog.at_level("INFO", logger="worker.engine.sandbox.process"):
        outcome = build_candidate(build_settings, tmp_path, SLOW_TEARDOWN)
    assert outcome.record.summary().path == "fast", outcome.record
    assert not [r for r in caplog.records if "did not exit" in r.getMessage()], "the build was killed at close"
