"""The fast build of one load_inline extension, in the build directory torch prepared.

main.cpp (torch's bindings, unchanged) and the host half of cuda.cu compile with the host compiler
against the precompiled torch header; the device half compiles with nvcc without torch. The two
halves of cuda.cu are joined into the cuda.cuda.o that ninja expects, then linked with torch's own
link flags. Ninja's records are made to match (ninja_state), so the candidate's load_inline call at
run time finds the library up to date, exactly as after a full build.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from sandbox_side.build.merge import merged_source, why_not_merged
from sandbox_side.build.ninja_state import (
    CUDA_OBJECT,
    CUDA_SOURCE,
    MAIN_OBJECT,
    MAIN_SOURCE,
    TorchBuildPlan,
    confirm_up_to_date,
    install_outputs,
    record_with_stand_ins,
)
from sandbox_side.build.pch import HostPch
from sandbox_side.build.split import HALF_HEADERS, NotSplittable, split_cuda_source
from sandbox_side.build.toolchain import Toolchain

WORK_DIR = "kj_fast"
LAUNCHER_SYMBOL = "void kj_launch_"


class CompileFailed(Exception):
    """A compiler rejected a fast-build file; `unit` is main | host | device | link."""

    def __init__(self, unit: str, log: str) -> None:
        super().__init__(f"{unit}: {log[-300:]}")
        self.unit = unit
        self.log = log


@dataclass
class FastBuildReport:
    seconds: dict[str, float] = field(default_factory=dict)  # wall time of each step
    linked: bool = True  # False where only objects could be built (CPU torch: no CUDA libraries)
    merge: str = ""  # why main.cpp and the host half were two units ("": one, see merge.py)


def _join(work: Path, objects: list[str], output: str) -> None:
    joined = subprocess.run(["ld", "-r", *objects, "-o", output], cwd=work, capture_output=True, text=True,
                            check=False)
    if joined.returncode != 0:
        raise CompileFailed("link", joined.stderr)


def _include_dirs(flags: list[str]) -> list[str]:
    dirs = []
    for index, flag in enumerate(flags[:-1]):
        if flag in {"-isystem", "-I"}:
            dirs.append(flags[index + 1])
    dirs += [flag[2:] for flag in flags if flag.startswith("-I") and len(flag) > 2]
    return dirs


def _standard(flags: list[str]) -> str:
    return next((flag.split("=", 1)[1] for flag in reversed(flags) if flag.startswith("-std=")), "c++17")


class _Job:
    """One compiler process, collected later; its time is taken when it exits, not when collected."""

    def __init__(self, unit: str, command: list[str], cwd: Path) -> None:
        self.unit = unit
        started = time.monotonic()
        self.process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True)
        self.output = ""
        self.seconds = 0.0

        def collect() -> None:
            self.output = self.process.communicate()[0]
            self.seconds = round(time.monotonic() - started, 2)

        self.collector = threading.Thread(target=collect, daemon=True)
        self.collector.start()

    def finish(self, report: FastBuildReport) -> str:
        self.collector.join()
        report.seconds[self.unit] = self.seconds
        if self.process.returncode != 0:
            raise CompileFailed(self.unit, self.output)
        return self.output


def _usable_ldflags(ldflags: list[str]) -> list[str]:
    """Link flags less the libraries a CPU torch does not have (c10_cuda, torch_cuda, cudart)."""
    dirs = [flag[2:] for flag in ldflags if flag.startswith("-L")]
    kept = []
    for flag in ldflags:
        if flag.startswith("-l") and not any((Path(d) / f"lib{flag[2:]}.so").exists() for d in dirs):
            continue
        kept.append(flag)
    return kept


def _instantiations(host_object: Path) -> list[str]:
    """The launcher specializations the host code calls: `template void kj_launch_k<float>(...);`."""
    symbols = subprocess.run(["nm", "-C", "--undefined-only", str(host_object)], capture_output=True,
                             text=True, check=True).stdout
    lines = []
    for line in symbols.splitlines():
        symbol = line.strip().removeprefix("U ").strip()
        if not symbol.startswith(LAUNCHER_SYMBOL) or "<" not in symbol.split("(", 1)[0]:
            continue
        if "(anonymous namespace)" in symbol or "{lambda" in symbol:
            raise NotSplittable(f"a kernel template is instantiated with a local type: {symbol}")
        lines.append(f"template {symbol};")
    return lines


def _undefined_launchers(obj: Path) -> list[str]:
    symbols = subprocess.run(["nm", "-C", "--undefined-only", str(obj)], capture_output=True, text=True,
                             check=True).stdout
    return [line.strip() for line in symbols.splitlines() if LAUNCHER_SYMBOL.removeprefix("void ") in line]


def build_fast(directory: Path, toolchain: Toolchain, pch: HostPch, *, link_cuda_libraries: bool) -> FastBuildReport:
    """Build the extension in `directory` (torch has written main.cpp, cuda.cu and build.ninja there).

    Raises NotSplittable or CompileFailed; the caller then takes the full build.
    """
    main_text = (directory / MAIN_SOURCE).read_text()
    cuda_path = directory / CUDA_SOURCE
    if not cuda_path.exists():
        raise NotSplittable("no cuda_sources: nothing for the fast build to save")
    cuda_text = cuda_path.read_text()
    try:
        return _build(directory, toolchain, pch, main_text, cuda_text, link_cuda_libraries)
    except BaseException:
        # The full build that follows must see the real sources, not ninja's stand-ins.
        (directory / MAIN_SOURCE).write_text(main_text)
        cuda_path.write_text(cuda_text)
        shutil.rmtree(directory / WORK_DIR, ignore_errors=True)
        raise


def _build(directory: Path, toolchain: Toolchain, pch: HostPch, main_text: str, cuda_text: str,
           link_cuda_libraries: bool) -> FastBuildReport:
    report = FastBuildReport(linked=link_cuda_libraries)
    started = time.monotonic()
    plan = TorchBuildPlan.read(directory)
    split = split_cuda_source(cuda_text, toolchain, _include_dirs(plan.cflags), _standard(plan.cflags))
    report.seconds["split"] = round(time.monotonic() - started, 2)

    work = directory / WORK_DIR
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    (work / MAIN_SOURCE).write_text(main_text)
    (work / "cuda_host.cpp").write_text(split.host)
    device_source = work / "cuda_dev.cu"
    pch_flags = pch.compile_flags()
    cuda_defines = [flag for flag in plan.cuda_cflags if flag.startswith("-D") and flag not in plan.cflags]
    cxx = toolchain.fast_cxx

    def two_units() -> list[_Job]:
        return [_Job("main", [cxx, *plan.cflags, *pch_flags, "-c", MAIN_SOURCE, "-o", "main.o", *plan.post_cflags],
                     work),
                _Job("host", [cxx, *plan.cflags, *cuda_defines, "-isystem", str(toolchain.cccl_include), *pch_flags,
                              "-x", "c++", "-c", "cuda_host.cpp", "-o", "cuda_host.o", *plan.post_cflags], work)]

    # One translation unit for both when that cannot change either (merge.py): g++ pays its per-unit
    # template work once.
    report.merge = why_not_merged(main_text, cuda_text) or ""
    if not report.merge:
        (work / "merged.cpp").write_text(merged_source(split.host, main_text))
        host_jobs = [_Job("host+main", [cxx, *plan.cflags, *cuda_defines, "-isystem", str(toolchain.cccl_include),
                                        *pch_flags, "-x", "c++", "-c", "merged.cpp", "-o", "merged.o",
                                        *plan.post_cflags], work)]
    else:
        host_jobs = two_units()

    def device_command(pre_includes: list[str]) -> list[str]:
        return [str(toolchain.nvcc), *plan.cuda_cflags,
                *[arg for header in pre_includes for arg in ("--pre-include", header)],
                "-c", device_source.name, "-o", "cuda_dev.o", *plan.cuda_post_cflags]

    targets = [MAIN_OBJECT, CUDA_OBJECT] + ([plan.library] if link_cuda_libraries else [])
    device_job: _Job | None = None
    if not split.has_template_kernels:
        device_source.write_text(split.device)
        device_job = _Job("device", device_command(split.device_pre_includes), work)
    try:
        # Runs while the compilers above do: ninja's records from the same command lines.
        records_started = time.monotonic()
        recorded = record_with_stand_ins(directory, targets)
        report.seconds["ninja-records"] = round(time.monotonic() - records_started, 2)
        try:
            for job in host_jobs:
                job.finish(report)
        except CompileFailed as failure:
            if report.merge:
                raise
            # Compiled again as two units, so that the candidate's errors are reported as they always were.
            report.merge = f"the merged unit did not compile ({failure.log.strip().splitlines()[-1][:200]})"
            host_jobs = two_units()
            for job in host_jobs:
                job.finish(report)
        merged = not report.merge
        host_object = "merged.o" if merged else "cuda_host.o"
        if device_job is None:
            instantiations = _instantiations(work / host_object)
            device_source.write_text(split.device + "\n" + "\n".join(instantiations) + "\n")
            pre_includes = list(split.device_pre_includes)
            if any("c10::" in line for line in instantiations):  # AT_DISPATCH's Half and BFloat16
                pre_includes += [h for h in HALF_HEADERS if h not in pre_includes]
            device_job = _Job("device", device_command(pre_includes), work)
        device_job.finish(report)
    finally:
        for leftover in (*host_jobs, device_job):
            if leftover is not None and leftover.process.poll() is None:
                leftover.process.kill()
    link_started = time.monotonic()
    # main.o and cuda.cuda.o are only ever linked together: a merged unit's object stands for main.o, and
    # cuda.cuda.o is then the device half alone.
    _join(work, [host_object, "cuda_dev.o"], "kj_launch_check.o")
    unmatched = _undefined_launchers(work / "kj_launch_check.o")
    if unmatched:
        raise CompileFailed("link", "the host half calls launchers the device half does not define "
                                    f"(their types differ between nvcc and the host compiler): {unmatched[0]}")
    _join(work, ["cuda_dev.o"] if merged else ["cuda_host.o", "cuda_dev.o"], CUDA_OBJECT)
    main_object = work / ("merged.o" if merged else "main.o")
    outputs = {MAIN_OBJECT: main_object, CUDA_OBJECT: work / CUDA_OBJECT}
    if link_cuda_libraries:
        _Job("link", [toolchain.host_cxx, main_object.name, CUDA_OBJECT, *plan.ldflags, "-o", plan.library],
             work).finish(report)
        outputs[plan.library] = work / plan.library
    report.seconds["link"] = round(time.monotonic() - link_started, 2)
    install_outputs(directory, {MAIN_SOURCE: main_text, CUDA_SOURCE: cuda_text}, outputs, recorded)
    confirm_up_to_date(directory, targets)
    shutil.rmtree(work, ignore_errors=True)
    report.seconds["total"] = round(time.monotonic() - started, 2)
    return report


def link_for_abi_check(directory: Path, toolchain: Toolchain) -> Path:
    """CPU torch only: link what was built, leaving out the CUDA libraries it lacks, to load it."""
    plan = TorchBuildPlan.read(directory)
    library_dir = toolchain.cuda_home / "lib"
    cudart = sorted(library_dir.glob("libcudart.so*"))
    extra = [f"-L{library_dir}", f"-l:{cudart[0].name}", f"-Wl,-rpath,{library_dir}"] if cudart else []
    output = directory / plan.library
    result = subprocess.run([toolchain.host_cxx, MAIN_OBJECT, CUDA_OBJECT, *_usable_ldflags(plan.ldflags), *extra,
                             "-o", plan.library], cwd=directory, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise CompileFailed("link", result.stdout + result.stderr)
    return output
