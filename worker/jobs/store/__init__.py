"""Durable job store (SQLAlchemy: SQLite by default, PostgreSQL for several nodes).

Shared by the API (`app`) and the workers, so it lives on the worker side: the dependency
points from app to worker only.
"""

from worker.jobs.store.jobs import (
    JobStore,
    normalise_url,
    problem_id_for,
    store_url,
)
from worker.jobs.store.records import (
    ACTIVE_STATUSES,
    IN_FLIGHT_STATUSES,
    MAX_ATTEMPTS,
    TERMINAL_STATUSES,
    IdempotencyConflict,
    Job,
    JobStatus,
    NewJob,
    Problem,
    public_job,
)

__all__ = [
    "ACTIVE_STATUSES",
    "IN_FLIGHT_STATUSES",
    "MAX_ATTEMPTS",
    "TERMINAL_STATUSES",
    "IdempotencyConflict",
    "Job",
    "JobStatus",
    "JobStore",
    "NewJob",
    "Problem",
    "normalise_url",
    "problem_id_for",
    "public_job",
    "store_url",
]
