"""Durable job store (SQLAlchemy: SQLite by default, PostgreSQL for several nodes).

Shared by the API (`app`) and the workers, so it lives on the worker side: the dependency
points from app to worker only.
"""

from worker.jobs.store.jobs import (
    JobStore,
    database_url_from_env,
    default_data_dir,
    normalise_url,
    problem_id_for,
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
    "database_url_from_env",
    "default_data_dir",
    "normalise_url",
    "problem_id_for",
    "public_job",
]
