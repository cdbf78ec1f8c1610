"""What is queued, seen by the claim: groups of jobs by priority, API key and problem.

A lane's claim policy (worker/jobs/claim_policy.py) picks one group from these; the store then
claims that group's oldest job. Only the top priority's groups are read: a lower priority is never
claimed while a higher one waits.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from worker.jobs.store.records import JobStatus
from worker.jobs.store.schema import JobRow


@dataclass(frozen=True)
class QueueGroup:
    priority: int
    api_key_id: str
    problem_id: str
    oldest: float  # created_at of its oldest queued job
    count: int


@dataclass(frozen=True)
class ClaimChoice:
    priority: int
    api_key_id: str
    problem_id: str


def top_priority_groups(s: Session) -> list[QueueGroup]:
    """The queued jobs of the highest queued priority, grouped by API key and problem."""
    queued = JobRow.status == JobStatus.queued.value
    top = s.scalar(select(func.max(JobRow.priority)).where(queued))
    if top is None:
        return []
    rows = s.execute(
        select(JobRow.api_key_id, JobRow.problem_id, func.min(JobRow.created_at), func.count())
        .where(queued, JobRow.priority == top)
        .group_by(JobRow.api_key_id, JobRow.problem_id)
    ).all()
    return [QueueGroup(int(top), key, problem, float(oldest), int(count)) for key, problem, oldest, count in rows]


def oldest_in_group(s: Session, choice: ClaimChoice):
    """The id of the chosen group's oldest queued job (locked where the database can), or None."""
    return s.scalar(
        select(JobRow.id)
        .where(JobRow.status == JobStatus.queued.value, JobRow.priority == choice.priority,
               JobRow.api_key_id == choice.api_key_id, JobRow.problem_id == choice.problem_id)
        .order_by(JobRow.created_at)
        .limit(1)
        .with_for_update(skip_locked=True)
    )
