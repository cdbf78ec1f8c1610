"""What a CPU build of torch needs to compile (not run) CUDA extensions: used on dev and CI machines."""

from __future__ import annotations

import os

from sandbox_side.build.toolchain import SUPPORT_INCLUDE, Toolchain


def torch_has_cuda() -> bool:
    import torch

    return torch.version.cuda is not None


def point_torch_at(toolchain: Toolchain) -> None:
    """A CPU torch finds no CUDA toolkit of its own (or a stray one): give it the one the builds use."""
    import torch.utils.cpp_extension as cpp_extension

    if not torch_has_cuda():
        cpp_extension.CUDA_HOME = str(toolchain.cuda_home)
    os.environ.setdefault("CUDA_HOME", str(toolchain.cuda_home))


def support_env() -> dict[str, str]:
    """The stub headers a CPU torch lacks, for every compiler (CPATH); none for a CUDA torch."""
    return {} if torch_has_cuda() else {"CPATH": str(SUPPORT_INCLUDE)}
