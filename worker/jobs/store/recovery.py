"""Recovery of jobs whose worker stopped: requeued once, failed on the second loss.

A job may sit in any pipeline stage when its process dies (claimed and building, built and
waiting for its device, running); each is in flight under its worker's name, so all are found.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from sqlalchemy import select, update

from worker.jobs.store.records import IN_FLIGHT_STATUSES, MAX_ATTEMPTS, Job, JobStatus
from worker.jobs.store.schema import JobRow

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

log = logging.getLogger(__name__)


def died_reason(job: Job) -> str:
    return (f"the worker running this job stopped {job.attempts} times (last: {job.worker}); "
            "it was retried once and is not retried again")


class JobRecovery:
    """JobStore's recovery methods (mixed into JobStore; uses its sessions and `fail`)."""

    def _session(self) -> Session:
        raise NotImplementedError

    def fail(self, job_id: str, reason: str, *, attempt: int | None = None, expected: str | None = None) -> bool:
        raise NotImplementedError

    def recover_orphans(self, worker_prefix: str) -> tuple[list[str], int]:
        """After a restart: requeue in-flight jobs of workers named `worker_prefix*` once, fail repeats.

        Covers every pipeline stage (claimed, built and waiting for the device, running).
        Returns (ids requeued, number failed).
        """
        return self._recover(JobRow.worker.like(f"{worker_prefix}%"), f"{worker_prefix}*")

    def recover_worker(self, worker: str) -> tuple[list[str], int]:
        """The same for the jobs of one stopped worker (e.g. a Celery worker process that died)."""
        return self._recover(JobRow.worker == worker, worker)

    def _recover(self, owned, who: str) -> tuple[list[str], int]:
        with self._session() as s:
            rows = s.scalars(select(JobRow).where(JobRow.status.in_(IN_FLIGHT_STATUSES), owned)).all()
            orphans = [Job.from_row(r) for r in rows]
        requeued: list[str] = []
        failed = 0
        for job in orphans:
            if job.attempts >= MAX_ATTEMPTS:
                failed += self.fail(job.id, died_reason(job), expected=job.status)
                continue
            with self._session() as s, s.begin():
                outcome = s.execute(
                    update(JobRow)
                    .where(JobRow.id == job.id, JobRow.status == job.status, JobRow.attempts == job.attempts)
                    .values(status=JobStatus.queued.value, updated_at=time.time(),
                            error=f"requeued after its worker {job.worker} stopped")
                )
                if outcome.rowcount:
                    requeued.append(job.id)
        if requeued or failed:
            log.warning("recovered jobs of stopped workers %s: %d requeued, %d failed", who, len(requeued), failed)
        return requeued, failed

    def requeue_stalled(self, job_id: str, attempt: int, reason: str) -> str:
        """Take a job from an attempt that stalled (worker/jobs/watchdog.py): back to the queue, or failed.
        `reason` says what happened ("its device lane stalled ..."), for the job's `error`.

        Unlike `release`, the attempt stays counted: the stalled thread may still be running and write
        later, and the next claim makes `attempts` differ from its, so every late write of the stalled
        attempt is refused (finish, fail, mark_* and release all match on the attempt; `fail` and
        `finish` also need the job in flight). A job that already had its retry (MAX_ATTEMPTS) is failed
        instead, as `recover_orphans` does: a job that stalls its lane every time must not stall them all.

        Returns "requeued", "failed", or "gone" (this attempt no longer holds the job: it finished or was
        taken meanwhile).
        """
        failed = f"{reason} (attempt {attempt}: the job had its retry already, it is not tried again)"
        with self._session() as s, s.begin():
            in_flight = (JobRow.id == job_id, JobRow.status.in_(IN_FLIGHT_STATUSES), JobRow.attempts == attempt)
            if attempt >= MAX_ATTEMPTS:
                now = time.time()
                values = dict(status=JobStatus.failed.value, finished_at=now, updated_at=now, error=failed)
            else:
                values = dict(status=JobStatus.queued.value, worker=None, gpu=None, building_at=None,
                              built_at=None, running_at=None, updated_at=time.time(),
                              error=f"returned to the queue: {reason}")
            changed = s.execute(update(JobRow).where(*in_flight).values(**values)).rowcount
        if not changed:
            return "gone"
        return "failed" if attempt >= MAX_ATTEMPTS else "requeued"

    def fail_overdue(self, max_runtime_s: float) -> int:
        """Fail in-flight jobs that started longer ago than any job may run (their worker is gone)."""
        cutoff = time.time() - max_runtime_s
        with self._session() as s:
            rows = s.scalars(
                select(JobRow).where(JobRow.status.in_(IN_FLIGHT_STATUSES), JobRow.building_at < cutoff)
            ).all()
            overdue = [Job.from_row(r) for r in rows]
        count = 0
        for job in overdue:
            count += self.fail(
                job.id,
                f"no result {max_runtime_s:.0f}s after it started on {job.worker}; its worker is presumed dead",
                attempt=job.attempts, expected=job.status,
            )
        return count

