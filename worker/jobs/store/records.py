"""Plain records read from the store (dataclasses: no ORM objects escape the store)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from contract.statuses import JobStatus

ACTIVE_STATUSES = (JobStatus.queued.value, JobStatus.building.value, JobStatus.running.value)
IN_FLIGHT_STATUSES = (JobStatus.building.value, JobStatus.running.value)
TERMINAL_STATUSES = (JobStatus.done.value, JobStatus.failed.value, JobStatus.cancelled.value)

# A job is tried at most this many times: the first run plus one retry after its worker died.
MAX_ATTEMPTS = 2


@dataclass
class Job:
    id: str
    status: str
    priority: int
    created_at: float
    updated_at: float
    problem_id: str
    submission: dict[str, Any]
    api_key_id: str
    building_at: float | None = None
    built_at: float | None = None  # prepared and waiting for the device (status still `building`)
    running_at: float | None = None
    finished_at: float | None = None
    result: dict[str, Any] | None = None
    verdict: str | None = None
    worker: str | None = None
    gpu: str | None = None
    attempts: int = 0
    error: str | None = None
    idempotency_key: str | None = None

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @classmethod
    def from_row(cls, row) -> Job:
        return cls(
            id=row.id,
            status=row.status,
            priority=row.priority,
            created_at=row.created_at,
            updated_at=row.updated_at,
            problem_id=row.problem_id,
            submission=json.loads(row.submission),
            api_key_id=row.api_key_id,
            building_at=row.building_at,
            built_at=row.built_at,
            running_at=row.running_at,
            finished_at=row.finished_at,
            result=_result(row.result),
            verdict=row.verdict,
            worker=row.worker,
            gpu=row.gpu,
            attempts=row.attempts,
            error=row.error,
            idempotency_key=row.idempotency_key,
        )


def _result(text: str | None) -> dict[str, Any] | None:
    """A stored result; text that is not a JSON object (never written by this version) reads as a
    result that says so, which the API shows as unreadable instead of failing the whole read."""
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    return value if isinstance(value, dict) else {UNREADABLE_RESULT: text[:200]}


# The key of a stored result that is not a JSON object: its first characters.
UNREADABLE_RESULT = "unreadable_stored_result"


@dataclass
class Problem:
    id: str
    reference: str
    name: str | None
    created_at: float
    # The profile the jobs of the key it was read for get (JobStore.get_problem); None: partial.
    profile: str | None = None
    degenerate_reference: bool | None = None
    owner_key_id: str | None = None  # the registering API key; None: the operator's (or unrecorded)


@dataclass
class NewJob:
    """What a submission stores; `result` set means the job is finished at once (e.g. no code)."""

    problem_id: str
    submission: dict[str, Any]
    api_key_id: str
    priority: int = 0
    idempotency_key: str | None = None
    result: dict[str, Any] | None = None
    verdict: str | None = None


class IdempotencyConflict(Exception):
    """The Idempotency-Key was used before with a different submission."""

    def __init__(self, existing: Job):
        super().__init__(f"idempotency key already used for job {existing.id} with a different body")
        self.existing = existing


def iso_time(ts: float | None) -> str | None:
    if ts is None:
        return None
    from datetime import datetime, timezone

    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat().replace("+00:00", "Z")


def public_job(job: Job) -> dict[str, Any]:
    """The job as the API and callbacks show it (no API key id, no internal hashes)."""
    return {
        "id": job.id,
        "status": job.status,
        "created_at": iso_time(job.created_at),
        "building_at": iso_time(job.building_at),
        "built_at": iso_time(job.built_at),
        "running_at": iso_time(job.running_at),
        "finished_at": iso_time(job.finished_at),
        "priority": job.priority,
        "problem_id": job.problem_id,
        "worker": job.worker,
        "gpu": job.gpu,
        "attempts": job.attempts,
        "error": job.error,
        "idempotency_key": job.idempotency_key,
        "result": job.result,
    }
