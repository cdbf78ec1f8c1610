"""The sandbox section of the configuration tree: how sandboxes are made (the bubblewrap binary, the
network, a root-run supervisor's uids or cgroups, the size of what a sandbox may write, its memory cap)
and whether a process checks that they work before it takes jobs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from worker.config.env_section import EnvSection
from worker.engine.sandbox.spec import MIB, SANDBOX_MEMORY_BYTES, IsolationConfig

_SIZE_UNITS = {"": 1, "K": 1024, "M": MIB, "G": 1024**3, "T": 1024**4}
# Less than this cannot start an interpreter with torch: a cap this low is a typo, not a choice.
MIN_SANDBOX_MEMORY_BYTES = 256 * MIB
_ISOLATION = IsolationConfig()


def parse_memory_size(variable: str, text: str) -> int:
    """A size in bytes, or with a binary unit: `16G`, `16GiB`, `12288M`, `17179869184`."""
    value = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = value[-1:] if value[-1:] in _SIZE_UNITS else ""
    number = value[:len(value) - len(unit)].strip()
    try:
        size = int(float(number) * _SIZE_UNITS[unit])
    except (ValueError, OverflowError):
        raise ValueError(f"{variable} must be a size such as 16G, 12288M or a number of bytes, not {text!r}") from None
    if size < MIN_SANDBOX_MEMORY_BYTES:
        raise ValueError(f"{variable}={text!r} is under {MIN_SANDBOX_MEMORY_BYTES // MIB} MiB: no sandbox "
                         "could start under it")
    return size


class SandboxSection(EnvSection):
    # The bubblewrap binary; None: `bwrap` on PATH.
    bwrap: str | None = Field(None, validation_alias="KERNELJUDGE_BWRAP")
    isolate_network: bool = Field(True, validation_alias="KERNELJUDGE_SANDBOX_ISOLATE_NETWORK")
    # How a root-run worker caps each sandbox's processes and threads (worker/engine/sandbox/identity.py):
    # auto, uid or cgroup; the uids sandboxes take, (first, count) out of `FIRST-LAST`; their lock files.
    isolation_mode: str = Field(_ISOLATION.mode, validation_alias="KERNELJUDGE_SANDBOX_ISOLATION")
    uid_range: tuple[int, int] = Field((_ISOLATION.uid_first, _ISOLATION.uid_count),
                                       validation_alias="KERNELJUDGE_SANDBOX_UIDS")
    uid_lock_dir: Path = Field(_ISOLATION.lock_dir, validation_alias="KERNELJUDGE_SANDBOX_UID_LOCK_DIR")
    # Size caps (MiB) of what a sandbox can write (each a tmpfs in memory): /tmp, /dev/shm and the
    # extension folder (/kj/ext: a build's output, a run's private copy of the built extension).
    tmp_mb: int = Field(4096, validation_alias="KERNELJUDGE_SANDBOX_TMP_MB")
    shm_mb: int = Field(256, validation_alias="KERNELJUDGE_SANDBOX_SHM_MB")
    ext_mb: int = Field(1024, validation_alias="KERNELJUDGE_SANDBOX_EXT_MB")
    # Cap on each sandbox's memory as a whole (its processes and the tmpfs pages above; a memory cgroup
    # per sandbox for a root-run worker, sandbox/identity.py): judges, candidate runners and builds.
    memory_bytes: int = Field(SANDBOX_MEMORY_BYTES, validation_alias="KERNELJUDGE_SANDBOX_MEMORY")
    # Start without the sandbox self-check (`kerneljudge serve` and each Celery worker process).
    skip_selfcheck: bool = Field(False, validation_alias="KERNELJUDGE_SKIP_SELFCHECK")

    @field_validator("isolation_mode", mode="before")
    @classmethod
    def _isolation_mode(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        mode = value.strip().lower()
        if mode not in IsolationConfig.MODES:
            raise ValueError(f"KERNELJUDGE_SANDBOX_ISOLATION must be one of {', '.join(IsolationConfig.MODES)}, "
                             f"not {mode!r}")
        return mode

    @field_validator("uid_range", mode="before")
    @classmethod
    def _uid_range(cls, value: Any) -> Any:
        return IsolationConfig.parse_uid_range(value) if isinstance(value, str) else value

    @field_validator("memory_bytes", mode="before")
    @classmethod
    def _memory(cls, value: Any) -> Any:
        return parse_memory_size("KERNELJUDGE_SANDBOX_MEMORY", value) if isinstance(value, str) else value

    def isolation(self) -> IsolationConfig:
        first, count = self.uid_range
        return IsolationConfig(mode=self.isolation_mode, uid_first=first, uid_count=count,
                               lock_dir=self.uid_lock_dir, bwrap=self.bwrap)
