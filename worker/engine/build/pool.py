"""How many builds run at once, and how much memory each may use.

A fast build keeps about two cores busy (host compiler and nvcc side by side), so a node runs
a build per two of the cores its device lanes do not reserve (worker/engine/cpu_plan.py);
KERNELJUDGE_BUILD_SLOTS overrides that. Each build's processes are capped
at KERNELJUDGE_BUILD_MEMORY_GB of address space (default 8), so one runaway template
instantiation cannot take the node's memory.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

CORES_PER_BUILD = 2
DEFAULT_MEMORY_GB = 8


def build_slots() -> int:
    """KERNELJUDGE_BUILD_SLOTS, else half the cores no device lane reserves (cpu_plan)."""
    configured = os.environ.get("KERNELJUDGE_BUILD_SLOTS")
    if configured:
        return max(1, int(configured))
    from worker.engine.settings import EngineSettings

    build_cores = len(EngineSettings.from_env().cpu_plan().build_cpus) or (os.cpu_count() or 1)
    return max(1, build_cores // CORES_PER_BUILD)


def jobs_per_build() -> int:
    return CORES_PER_BUILD


def memory_cap_bytes() -> int:
    return int(float(os.environ.get("KERNELJUDGE_BUILD_MEMORY_GB", DEFAULT_MEMORY_GB)) * 1024**3)


_slots = threading.BoundedSemaphore(build_slots())


@contextmanager
def build_slot() -> Iterator[None]:
    with _slots:
        yield
