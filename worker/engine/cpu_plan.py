"""Which CPU cores each kind of process may use: timing isolation from builds.

A device lane keeps a few reserved cores (`lane_cpus`) for its timing window: the judge and the
candidate runner being timed move there for that window (`timing_cores`) and back after it. Everything
else (builds, sandbox start-ups, background baselines, and every job's correctness stages) runs on
the other cores (`build_cpus`), builds at a lower priority (nice). A launch-bound problem then times
the same during a batch of builds as on a quiet host: nothing else is scheduled on its cores while it
is timed (timing is exclusive per lane, so one window at a time uses them). Correctness stages once
ran on the reserved cores too: on a 16-core H100 host 2 cores carried every job's loads, runs and
copies, the candidate stage took 8-12 s and the GPU was 4% busy.

Processes start with their affinity and nice value set before exec (sandbox/process.py applies a
SandboxSpec's `cpus` and `nice`); `pin_process_tree` moves a running one. The supervisor's own threads
stay off the reserved cores too (`confine_supervisor`, when a lane starts). The reservation is per lane
(one per GPU):
`KERNELJUDGE_RESERVED_CPUS` gives it explicitly (`0-1;2-3`: lane 0 gets 0-1, lane 1 gets 2-3),
`auto` reserves `KERNELJUDGE_LANE_CPUS` (2) cores per lane when the host has at least four times
as many cores as all lanes reserve together, and `off` reserves nothing (the 2-core dev machine).

Reservations are whole physical cores. Where the host shows SMT (two hardware threads a core,
`thread_siblings_list` in sysfs), `auto` gives a lane whole cores (both threads), and a core that a lane
reserves any thread of runs no builds on its other thread, whichever way the reservation was given: a
build on the sibling thread takes the timed launch path's execution units and caches, and the service's
short launch-bound kernels (60-90 us Triton launches) moved by up to 25% in single windows of a two-GPU
soak under builds (benchmarks/results/gpu_2026-11-26_h100x2_session8.md).
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from worker.engine.process_tree import descendants

log = logging.getLogger(__name__)

AUTO = "auto"
OFF = "off"
DEFAULT_LANE_CPUS = 2
# Reserve cores only where this leaves most of the host to builds.
MIN_HOST_SHARE = 4


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """'0-3,8,10-11' -> (0, 1, 2, 3, 8, 10, 11)."""
    cpus: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            low, high = part.split("-", 1)
            cpus.update(range(int(low), int(high) + 1))
        else:
            cpus.add(int(part))
    return tuple(sorted(cpus))


@functools.cache
def available_cpus() -> tuple[int, ...]:
    """The cores this process may use, read once: the first plan is made before `confine_supervisor` narrows the
    supervisor's own threads, whose affinity then no longer tells the host's cores. Read again each time, every
    later plan was made from the confined set: on a 32-core host with two lanes the reservations crept down and
    builds ran on 20 cores while 8 stayed idle."""
    try:
        return tuple(sorted(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return tuple(range(os.cpu_count() or 1))


@functools.cache  # the topology does not change, and the plan is made again for every timed job
def thread_siblings(cpu: int) -> tuple[int, ...]:
    """The hardware threads of `cpu`'s physical core, itself included (sysfs; just itself where unknown)."""
    try:
        with open(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list") as handle:
            siblings = parse_cpu_list(handle.read())
    except (OSError, ValueError):
        return (cpu,)
    return siblings if cpu in siblings else (cpu, *siblings)


def physical_cores(cores: tuple[int, ...], siblings: Callable[[int], tuple[int, ...]]) -> list[tuple[int, ...]]:
    """`cores` grouped by physical core (each group the available threads of one core), highest first."""
    groups: dict[tuple[int, ...], None] = {}
    available = set(cores)
    for cpu in cores:
        groups.setdefault(tuple(sorted(c for c in siblings(cpu) if c in available) or (cpu,)), None)
    return sorted(groups, key=max, reverse=True)


@dataclass(frozen=True)
class CpuPlan:
    lane_cpus: tuple[int, ...] = ()  # this lane's judges and candidate runners; () = no reservation
    build_cpus: tuple[int, ...] = ()  # everything else of this worker; () = any core

    @property
    def reserved(self) -> bool:
        return bool(self.lane_cpus)


def plan_cpus(setting: str, *, lane: int, lanes: int, per_lane: int = DEFAULT_LANE_CPUS,
              available: tuple[int, ...] | None = None,
              siblings: Callable[[int], tuple[int, ...]] = thread_siblings) -> CpuPlan:
    """The plan of lane number `lane` of `lanes` on this host (see the module docstring). `siblings`: a
    core's hardware threads (sysfs; tests give a made-up topology)."""
    cores = available if available is not None else available_cpus()
    setting = (setting or AUTO).strip().lower()
    if setting == OFF or per_lane <= 0:
        return CpuPlan()
    lanes = max(lanes, 1)
    if setting == AUTO:
        if len(cores) < MIN_HOST_SHARE * per_lane * lanes:
            return CpuPlan()
        # Lanes take the highest cores (the low ones are where the OS and interrupts usually land), whole
        # physical cores each, at least `per_lane` threads.
        groups = physical_cores(cores, siblings)
        per_lane_groups: list[tuple[int, ...]] = []
        for _ in range(lanes):
            taken: list[int] = []
            while groups and len(taken) < per_lane:
                taken += groups.pop(0)
            per_lane_groups.insert(0, tuple(sorted(taken)))  # the last lane the highest, as it always was
        mine = per_lane_groups[lane] if lane < lanes else ()
        reserved_all = {cpu for group in per_lane_groups for cpu in group}
    else:
        per_lane_lists = [parse_cpu_list(chunk) for chunk in setting.split(";")]
        reserved_all = {cpu for chunk in per_lane_lists for cpu in chunk}
        mine = per_lane_lists[lane] if lane < len(per_lane_lists) else ()
        mine = tuple(cpu for cpu in mine if cpu in cores)
    # No build on a thread whose core a lane times on.
    kept_off = reserved_all | {sibling for cpu in reserved_all & set(cores) for sibling in siblings(cpu)}
    rest = tuple(cpu for cpu in cores if cpu not in kept_off)
    if not mine or not rest:
        return CpuPlan()
    return CpuPlan(lane_cpus=tuple(mine), build_cpus=rest)


def pin_process_tree(root: int | None, cpus: tuple[int, ...]) -> bool:
    """Move every thread of `root` and its descendants to `cpus` (threads they start later inherit it).

    Best effort: a process that exits meanwhile is skipped; False when nothing could be moved."""
    if root is None or not cpus:
        return False
    moved = False
    for pid in descendants(root):
        moved = _pin_threads(pid, cpus) or moved
    if not moved:
        log.warning("could not move process %s to cores %s", root, cpus)
    return moved


def _pin_threads(pid: int, cpus: tuple[int, ...]) -> bool:
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    moved = False
    for tid in tasks:
        try:
            os.sched_setaffinity(int(tid), cpus)
            moved = True
        except OSError:
            continue
    return moved


def confine_supervisor(plan: CpuPlan) -> bool:
    """Every thread of this process (the supervisor: API, pipelines, pipe readers, the store) on the cores no
    lane reserves; threads it starts later inherit that. Its sandboxes keep their own (each is started with
    its cores, and the timed two move to the lane's for their window). Without this, the supervisor's busy
    threads ran on the reserved cores too, beside the timed launch path. Nothing to do without a reservation."""
    if not plan.reserved or not plan.build_cpus:
        return False
    return _pin_threads(os.getpid(), plan.build_cpus)


@contextmanager
def timing_cores(plan: CpuPlan, pids: list[int | None]) -> Iterator[None]:
    """The timed processes on the lane's reserved cores for the timing window, then back on the shared ones."""
    if plan.lane_cpus:
        for pid in pids:
            pin_process_tree(pid, plan.lane_cpus)
    try:
        yield
    finally:
        if plan.lane_cpus and plan.build_cpus:
            for pid in pids:
                pin_process_tree(pid, plan.build_cpus)
