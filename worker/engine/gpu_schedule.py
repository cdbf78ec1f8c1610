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
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from worker.engine.stage import Stage

# Waits inside a job's device stages that must not hold the device: for its problem's judge being
# started ahead (judge_start), and for its problem's compile baseline (baseline_worker), both of which
# need the device themselves.
REFERENCE_WAIT_STAGE = Stage.reference_wait
BASELINE_WAIT_STAGE = Stage.compile_baseline_wait
# Stages in which a job does not touch the device (the score is computed on the host; the waits above).
HOST_ONLY_STAGES = frozenset({Stage.reward, REFERENCE_WAIT_STAGE, BASELINE_WAIT_STAGE})
EXCLUSIVE_STAGES = frozenset({Stage.timing})
# From this stage on, every device stage of the job holds the device exclusively: the engine runs a job
# again alone when it ran out of device memory while sharing it (worker/engine/device_stage.py).
ALONE_STAGE = Stage.alone


@dataclass(frozen=True)
class ScheduleState:
    shared: int  # jobs in a shared (correctness) stage now
    exclusive: bool  # a job is timing now
    waiting_shared: int
    waiting_exclusive: int


# A shared stage starts beside other jobs' only while the card's measured memory is under this share
# (gpu_monitor): jobs pile onto a full card no more; one job alone always may.
MEMORY_ADMIT_SHARE = 0.90
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

    def release_exclusive(self) -> None:
        with self._cond:
            if self._owner != threading.get_ident():
                raise RuntimeError(f"{self.name}: exclusive release by a thread that does not hold it")
            self._depth -= 1
            if self._depth == 0:
                self._owner = None
                self._cond.notify_all()

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
