"""How much memory warm judges may hold: the reference cache's budget, read from the machine.

The supervisor never imports CUDA: the GPU's memory comes from `nvidia-smi` (total and free for the
device, and what each process holds), the host's from /proc/meminfo, and a judge's resident memory
from /proc for its process tree. The budget is a share of the GPU's memory (the rest is for the
jobs: candidate runners, outputs under comparison) and a share of the host's memory split between
the host's lanes; besides, whenever the GPU's free memory drops under `LOW_FREE_SHARE`, the cache
gives up one more judge than its budget asks (another process may be using the device).
"""

from __future__ import annotations

import functools
import logging
import shutil
import subprocess
import time
from dataclasses import dataclass

from worker.engine.process_tree import descendants

log = logging.getLogger(__name__)

# A judge process's CUDA context and allocator slack when nvidia-smi cannot tell per process.
CUDA_CONTEXT_BYTES = 600 * 1024**2
LOW_FREE_SHARE = 0.10
FREE_MEMORY_TTL_S = 2.0  # nvidia-smi is slow to start: a reading is reused this long
MIB = 1024**2


def _smi(*args: str) -> list[list[str]] | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        done = subprocess.run([smi, *args, "--format=csv,noheader,nounits"], capture_output=True, text=True,
                              timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("nvidia-smi failed: %s", exc)
        return None
    if done.returncode != 0:
        return None
    return [[field.strip() for field in line.split(",")] for line in done.stdout.splitlines() if line.strip()]


@dataclass(frozen=True)
class DeviceMemory:
    total_bytes: int
    free_bytes: int


def gpu_memory(gpu_index: int | None) -> DeviceMemory | None:
    """Total and free memory of one GPU (the first one when no index is given); None without nvidia-smi."""
    rows = _smi(f"--id={gpu_index if gpu_index is not None else 0}", "--query-gpu=memory.total,memory.free")
    if not rows:
        return None
    try:
        total, free = rows[0][:2]
        return DeviceMemory(int(float(total)) * MIB, int(float(free)) * MIB)
    except (ValueError, IndexError):
        return None


@functools.cache
def gpu_total_bytes(gpu_index: int | None) -> int | None:
    memory = gpu_memory(gpu_index)
    return memory.total_bytes if memory else None


def gpu_process_bytes(pids: list[int]) -> int | None:
    """GPU memory the given processes hold, as the driver sees it; None when nvidia-smi cannot say."""
    rows = _smi("--query-compute-apps=pid,used_memory")
    if rows is None:
        return None
    wanted = set(pids)
    total = 0
    for row in rows:
        try:
            if int(row[0]) in wanted:
                total += int(float(row[1])) * MIB
        except (ValueError, IndexError):
            continue
    return total


def host_memory() -> tuple[int, int]:
    """(MemTotal, MemAvailable) in bytes."""
    values: dict[str, int] = {}
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                name, _, rest = line.partition(":")
                parts = rest.split()
                if parts:
                    values[name] = int(parts[0]) * 1024
    except OSError:
        return 0, 0
    return values.get("MemTotal", 0), values.get("MemAvailable", values.get("MemFree", 0))


def tree_rss_bytes(root: int | None) -> int:
    """Resident memory of a process and its descendants (a judge's sandbox tree)."""
    if root is None:
        return 0
    total = 0
    for pid in descendants(root):
        try:
            with open(f"/proc/{pid}/status") as handle:
                for line in handle:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
                        break
        except (OSError, ValueError, IndexError):
            continue
    return total


@dataclass
class HeldMemory:
    """What one warm judge holds."""

    device_bytes: int = 0
    host_bytes: int = 0


def measure_judge(root_pid: int | None, reported_device_bytes: int, on_gpu: bool, *, sealed_bytes: int = 0
                  ) -> HeldMemory:
    """A judge's memory: its process tree's resident memory plus its sealed input sets (a memory file it
    keeps for its candidates, mapped by nobody: no process's resident memory counts it), and on a GPU
    what the driver says its processes hold (else what the judge reported, plus a context's worth): the
    larger of the two."""
    host = tree_rss_bytes(root_pid) + sealed_bytes
    if not on_gpu:
        return HeldMemory(0, host)
    measured = gpu_process_bytes(descendants(root_pid)) if root_pid is not None else None
    device = max(measured or 0, reported_device_bytes + (0 if measured else CUDA_CONTEXT_BYTES))
    return HeldMemory(device, host)


class MemoryBudget:
    """The reference cache's limits: device and host bytes its judges may hold together."""

    def __init__(self, device_limit: int | None, host_limit: int, *, gpu_index: int | None = None,
                 watch_device: bool = False) -> None:
        self.device_limit = device_limit  # None: no device budget (CPU)
        self.host_limit = host_limit
        self.gpu_index = gpu_index
        self.watch_device = watch_device
        self._free: tuple[float, DeviceMemory | None] = (0.0, None)

    @classmethod
    def for_worker(cls, *, on_gpu: bool, gpu_index: int | None, gpu_fraction: float, host_fraction: float,
                   lanes_on_host: int) -> MemoryBudget:
        total_host, _ = host_memory()
        host_limit = int(total_host * host_fraction / max(lanes_on_host, 1)) if total_host else 8 * 1024**3
        device_limit = None
        if on_gpu:
            total = gpu_total_bytes(gpu_index)
            device_limit = int(total * gpu_fraction) if total else None
        return cls(device_limit, host_limit, gpu_index=gpu_index, watch_device=on_gpu and device_limit is not None)

    def share(self, held: HeldMemory) -> float:
        """How much of the budget one judge takes (the scarcer resource counts): its eviction size."""
        parts = [held.host_bytes / self.host_limit if self.host_limit else 0.0]
        if self.device_limit:
            parts.append(held.device_bytes / self.device_limit)
        return max(sum(parts), 1e-6)

    def over(self, device_bytes: int, host_bytes: int) -> bool:
        if self.device_limit is not None and device_bytes > self.device_limit:
            return True
        return host_bytes > self.host_limit

    def device_short(self) -> bool:
        """The GPU's free memory is under LOW_FREE_SHARE of it (read at most every FREE_MEMORY_TTL_S)."""
        if not self.watch_device:
            return False
        read_at, memory = self._free
        if time.monotonic() - read_at > FREE_MEMORY_TTL_S:
            memory = gpu_memory(self.gpu_index)
            self._free = (time.monotonic(), memory)
        return memory is not None and memory.free_bytes < LOW_FREE_SHARE * memory.total_bytes
