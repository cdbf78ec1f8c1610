"""The lane watchdog: a device lane that has jobs but makes no progress is restarted.

Why: a lane's threads can hang where no time limit reaches them (a deadlock in the process, a reply
that never comes from a sandbox whose deadline was lost), and a hung lane holds its jobs forever while
the node still looks alive. Every lane notes the time of each stage transition of its jobs (claimed,
prepared, each device stage entered, finished; `DeviceLane.health`). One thread per process reads them
every few seconds; a lane with jobs and no transition for `stall_s` (KERNELJUDGE_WATCHDOG_STALL_S,
above any stage a job may legitimately spend) is stalled: every thread's stack goes to the log once,
for the post-mortem, and the lane is restarted (`DeviceLane.restart`): its jobs go back to the queue,
fenced by their attempt so that the stuck threads' late results are refused, its sandboxes are killed,
and fresh device threads start. `/v1/ready` and `/metrics` show stalled lanes and restarts.
"""

from __future__ import annotations

import logging
import sys
import threading
import traceback
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from worker.jobs.pipeline import DeviceLane

log = logging.getLogger(__name__)

MAX_INTERVAL_S = 5.0
MIN_INTERVAL_S = 0.05


def check_interval(stall_s: float) -> float:
    """How often lanes are read: a few times per stall period, at most every MAX_INTERVAL_S."""
    return min(MAX_INTERVAL_S, max(MIN_INTERVAL_S, stall_s / 4))


def thread_stacks() -> str:
    """Every thread's current stack, named (what a stalled lane's threads wait for, and who holds it)."""
    frames = sys._current_frames()
    parts = []
    for thread in threading.enumerate():
        frame = frames.get(thread.ident) if thread.ident is not None else None
        if frame is None:
            continue
        parts.append(f"--- thread {thread.name!r} (ident {thread.ident}, daemon={thread.daemon}):\n"
                     + "".join(traceback.format_stack(frame)))
    return "\n".join(parts)


class LaneWatchdog:
    """One thread per process: restarts the lanes of `lanes` that have work and made no progress."""

    def __init__(self, lanes: Sequence[DeviceLane], stall_s: float, interval_s: float | None = None):
        self.lanes = lanes
        self.stall_s = stall_s
        self.interval_s = check_interval(stall_s) if interval_s is None else interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> LaneWatchdog:
        self._thread = threading.Thread(target=self._run, name="kj-lane-watchdog", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):  # a period, not a synchronisation
            try:
                self.check()
            except Exception:  # noqa: BLE001 - the watchdog must outlive whatever one check ran into
                log.exception("lane watchdog check failed")

    def check(self) -> list[str]:
        """Restart every stalled lane now; returns their names."""
        restarted = []
        for lane in self.lanes:
            if self._stop.is_set() or getattr(getattr(lane, "pipeline", None), "stopping", False):
                break
            health = lane.health()
            if not health.busy or health.last_progress_s_ago < self.stall_s:
                continue
            if not health.stalled:  # the stacks once per stall, not again while a restart is retried
                lane.mark_stalled()
                log.error("device lane %s stalled: it has jobs and made no progress for %.0f s "
                          "(KERNELJUDGE_WATCHDOG_STALL_S=%g); restarting it. Every thread's stack:\n%s",
                          health.name, health.last_progress_s_ago, self.stall_s, thread_stacks())
            jobs = lane.restart()
            after = lane.health()
            if after.stalled:  # it could not restart (it said why); tried again at the next check
                continue
            log.error("device lane %s restarted (restart %d): %d jobs given back: %s", health.name,
                      after.restarts, len(jobs), ", ".join(jobs) or "none")
            restarted.append(health.name)
        return restarted
