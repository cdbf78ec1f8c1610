"""Recovery of jobs whose worker stopped: requeued once, failed on the second loss.

A job may sit in any pipeline stage when its process dies (claimed and building, built and
waiting for its device, running); each is in flight under its worker's name, so all are found.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from sqlalchemy import select, update

from .records import IN_FLIGHT_STATUSES, MAX_ATTEMPTS, Job, JobStatus
from .schema import JobRow

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

