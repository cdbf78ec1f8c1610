"""How a judge's generation holds its device, step by step (messages.StepReached, judge_process.op_generate).

A judge generating its reference's outputs stops at each step, its device work so far ended, and waits to be
told to go on. Over a host-only step (making the input sets, sealing them) it holds nothing; over a device step
it holds the device shared, like any correctness stage. At a step where a timing waits for the device
(gpu_schedule: a waiting timing lets no new shared stage start) it lets go and takes the device again after the
timing. A timing then waits for one step of a generation at most, not for all of it: a whole generation held
shared kept every timing on an H100 waiting for up to 30 s, and the other jobs behind that timing with it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from sandbox_side.runtime.messages import StepReached
from worker.engine.gpu_schedule import GpuSchedule

# The judge names its steps; it runs the reference's code, so what it says is bounded before it is kept.
MAX_STEPS = 16
MAX_STEP_NAME = 32


def _nothing() -> None:
    pass


@dataclass
class GenerateHold:
    """One generation's hold on the device: `acquire` and `release` take and drop it shared; `schedule` (the
    device's) says whether a timing waits for it now."""

    acquire: Callable[[], None] = _nothing
    release: Callable[[], None] = _nothing
    schedule: GpuSchedule | None = None
    held: bool = False
    device_wait_s: float = 0.0  # waiting to take the device (behind timings)
    yields: int = 0  # steps at which it let a waiting timing go first
    steps_s: dict[str, float] = field(default_factory=dict)  # each step's time on this clock, its waits excluded
    _step: str | None = None
    _since: float = 0.0

    @classmethod
    def on_schedule(cls, schedule: GpuSchedule | None) -> GenerateHold:
        """A hold taken on a device's schedule directly (a judge started ahead, outside any job's stages)."""
        if schedule is None:
            return cls()
        return cls(acquire=schedule.acquire_shared, release=schedule.release_shared, schedule=schedule)

    def step(self, reached: StepReached) -> None:
        """The judge reached a step: hold the device as the step needs, a waiting timing first."""
        now = time.monotonic()
        self._close_step(now)
        timing_waits = self.schedule is not None and self.schedule.state().waiting_exclusive > 0
        if self.held and (not reached.device or timing_waits):
            self.yields += reached.device
            self.release()
            self.held = False
        if reached.device and not self.held:
            self.acquire()
            self.held = True
        after = time.monotonic()
        self.device_wait_s += after - now
        if len(self.steps_s) < MAX_STEPS or reached.step[:MAX_STEP_NAME] in self.steps_s:
            self._step, self._since = reached.step[:MAX_STEP_NAME], after

    def end(self) -> None:
        """The generation ended (or failed): the last step's time is kept and the device let go."""
        self._close_step(time.monotonic())
        if self.held:
            self.release()
            self.held = False

    def _close_step(self, now: float) -> None:
        if self._step is not None:
            self.steps_s[self._step] = round(self.steps_s.get(self._step, 0.0) + now - self._since, 3)
            self._step = None
