"""Who may use one device when: several jobs' correctness stages at once, timing alone.

A readers-writer lock per GPU (or per CPU worker). Stages that may overlap with other jobs'
(reference, candidate, compare) hold it *shared*; timing holds it *exclusive*, so no other
job's work runs on the device while a job is timed. Timing is preferred: once a job waits to
time, no new shared stage starts, so a steady stream of correctness work cannot starve it.
Memory is admitted by measurement: beside another job, a shared stage starts only while the
card's measured memory (gpu_monitor) is under MEMORY_ADMIT_SHARE.

The service's pipeline moves each job's `DeviceLease` by the engine's stage notifications
(`worker.engine.StageCallback`, stage names in worker/engine/stage.py): `timing` takes the device
exclusively, `reward` lets it go, any other device stage holds it shared, except the waits
(`reference_wait`, `compile_baseline_wait`), which hold nothing. Engine code that uses the device outside a job's stages takes the schedule
itself: a judge generating holds it shared step by step (reference/generate_hold.py), the baseline worker compiles under
`background()` and times under `exclusive()`; `exclusive()` is re-entrant in the thread holding
it, so taking it inside a job's timing stage does not deadlock.

Neighbours: device work that no job's stage covers and that cannot hold the device for its length (a
warm runner's or a judge's start, which set up CUDA and the profiler; the baseline worker's torch.compile,
whose autotuning runs kernels for seconds) is registered with `neighbour(process)`, and its sandbox is
paused (frozen) while any other thread holds the device exclusively. Two CUDA contexts on one GPU share it
by time slices: such work beside a timing window stretched an honest CUDA conv's blocks by 5 ms a call
(the clock check failed its first window) on an H100 under a batch.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from typing import Protocol

from worker.engine.stage import Stage

log = logging.getLogger(__name__)

# Waits inside a job's device stages that must not hold the device: for its problem's judge being
# started ahead (judge_start), and for its problem's compile baseline (baseline_worker), both of which
# need the device themselves.
REFERENCE_WAIT_STAGE = Stage.reference_wait
BASELINE_WAIT_STAGE = Stage.compile_baseline_wait
# Stages in which a job does not touch the device (the score is computed on the host; the waits above; the
# wait for a warm runner, whose start is paused while a job holds the device alone).
HOST_ONLY_STAGES = frozenset({Stage.reward, REFERENCE_WAIT_STAGE, BASELINE_WAIT_STAGE, Stage.runner_take})
EXCLUSIVE_STAGES = frozenset({Stage.timing})
# From this stage on, every device stage of the job holds the device exclusively: the engine runs a job
# again alone when it ran out of device memory while sharing it (worker/engine/device_stage.py).
ALONE_STAGE = Stage.alone


NOT_PAUSED = "not paused"  # how SandboxProcess.paused says it had nothing to pause


class Pausable(Protocol):
    """A sandbox that can be paused (worker/engine/sandbox/process.SandboxProcess.paused)."""

    def paused(self) -> AbstractContextManager[str]: ...


@dataclass
class _Neighbour:
    process: Pausable
    thread: int  # the registering thread: never paused by its own exclusive hold
    pause: ExitStack | None = None


@dataclass(frozen=True)
class ScheduleState:
    shared: int  # jobs in a shared (correctness) stage now
    exclusive: bool  # a job is timing now
    waiting_shared: int
    waiting_exclusive: int


# A shared stage starts beside other jobs' only while the card's measured memory is under this share
# (gpu_monitor): jobs pile onto a full card no more; one job alone always may. The card must stay under 90%
# (issue 22): admitted at 90%, two H100s under a batch still peaked at 92%, as stages already running grew and
# warm runners and judges set up their CUDA contexts beside them (~0.5 GB each). 85% leaves them 4 GB there.
MEMORY_ADMIT_SHARE = 0.85
MEMORY_RECHECK_S = 0.25  # memory moves without a notification: re-read it this often while held back


class GpuSchedule:
    def __init__(self, name: str, sharers: int = 1, memory_share: Callable[[], float | None] | None = None,
                 memory_limit: float = MEMORY_ADMIT_SHARE):
        """`memory_share`: the device's measured used/total memory now (None: not known)."""
        self.name = name
        # Jobs that may be in device stages at once: the engine may size per-job memory caps from it.
        self.sharers = max(1, sharers)
        self.memory_share = memory_share
        self.memory_limit = memory_limit
        self.memory_waits = 0  # shared stages held back by the card's memory
        self._cond = threading.Condition()
        self._shared = 0
        self._owner: int | None = None  # thread holding the exclusive lock
        self._depth = 0
        self._waiting_shared = 0
        self._waiting_exclusive = 0
        self._lane_jobs = 0  # jobs the lane holds (claimed, not finished): the pipeline says
        # Neighbours (see the module docstring), paused and resumed under their own lock: freezing a sandbox
        # may take a moment, and nothing else of the schedule waits for it.
        self._neighbours: dict[int, _Neighbour] = {}
        self._neighbours_lock = threading.Lock()
        self.neighbour_pauses = 0  # neighbours paused for another thread's exclusive hold, in all

    def state(self) -> ScheduleState:
        with self._cond:
            return self._state()

    def _state(self) -> ScheduleState:
        return ScheduleState(self._shared, self._owner is not None, self._waiting_shared, self._waiting_exclusive)

    def note_lane_jobs(self, count: int) -> None:
        """The lane's pipeline tells how many jobs it holds (building, waiting or on the device)."""
        with self._cond:
            self._lane_jobs = count
            self._cond.notify_all()

    @property
    def idle(self) -> bool:
        """Nothing on the device, nothing waiting for it, and no job in the lane (being built either)."""
        with self._cond:
            return (self._lane_jobs == 0 and self._shared == 0 and self._owner is None
                    and self._waiting_shared == 0 and self._waiting_exclusive == 0)

    def wait_until(self, predicate: Callable[[ScheduleState], bool], timeout: float | None = None) -> bool:
        """Block until `predicate(state)` holds (re-checked at every change); False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: predicate(self._state()), timeout)

    def acquire_shared(self) -> None:
        with self._cond:
            self._waiting_shared += 1
            self._cond.notify_all()
            held_back = False
            while True:
                self._cond.wait_for(lambda: self._owner is None and self._waiting_exclusive == 0)
                if self._shared == 0 or not self._memory_full():
                    break
                held_back = True
                self._cond.wait(MEMORY_RECHECK_S)
            self.memory_waits += held_back
            self._waiting_shared -= 1
            self._shared += 1
            self._cond.notify_all()

    def _memory_full(self) -> bool:
        share = self.memory_share() if self.memory_share is not None else None
        return share is not None and share >= self.memory_limit

    def release_shared(self) -> None:
        with self._cond:
            if self._shared <= 0:
                raise RuntimeError(f"{self.name}: shared release without a holder")
            self._shared -= 1
            self._cond.notify_all()

    def acquire_exclusive(self) -> None:
        me = threading.get_ident()
        with self._cond:
            if self._owner == me:
                self._depth += 1
                return
            self._waiting_exclusive += 1
            self._cond.notify_all()
            self._cond.wait_for(lambda: self._owner is None and self._shared == 0)
            self._waiting_exclusive -= 1
            self._owner, self._depth = me, 1
            self._cond.notify_all()
        self._pause_neighbours(me)

    def release_exclusive(self) -> None:
        with self._cond:
            if self._owner != threading.get_ident():
                raise RuntimeError(f"{self.name}: exclusive release by a thread that does not hold it")
            last = self._depth == 1
            if not last:
                self._depth -= 1
                return
        # Resumed and let go under the neighbours' lock: a neighbour registering meanwhile sees the device free,
        # and a thread that takes it next pauses them all again.
        with self._neighbours_lock:
            for entry in self._neighbours.values():
                self._resume(entry)
            with self._cond:
                self._depth, self._owner = 0, None
                self._cond.notify_all()

    # -- neighbours (see the module docstring) --------------------------------------------
    @contextmanager
    def neighbour(self, process: Pausable) -> Iterator[None]:
        """`process` does device work outside every job's stage inside this block: it is paused while another
        thread holds the device exclusively (at once, if one does now)."""
        me = threading.get_ident()
        entry = _Neighbour(process, me)
        with self._neighbours_lock:
            self._neighbours[id(entry)] = entry
            with self._cond:
                owner = self._owner
            if owner is not None and owner != me:
                self._pause(entry)
        try:
            yield
        finally:
            with self._neighbours_lock:
                self._neighbours.pop(id(entry), None)
                self._resume(entry)

    def _pause_neighbours(self, owner: int) -> None:
        with self._neighbours_lock:
            for entry in self._neighbours.values():
                if entry.thread != owner:
                    self._pause(entry)

    def _pause(self, entry: _Neighbour) -> None:
        if entry.pause is not None:
            return
        stack = ExitStack()
        try:
            how = stack.enter_context(entry.process.paused())
        except Exception:  # noqa: BLE001 - a sandbox that cannot be paused must not stop the timing
            log.exception("%s: could not pause a neighbour of the device", self.name)
            stack.close()
            return
        if how.startswith(NOT_PAUSED):  # not started yet, or gone: the next exclusive hold tries again
            stack.close()
            return
        entry.pause = stack
        self.neighbour_pauses += 1

    def _resume(self, entry: _Neighbour) -> None:
        stack, entry.pause = entry.pause, None
        if stack is not None:
            try:
                stack.close()
            except Exception:  # noqa: BLE001 - the others are resumed all the same
                log.exception("%s: could not resume a neighbour of the device", self.name)

    @contextmanager
    def shared(self) -> Iterator[None]:
        self.acquire_shared()
        try:
            yield
        finally:
            self.release_shared()

    @contextmanager
    def background(self) -> Iterator[None]:
        """Background device work that takes minutes of host time and little device time (a torch.compile
        in the baseline worker): it starts only while nobody times or waits to, but holds nothing, so a
        timing that comes later is never held up by it (holding the device shared for a 10-60 s compile
        would stall every job's timing behind it)."""
        with self._cond:
            self._cond.wait_for(lambda: self._owner is None and self._waiting_exclusive == 0)
        yield

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        self.acquire_exclusive()
        try:
            yield
        finally:
            self.release_exclusive()

    def lease(self) -> DeviceLease:
        return DeviceLease(self)


class DeviceLease:
    """One job's hold on its device, moved by the job's stages; call `release()` when the job ends."""

    def __init__(self, schedule: GpuSchedule):
        self.schedule = schedule
        self.held: str | None = None  # None, "shared" or "exclusive"
        self.alone = False  # since ALONE_STAGE: no device stage is shared any more

    def enter(self, stage: Stage | str) -> None:
        stage = Stage(stage)  # a name that is no stage fails here, not as a shared hold by default
        self.alone = self.alone or stage == ALONE_STAGE
        if stage in EXCLUSIVE_STAGES or (self.alone and stage not in HOST_ONLY_STAGES):
            self._hold("exclusive")
        elif stage in HOST_ONLY_STAGES:
            self._hold(None)
        else:
            self._hold("shared")

    def release(self) -> None:
        self._hold(None)

    def _hold(self, wanted: str | None) -> None:
        if wanted == self.held:
            return
        # Let go first, then wait: a job never waits while holding the device, so two jobs
        # moving to timing at once cannot deadlock.
        if self.held == "shared":
            self.schedule.release_shared()
        elif self.held == "exclusive":
            self.schedule.release_exclusive()
        self.held = None
        if wanted == "shared":
            self.schedule.acquire_shared()
        elif wanted == "exclusive":
            self.schedule.acquire_exclusive()
        self.held = wanted


def as_neighbour(schedule: GpuSchedule | None, process: Pausable) -> AbstractContextManager[None]:
    """`schedule.neighbour(process)`, or nothing where there is no device schedule (CPU, the engine alone)."""
    return schedule.neighbour(process) if schedule is not None else contextlib.nullcontext()
