"""What a sandboxed child may see and use, as plain data."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

MIB = 1024**2
GIB = 1024**3
# Default cap on each sandbox's memory (KERNELJUDGE_SANDBOX_MEMORY; see ResourceLimits.memory_bytes).
SANDBOX_MEMORY_BYTES = 16 * GIB


@dataclass(frozen=True)
class Mount:
    """A host path bound into the sandbox, read-only (no sandbox gets a writable host directory:
    everything it writes goes to a size-capped tmpfs, see Scratch)."""

    source: Path
    target: str


@dataclass(frozen=True)
class Scratch:
    """A private, writable, size-capped tmpfs at `target` (a host temporary folder without a sandbox)."""

    target: str
    size_bytes: int


@dataclass(frozen=True)
class ResourceLimits:
    """Kernel-enforced limits. The wall-clock limit is the caller's: `SandboxProcess.receive(timeout_s)`."""

    cpu_s: int = 600
    file_size_bytes: int = 8 * 1024**3
    open_files: int = 1024
    # Processes and threads the sandbox may have. Enforced per sandbox (its own uid or its own
    # pids cgroup) when the supervisor runs as root; otherwise added to what the supervisor's uid
    # already runs (RLIMIT_NPROC counts every task of the real uid). See sandbox/identity.py.
    extra_processes: int = 1024
    # Address-space cap; None for CUDA children (the driver reserves huge virtual ranges).
    address_space_bytes: int | None = None
    # Cap on all the host memory the sandbox's processes are charged for together: anonymous memory,
    # and the pages they write to tmpfs (/tmp, /dev/shm, /kj/ext), memfds and shm. Enforced by a memory
    # cgroup of the sandbox's own when the supervisor runs as root and the host has a memory controller
    # (sandbox/identity.py); over it the kernel OOM-kills inside the sandbox. None: not capped.
    memory_bytes: int | None = SANDBOX_MEMORY_BYTES
    # Bytes kept of each of stdout and stderr (head and tail halves).
    log_bytes: int = 64 * 1024


@dataclass(frozen=True)
class IsolationConfig:
    """How sandboxes are started: the bubblewrap binary, and how a root-run supervisor keeps each sandbox's
    processes countable (see sandbox/identity.py); made from the configuration's sandbox section.

    mode: auto (an unprivileged uid of its own when everything the sandbox mounts is reachable by
    one, else a pids cgroup), uid, or cgroup. A supervisor that is not root always runs sandboxes
    as itself."""

    mode: str = "auto"
    uid_first: int = 610000
    uid_count: int = 1024
    lock_dir: Path = Path("/run/kerneljudge/sandbox-uids")
    bwrap: str | None = None  # the bubblewrap binary; None: `bwrap` on PATH

    MODES = ("auto", "uid", "cgroup")

    @staticmethod
    def parse_uid_range(text: str) -> tuple[int, int]:
        """`FIRST-LAST` (inclusive) -> (first, count)."""
        first_text, _, last_text = text.partition("-")
        first, last = int(first_text), int(last_text or first_text)
        if first <= 0 or last < first:
            raise ValueError(f"sandbox uid range must be FIRST-LAST with 0 < FIRST <= LAST, not {text!r}")
        return first, last - first + 1


@dataclass
class SandboxSpec:
    mounts: list[Mount] = field(default_factory=list)
    scratch: list[Scratch] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    gpu_device_nodes: list[str] = field(default_factory=list)
    isolate_network: bool = True
    workdir: str = "/tmp"
    tmp_size_bytes: int = 4 * 1024**3
    # /dev/shm is a tmpfs of its own (without it, bwrap's /dev would take writes up to half the RAM).
    shm_size_bytes: int = 256 * MIB
    limits: ResourceLimits = field(default_factory=ResourceLimits)
    isolation: IsolationConfig = field(default_factory=IsolationConfig)
    # CPU cores the child may run on (None: any) and its nice value (0: the supervisor's), set before
    # exec and inherited by everything it starts: timing isolation from builds (worker/engine/cpu_plan.py).
    cpus: tuple[int, ...] | None = None
    nice: int = 0
