"""Larger kernel buffers for the pipes that carry a sandbox's commands and replies.

Tensors cross these pipes twice per job and direction (judge -> supervisor -> candidate, and back). With
Linux's default 64 KiB pipe, 512 MiB moved at 0.4 GB/s on the build host; with 512 KiB at 0.95 GB/s (a
read per 512 KiB instead of per 64 KiB). On an H200 a warm softmax job (128 MiB per tensor) spent 2.3 s
handing over its inputs and 6.4 s in its call (benchmarks/results/throughput_gpu_2026-11-26_h200.md).

The kernel charges pipe buffers to the user who made the pipe; without CAP_SYS_RESOURCE, once that
user holds more than fs.pipe-user-pages-soft, every *new* pipe of the user gets a single page. So
without the capability, enlarged buffers are kept within a quarter of that limit (the rest is left to
default pipes), and a pipe beyond it keeps the default size.
"""

from __future__ import annotations

import fcntl
import logging
import threading
from pathlib import Path

log = logging.getLogger(__name__)

F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
WANTED_BYTES = 512 * 1024
PAGE_BYTES = 4096
CAP_SYS_RESOURCE = 24
SOFT_LIMIT_SHARE = 4  # enlarged buffers take at most 1/SOFT_LIMIT_SHARE of the user's soft limit


def _has_sys_resource() -> bool:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> CAP_SYS_RESOURCE & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def _soft_limit_bytes() -> int | None:
    """fs.pipe-user-pages-soft in bytes (the kernel's default where it cannot be read); None when it is 0 (no
    limit)."""
    try:
        pages = int(Path("/proc/sys/fs/pipe-user-pages-soft").read_text())
    except (OSError, ValueError):
        return 16384 * PAGE_BYTES  # the kernel's default
    return pages * PAGE_BYTES if pages > 0 else None


class PipeBuffers:
    """This process's enlarged pipe buffers, within what the kernel lets its user hold."""

    def __init__(self, budget_bytes: int | None, wanted_bytes: int = WANTED_BYTES):
        self.budget_bytes = budget_bytes  # None: no limit (CAP_SYS_RESOURCE, or no soft limit)
        self.wanted_bytes = wanted_bytes
        self.held_bytes = 0
        self._lock = threading.Lock()

    @classmethod
    def for_this_process(cls) -> PipeBuffers:
        soft = None if _has_sys_resource() else _soft_limit_bytes()
        return cls(None if soft is None else soft // SOFT_LIMIT_SHARE)

    def enlarge(self, fds: list[int]) -> int:
        """Give each pipe of `fds` (one end each) the wanted buffer while the budget lasts; returns the
        bytes taken from the budget, to be given back with `release` once the pipes are gone."""
        taken = 0
        for fd in fds:
            with self._lock:
                if self.budget_bytes is not None and self.held_bytes + self.wanted_bytes > self.budget_bytes:
                    break
                self.held_bytes += self.wanted_bytes
            try:
                fcntl.fcntl(fd, F_SETPIPE_SZ, self.wanted_bytes)
            except OSError as exc:  # refused (a limit): the pipe keeps its default size
                log.debug("pipe buffer not enlarged: %s", exc)
                with self._lock:
                    self.held_bytes -= self.wanted_bytes
                break
            taken += self.wanted_bytes
        return taken

    def release(self, taken: int) -> None:
        with self._lock:
            self.held_bytes = max(0, self.held_bytes - taken)


_buffers: PipeBuffers | None = None
_buffers_lock = threading.Lock()


def pipe_buffers() -> PipeBuffers:
    global _buffers
    with _buffers_lock:
        if _buffers is None:
            _buffers = PipeBuffers.for_this_process()
        return _buffers
