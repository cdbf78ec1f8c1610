"""How many builds run at once.

A build may run two compilers at once (MAX_JOBS: the host half and nvcc side by side), but the host
half takes most of a fast build's time, so a build keeps about 1.1 cores busy on average with g++, 1.2 with
clang-22: measured over three corpus candidates' fast builds (11-15 s with g++, 7.5-8 s with clang and the CLI's
start, /proc/stat on an otherwise idle host, 2026-11-26).
With a build slot per two cores the two-GPU soak's hosts stayed 59% busy while builds bound every round
(benchmarks/results/gpu_2026-11-26_h100x2_session8.md). So a node runs a build per BUILD_CORE_SHARE of
the cores its device lanes do not reserve (worker/engine/cpu_plan.py), with a little room for the
correctness stages beside them (builds are niced); KERNELJUDGE_BUILD_SLOTS overrides that. (Each build's
processes are capped at KERNELJUDGE_BUILD_MEMORY_GB of address space, EngineSettings.build_memory_bytes, so
one runaway template instantiation cannot take the node's memory.)
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from worker.engine.engine_settings import EngineSettings

CORES_PER_BUILD = 2  # compilers one build may run at once (MAX_JOBS)
BUILD_CORE_SHARE = 1.25  # cores a build slot is sized for: a build's measured average, and some room

_slots: threading.BoundedSemaphore | None = None
_slots_lock = threading.Lock()


def build_slots(settings: EngineSettings) -> int:
    """KERNELJUDGE_BUILD_SLOTS, else one per BUILD_CORE_SHARE of the cores no device lane reserves (cpu_plan)."""
    if settings.build_slots is not None:
        return max(1, settings.build_slots)
    build_cores = len(settings.cpu_plan().build_cpus) or (os.cpu_count() or 1)
    return max(1, int(build_cores / BUILD_CORE_SHARE))


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
