"""Waiting for jobs to finish without busy-polling the database.

Embedded workers call `notify()` (from their threads) whenever a job finishes; waiters wake,
re-read their jobs, and sleep again. With remote (Celery) workers nothing notifies, so waiters
also re-read every `poll_s` seconds.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from worker.jobs.store import Job


class JobEvents:
    def __init__(self, poll_s: float = 0.5):
        self.poll_s = poll_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._event = asyncio.Event()

    def notify(self) -> None:
        """Thread-safe: wake every waiter."""
        if self._loop is not None and not self._loop.is_closed():
            try:
                self._loop.call_soon_threadsafe(self._pulse)
            except RuntimeError:  # loop shut down between the check and the call
                pass

    def _pulse(self) -> None:
        if self._event is not None:
            self._event.set()
            self._event = asyncio.Event()

    async def wait_until_finished(self, read: Callable[[list[str]], dict[str, Job]], job_ids: list[str],
                                  timeout_s: float) -> dict[str, Job]:
        """Re-read `job_ids` until all are terminal or `timeout_s` passes; return the last read."""
        deadline = time.monotonic() + max(0.0, timeout_s)
        while True:
            event = self._event
            jobs = await asyncio.to_thread(read, job_ids)
            remaining = deadline - time.monotonic()
            if remaining <= 0 or all(job.terminal for job in jobs.values()):
                return jobs
            try:
                if event is None:
                    await asyncio.sleep(min(remaining, self.poll_s))
                else:
                    await asyncio.wait_for(event.wait(), timeout=min(remaining, self.poll_s))
            except asyncio.TimeoutError:
                pass
