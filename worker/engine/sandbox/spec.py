"""What a sandboxed child may see and use, as plain data."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Mount:
    source: Path
    target: str
    writable: bool = False


@dataclass(frozen=True)
class ResourceLimits:
    """Kernel-enforced limits. The wall-clock limit is the caller's: `SandboxProcess.receive(timeout_s)`."""

    cpu_s: int = 600
    file_size_bytes: int = 8 * 1024**3
    open_files: int = 1024
    # Added to the number of processes the sandbox's user already has (RLIMIT_NPROC counts
    # every process of the real uid, so an absolute cap would depend on the host).
    extra_processes: int = 1024
    # Address-space cap; None for CUDA children (the driver reserves huge virtual ranges).
    address_space_bytes: int | None = None
    # Bytes kept of each of stdout and stderr (head and tail halves).
    log_bytes: int = 64 * 1024


@dataclass
class SandboxSpec:
    mounts: list[Mount] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    gpu_device_nodes: list[str] = field(default_factory=list)
    isolate_network: bool = True
    workdir: str = "/tmp"
    tmp_size_bytes: int = 4 * 1024**3
    limits: ResourceLimits = field(default_factory=ResourceLimits)
    # CPU cores the child may run on (None: any) and its nice value (0: the supervisor's), set before
    # exec and inherited by everything it starts: timing isolation from builds (worker/engine/cpu_plan.py).
    cpus: tuple[int, ...] | None = None
    nice: int = 0
