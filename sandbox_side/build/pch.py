"""The precompiled torch header for host code: built once per (torch, compiler, flags) by trusted code.

Candidates only read it: the build sandbox mounts the directory read-only. The header pre-includes
torch/extension.h plus the CUDA runtime API, which covers what main.cpp and the host half of cuda.cu
include. A candidate whose compile flags have no precompiled header takes the full build.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from sandbox_side.build.toolchain import Toolchain
from sandbox_side.build.torch_support import point_torch_at, support_env

PCH_HEADER = "kj_torch.h"
PCH_TEXT = "#include <torch/extension.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n"
READY = "READY"
KEY_FILE = "key.json"  # what the header was built for: says why a build found no header that fits
# The extra_cflags candidates pass most (the corpus: none, -O3, -O2); each needs its own header.
DEFAULT_VARIANTS: tuple[tuple[str, ...], ...] = ((), ("-O3",), ("-O2",))
EXTENSION_NAME_FLAG = "-DTORCH_EXTENSION_NAME="


@dataclass(frozen=True)
class HostPch:
    header: Path  # kj_torch.h; compiled beside it as kj_torch.h.pch (clang) or kj_torch.h.gch (g++)

    def compile_flags(self) -> list[str]:
        clang = self.header.with_name(PCH_HEADER + ".pch")
        if clang.exists():
            return ["-include-pch", str(clang)]
        return ["-include", str(self.header), "-Winvalid-pch"]


def _compiled_name(toolchain: Toolchain) -> tuple[str, list[str]]:
    if toolchain.fast_cxx_is_clang:
        return PCH_HEADER + ".pch", ["-fpch-instantiate-templates"]
    return PCH_HEADER + ".gch", []


def pch_flags(cflags: list[str]) -> list[str]:
    """The flags that decide whether a header fits: torch's cflags less the extension's name."""
    return [flag for flag in cflags if not flag.startswith(EXTENSION_NAME_FLAG)]


def compiler_identity(toolchain: Toolchain) -> str:
    return subprocess.run([toolchain.fast_cxx, "--version"], capture_output=True, text=True,
                          check=True).stdout.splitlines()[0]


def pch_key(flags: list[str], compiler: str, torch_version: str) -> str:
    digest = hashlib.sha256("\0".join([torch_version, compiler, *flags]).encode()).hexdigest()
    return digest[:24]


def find_pch(root: Path, cflags: list[str], compiler: str, torch_version: str) -> HostPch | None:
    directory = root / pch_key(pch_flags(cflags), compiler, torch_version)
    if (directory / READY).exists():
        return HostPch(header=directory / PCH_HEADER)
    return None


def pch_mismatch(root: Path, cflags: list[str], compiler: str, torch_version: str) -> str:
    """How these flags differ from the closest header there is (for the fallback reason)."""
    wanted = {"torch": torch_version, "compiler": compiler, "flags": pch_flags(cflags)}
    keys = []
    for path in sorted(root.glob(f"*/{KEY_FILE}")):
        try:
            keys.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    if not keys:
        return "no precompiled header has been built"

    def differences(key: dict) -> list[str]:
        found = []
        for field in ("torch", "compiler"):
            if key.get(field) != wanted[field]:
                found.append(f"{field} {wanted[field]!r} vs header's {key.get(field)!r}")
        extra = [f for f in wanted["flags"] if f not in key.get("flags", [])]
        missing = [f for f in key.get("flags", []) if f not in wanted["flags"]]
        if extra:
            found.append(f"flags only here: {' '.join(extra)}")
        if missing:
            found.append(f"flags only in the header: {' '.join(missing)}")
        if not found and key.get("flags") != wanted["flags"]:
            found.append("same flags in another order")
        return found

    closest = min((differences(key) for key in keys), key=len)
    return "; ".join(closest)


def torch_cflags(toolchain: Toolchain, extra_cflags: list[str]) -> list[str]:
    """The cflags torch's load_inline writes for a CUDA extension with these extra_cflags."""
    import torch.utils.cpp_extension as cpp_extension

    from sandbox_side.build.ninja_state import TorchBuildPlan

    point_torch_at(toolchain)
    with tempfile.TemporaryDirectory(prefix="kj-pch-flags-") as tmp:
        build_file = Path(tmp) / "build.ninja"
        cpp_extension._write_ninja_file_to_build_library(
            path=str(build_file), name="kj_pch", sources=[f"{tmp}/main.cpp", f"{tmp}/cuda.cu"],
            extra_cflags=extra_cflags, extra_cuda_cflags=["-arch=sm_90"], extra_sycl_cflags=[], extra_ldflags=[],
            extra_include_paths=[], with_cuda=True, with_sycl=False, is_standalone=False)
        # (an explicit -arch keeps torch from looking for a GPU; host flags do not depend on it)
        return TorchBuildPlan.read(Path(tmp)).cflags


def ensure_pchs(root: Path, toolchain: Toolchain, torch_version: str,
                variants: tuple[tuple[str, ...], ...] = DEFAULT_VARIANTS) -> Path:
    """Build the missing headers (in parallel); returns `root`, to mount read-only into builds."""
    root.mkdir(parents=True, exist_ok=True)
    compiler = compiler_identity(toolchain)
    pending: list[tuple[Path, subprocess.Popen, TextIO]] = []
    for variant in variants:
        flags = pch_flags(torch_cflags(toolchain, list(variant)))
        directory = root / pch_key(flags, compiler, torch_version)
        if (directory / READY).exists():
            continue
        directory.mkdir(exist_ok=True)
        lock: TextIO = open(directory / ".lock", "w")  # noqa: SIM115 - held until that compile finishes
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (directory / READY).exists():
            lock.close()
            continue
        header = directory / PCH_HEADER
        header.write_text(PCH_TEXT)
        (directory / KEY_FILE).write_text(json.dumps({"torch": torch_version, "compiler": compiler,
                                                      "flags": flags}))
        compiled, options = _compiled_name(toolchain)
        command = [toolchain.fast_cxx, *flags, *options, "-isystem", str(toolchain.cccl_include),
                   "-x", "c++-header", str(header), "-o", str(directory / compiled)]
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   env={**os.environ, **support_env()})
        pending.append((directory, process, lock))
    failures = []
    for directory, process, lock in pending:
        output, _ = process.communicate()
        if process.returncode == 0:
            for path in directory.iterdir():
                path.chmod(0o444)
            (directory / READY).write_text("")
        else:
            failures.append(f"{directory.name}: {output[-1500:]}")
        lock.close()
    if failures:
        raise RuntimeError("building the precompiled torch header failed:\n" + "\n".join(failures))
    return root

