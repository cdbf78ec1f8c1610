"""Where the CUDA toolkit, the host compiler and the build-support headers are.

Imported both by the supervisor and inside the build sandbox, so it uses the standard library only.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

# Headers a CPU machine lacks, for compile checks against a CPU torch only (a CUDA torch has the real ones):
# c10/cuda/impl/cuda_cmake_macros.h (not in the CPU wheel), and the few cuBLAS/cuSPARSE/cuSOLVER type
# names ATen/cuda/CUDAContext.h declares with (their headers live in large wheels of their own).
SUPPORT_INCLUDE = Path(__file__).resolve().parent / "support"


class ToolchainMissing(RuntimeError):
    pass


# clang++ instantiates a precompiled header's templates once (-fpch-instantiate-templates): the host
# half then compiles in ~2-4 s where g++ with its precompiled header still takes ~10-15 s.
FAST_CXX_CANDIDATES = ("clang++-22", "clang++")


@dataclass(frozen=True)
class Toolchain:
    cuda_home: Path
    host_cxx: str  # what torch's build.ninja calls `cxx`: $CXX or c++ (links, and the full build)
    fast_cxx: str  # compiles the fast build's host code: clang++ where installed, else host_cxx

    @property
    def fast_cxx_is_clang(self) -> bool:
        return "clang" in Path(self.fast_cxx).name

    @property
    def nvcc(self) -> Path:
        return self.cuda_home / "bin" / "nvcc"

    @property
    def cccl_include(self) -> Path:
        return self.cuda_home / "include" / "cccl"


def _wheel_cuda_home() -> Path | None:
    # The pip wheels nvidia-cuda-nvcc & co. install the toolkit under site-packages/nvidia/cu13.
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        for candidate in sorted(Path(root).glob("cu*"), reverse=True):
            if (candidate / "bin" / "nvcc").is_file():
                return candidate
    return None


def find_cuda_home() -> Path:
    """$CUDA_HOME, else /usr/local/cuda, else the pip-installed toolkit (CPU dev and CI machines)."""
    for value in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if value and (Path(value) / "bin" / "nvcc").is_file():
            return Path(value)
    wheel = _wheel_cuda_home()
    if wheel is not None:
        return wheel
    raise ToolchainMissing("no CUDA toolkit found: set CUDA_HOME, install CUDA at /usr/local/cuda, or run "
                           "scripts/setup.sh dev (it installs nvcc from the nvidia-cuda-nvcc wheels)")


def find_toolchain() -> Toolchain:
    """Compilers by absolute path: the build sandbox gets these very files, not whatever its PATH finds
    first (a GPU host seen here had a `c++` wrapper early on the supervisor's PATH and another gcc build
    at /usr/bin/c++; a precompiled header only fits the compiler that wrote it)."""
    cxx = os.environ.get("CXX", "c++")
    cxx_path = shutil.which(cxx)
    if cxx_path is None:
        raise ToolchainMissing(f"the host C++ compiler {cxx!r} is not on PATH: install g++ (apt-get install g++)")
    fast = os.environ.get("KERNELJUDGE_FAST_CXX") or next(
        (name for name in FAST_CXX_CANDIDATES if shutil.which(name)), cxx)
    return Toolchain(cuda_home=find_cuda_home(), host_cxx=cxx_path, fast_cxx=shutil.which(fast) or cxx_path)
