"""How many builds run at once.

A fast build keeps about two cores busy (host compiler and nvcc side by side), so a node runs
a build per two of the cores its device lanes do not reserve (worker/engine/cpu_plan.py);
KERNELJUDGE_BUILD_SLOTS overrides that. (Each build's processes are capped at KERNELJUDGE_BUILD_MEMORY_GB
of address space, EngineSettings.build_memory_bytes, so one runaway template instantiation cannot take the
node's memory.)
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from worker.engine.engine_settings import EngineSettings

CORES_PER_BUILD = 2

_slots: threading.BoundedSemaphore | None = None
_slots_lock = threading.Lock()


def build_slots(settings: EngineSettings) -> int:
    """KERNELJUDGE_BUILD_SLOTS, else half the cores no device lane reserves (cpu_plan)."""
    if settings.build_slots is not None:
        return max(1, settings.build_slots)
    build_cores = len(settings.cpu_plan().build_cpus) or (os.cpu_count() or 1)
    return max(1, build_cores // CORES_PER_BUILD)


def jobs_per_build() -> int:
    return CORES_PER_BUILD


@contextmanager
def build_slot(settings: EngineSettings) -> Iterator[None]:
    """One of the process's build slots. Their number comes from the first build's settings: every lane of
    a process has its settings from the one configuration the process loaded."""
    global _slots
    with _slots_lock:
        if _slots is None:
            _slots = threading.BoundedSemaphore(build_slots(settings))
        slots = _slots
    with slots:
        yield
