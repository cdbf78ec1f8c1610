"""Durable job store shared by the API and every worker (embedded threads or Celery).

State changes are single conditional UPDATEs (`... WHERE status = <expected>`), so two
workers can never both claim a job and a late writer cannot overwrite a newer state.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, event, func, or_, select, text, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from worker.config.jobs_section import JobsSection
from worker.jobs.store.json_text import to_json_text
from worker.jobs.store.migrations import upgrade_schema
from worker.jobs.store.queue import ClaimChoice, QueueGroup, oldest_in_group, top_priority_groups
from worker.jobs.store.records import (
    ACTIVE_STATUSES,
    IN_FLIGHT_STATUSES,
    MAX_ATTEMPTS,
    IdempotencyConflict,
    Job,
    JobStatus,
    NewJob,
    Problem,
)
from worker.jobs.store.recovery import JobRecovery, died_reason
from worker.jobs.store.repair import repair_stored_json
from worker.jobs.store.schema import JobRow, ProblemProfileRow, ProblemRow

log = logging.getLogger(__name__)

DB_FILE_NAME = "kerneljudge.db"


def sqlite_url(data_dir: Path) -> str:
    """The URL of the SQLite job store in `data_dir` (created if missing)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{(data_dir / DB_FILE_NAME).resolve()}"


def store_url(jobs: JobsSection) -> str:
    """The configured database URL (KERNELJUDGE_DATABASE_URL), else a SQLite file in the data folder."""
    url = (jobs.database_url or "").strip()
    return normalise_url(url) if url else sqlite_url(jobs.store_dir())


def normalise_url(url: str) -> str:
    # psycopg3 is the only PostgreSQL driver we depend on; plain postgres URLs default to it.
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    return url


def problem_id_for(reference: str) -> str:
    return hashlib.sha256(reference.encode("utf-8", "surrogatepass")).hexdigest()


def submission_hash(problem_id: str, submission: dict[str, Any], priority: int) -> str:
    body = json.dumps({"p": problem_id, "s": submission, "prio": priority}, sort_keys=True)
    return hashlib.sha256(body.encode("utf-8", "surrogatepass")).hexdigest()


def _use_wal(cursor: sqlite3.Cursor, wait_s: float = 30.0) -> None:
    """Put the database in WAL mode (a setting kept in the file). Connections opening a new file at once
    race for that first switch, and SQLite tells the losers "database is locked" at once, without its
    busy timeout (waiting could deadlock): they try again, and find the file switched."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def _make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_connection, _record):
            cursor = dbapi_connection.cursor()
            # WAL lets readers (status polls) proceed while a writer commits.
            _use_wal(cursor)
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.close()

        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)


class JobStore(JobRecovery):
    def __init__(self, url: str):
        self.url = normalise_url(url)
        self.engine = _make_engine(self.url)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        upgrade_schema(self.engine)  # creates the tables, upgrades an older release's (migrations/)
        repair_stored_json(self.engine)

    def close(self) -> None:
        self.engine.dispose()

    def ping(self) -> None:
        with self.engine.connect() as conn:
            conn.execute(text("SELECT 1"))

    def _session(self) -> Session:
        return self._sessions()

    # ---- problems -------------------------------------------------------------------------

    def put_problem(self, reference: str, name: str | None = None, profile: str | None = None, *,
                    key_id: str | None = None, admin: bool = False) -> tuple[Problem, bool]:
        """Register a reference for API key `key_id` (None: the operator); returns (problem as
        `key_id` sees it, created). The id is sha256(reference).

        The first registration owns the problem. Registering again changes it only as tenancy
        allows (docs: a key never changes what another key's jobs get):
        - the owner (the operator for a problem without owner) updates name and profile;
        - an admin key, and the operator, update the name; a key's profile is its own;
        - any other key's profile is kept for that key's jobs only, and its name is ignored.
        """
        pid = problem_id_for(reference)
        existing = self.get_problem(pid, key_id)
        if existing is None:
            now = time.time()
            try:
                with self._session() as s, s.begin():
                    s.add(ProblemRow(id=pid, reference=reference, name=name, created_at=now, profile=profile,
                                     owner_key_id=key_id))
                return Problem(pid, reference, name, now, profile, owner_key_id=key_id), True
            except IntegrityError:
                existing = self.get_problem(pid, key_id)
                if existing is None:
                    raise
        owns = existing.owner_key_id == key_id
        changes: dict[str, Any] = {}
        if name is not None and name != existing.name and (owns or admin or key_id is None):
            changes["name"] = name
        if profile is not None and owns:
            changes["profile"] = profile
        if changes:
            self._update_problem(pid, **changes)
        if profile is not None and not owns and key_id is not None:
            self._put_key_profile(pid, key_id, profile)
        return self.get_problem(pid, key_id) or existing, False

    def _put_key_profile(self, problem_id: str, key_id: str, profile: str) -> None:
        for _ in range(2):  # a concurrent first insert makes ours fail once; the second try updates
            with self._session() as s, s.begin():
                updated = s.execute(update(ProblemProfileRow)
                                    .where(ProblemProfileRow.problem_id == problem_id,
                                           ProblemProfileRow.api_key_id == key_id)
                                    .values(profile=profile)).rowcount
                if updated:
                    return
            try:
                with self._session() as s, s.begin():
                    s.add(ProblemProfileRow(problem_id=problem_id, api_key_id=key_id, profile=profile))
                return
            except IntegrityError:
                continue

    def get_problem(self, problem_id: str, key_id: str | None = None) -> Problem | None:
        """The problem as API key `key_id` sees it: `profile` is the one its jobs get by default
        (the key's own choice, else the problem's when the key owns it or nobody does)."""
        with self._session() as s:
            row = s.get(ProblemRow, problem_id)
            if row is None:
                return None
            profile = row.profile if row.owner_key_id in (None, key_id) else None
            if key_id is not None and key_id != row.owner_key_id:
                own = s.get(ProblemProfileRow, (problem_id, key_id))
                profile = own.profile if own is not None else profile
            return Problem(row.id, row.reference, row.name, row.created_at, profile, row.degenerate_reference,
                           row.owner_key_id)

    def note_degenerate_reference(self, problem_id: str, degenerate: bool) -> None:
        """Record what an evaluation measured about the problem's reference."""
        self._update_problem(problem_id, degenerate_reference=degenerate)

    def _update_problem(self, problem_id: str, **values: Any) -> None:
        with self._session() as s, s.begin():
            s.execute(update(ProblemRow).where(ProblemRow.id == problem_id).values(**values))

    # ---- submission and reads -------------------------------------------------------------

    def create_job(self, new: NewJob) -> tuple[Job, bool]:
        """Insert a job; with an idempotency key already used by this API key, return that job.

        Returns (job, created). Raises IdempotencyConflict when the key was used for another body.
        """
        digest = submission_hash(new.problem_id, new.submission, new.priority)
        if new.idempotency_key is not None:
            existing = self._by_idempotency(new.api_key_id, new.idempotency_key)
            if existing is not None:
                return self._replay(existing, digest), False
        now = time.time()
        finished = new.result is not None
        row = JobRow(
            id=uuid.uuid4().hex,
            status=JobStatus.done.value if finished else JobStatus.queued.value,
            priority=new.priority,
            created_at=now,
            updated_at=now,
            finished_at=now if finished else None,
            problem_id=new.problem_id,
            submission=to_json_text(new.submission),
            result=to_json_text(new.result, jsonb_safe=True) if finished else None,
            verdict=new.verdict,
            attempts=0,
            api_key_id=new.api_key_id,
            idempotency_key=new.idempotency_key,
            submission_hash=digest,
        )
        try:
            with self._session() as s, s.begin():
                s.add(row)
        except IntegrityError:
            # Two requests raced with the same idempotency key: the first insert wins.
            existing = self._by_idempotency(new.api_key_id, new.idempotency_key) if new.idempotency_key else None
            if existing is None:
                raise
            return self._replay(existing, digest), False
        return Job.from_row(row), True

    def _by_idempotency(self, api_key_id: str, key: str) -> tuple[Job, str] | None:
        with self._session() as s:
            row = s.scalars(
                select(JobRow).where(JobRow.api_key_id == api_key_id, JobRow.idempotency_key == key)
            ).first()
            return (Job.from_row(row), row.submission_hash) if row else None

    def has_idempotency_key(self, api_key_id: str, key: str) -> bool:
        return self._by_idempotency(api_key_id, key) is not None

    @staticmethod
    def _replay(existing: tuple[Job, str], digest: str) -> Job:
        job, stored_digest = existing
        if stored_digest != digest:
            raise IdempotencyConflict(job)
        return job

    def get(self, job_id: str) -> Job | None:
        with self._session() as s:
            row = s.get(JobRow, job_id)
            return Job.from_row(row) if row else None

    def get_many(self, job_ids: list[str]) -> dict[str, Job]:
        if not job_ids:
            return {}
        with self._session() as s:
            rows = s.scalars(select(JobRow).where(JobRow.id.in_(job_ids))).all()
            return {row.id: Job.from_row(row) for row in rows}

    def status_counts(self) -> dict[str, int]:
        with self._session() as s:
            rows = s.execute(select(JobRow.status, func.count()).group_by(JobRow.status)).all()
            return {status: count for status, count in rows}

    def verdict_counts(self) -> dict[tuple[str, str], int]:
        with self._session() as s:
            rows = s.execute(
                select(JobRow.status, JobRow.verdict, func.count())
                .where(JobRow.status.in_([JobStatus.done.value, JobStatus.failed.value]))
                .group_by(JobRow.status, JobRow.verdict)
            ).all()
            return {(status, verdict or ""): count for status, verdict, count in rows}

    def load(self, api_key_id: str) -> tuple[int, int]:
        """(jobs queued overall, unfinished jobs of this API key) in one query."""
        queued = JobRow.status == JobStatus.queued.value
        mine = (JobRow.api_key_id == api_key_id) & JobRow.status.in_(ACTIVE_STATUSES)
        with self._session() as s:
            row = s.execute(select(func.count().filter(queued), func.count().filter(mine))
                            .where(JobRow.status.in_(ACTIVE_STATUSES))).one()
            return int(row[0] or 0), int(row[1] or 0)

    # ---- state changes --------------------------------------------------------------------

    def cancel(self, job_id: str) -> Job | None:
        """Cancel a queued job. Returns the job as it is afterwards (None if it does not exist)."""
        now = time.time()
        with self._session() as s, s.begin():
            s.execute(
                update(JobRow)
                .where(JobRow.id == job_id, JobRow.status == JobStatus.queued.value)
                .values(status=JobStatus.cancelled.value, finished_at=now, updated_at=now,
                        error="cancelled by the client before it started")
            )
        return self.get(job_id)

    def claim_next(self, worker: str, gpu: str | None,
                   choose: Callable[[list[QueueGroup]], ClaimChoice | None] | None = None) -> Job | None:
        """Take a queued job for this worker (None if none is queued).

        Without `choose`: the highest-priority, oldest one. With it: `choose` picks a group (API key and
        problem) among the highest priority's queued groups (a lane's claim policy,
        worker/jobs/claim_policy.py) and the group's oldest job is taken.
        """
        for _ in range(20):
            with self._session() as s, s.begin():
                if choose is None:
                    candidate = s.scalar(
                        select(JobRow.id)
                        .where(JobRow.status == JobStatus.queued.value)
                        .order_by(JobRow.priority.desc(), JobRow.created_at)
                        .limit(1)
                        .with_for_update(skip_locked=True)
                    )
                else:
                    choice = choose(top_priority_groups(s))
                    if choice is None:
                        return None
                    candidate = oldest_in_group(s, choice)
                    if candidate is None:  # another worker took that group's last job meanwhile
                        continue
                if candidate is None:
                    return None
                if self._take(s, candidate, JobStatus.queued.value, worker, gpu):
                    break
        else:
            return None
        return self.get(candidate)

    def claim(self, job_id: str, worker: str, gpu: str | None) -> tuple[Job | None, str]:
        """Claim one given job (the Celery path). Returns (job to run or None, why).

        A job found `building`/`running` here was delivered again because the worker that held
        it died: it is run once more, or failed if it already had its retry.
        """
        job = self.get(job_id)
        if job is None:
            return None, "no such job"
        if job.terminal:
            return None, f"job is already {job.status}"
        if job.status in IN_FLIGHT_STATUSES and job.attempts >= MAX_ATTEMPTS:
            self.fail(job_id, died_reason(job), expected=job.status)
            return None, "worker died on the final attempt; job failed"
        with self._session() as s, s.begin():
            taken = self._take(s, job_id, job.status, worker, gpu, expected_attempts=job.attempts)
        if not taken:
            return None, "another worker changed the job first"
        return self.get(job_id), "claimed"

    @staticmethod
    def _take(s: Session, job_id: str, expected: str, worker: str, gpu: str | None,
              expected_attempts: int | None = None) -> bool:
        now = time.time()
        conditions = [JobRow.id == job_id, JobRow.status == expected]
        if expected_attempts is not None:
            conditions.append(JobRow.attempts == expected_attempts)
        result = s.execute(
            update(JobRow)
            .where(*conditions)
            .values(status=JobStatus.building.value, building_at=now, built_at=None, running_at=None, updated_at=now,
                    worker=worker, gpu=gpu, attempts=JobRow.attempts + 1)
        )
        return result.rowcount == 1

    def mark_built(self, job_id: str, attempt: int) -> bool:
        """The pipeline prepared this attempt (validated, built): it now waits for its device."""
        return self._stamp_building(job_id, attempt, built_at=time.time())

    def mark_running(self, job_id: str, attempt: int) -> bool:
        now = time.time()
        return self._stamp_building(job_id, attempt, status=JobStatus.running.value, running_at=now)

    def _stamp_building(self, job_id: str, attempt: int, **values: Any) -> bool:
        with self._session() as s, s.begin():
            result = s.execute(
                update(JobRow)
                .where(JobRow.id == job_id, JobRow.status == JobStatus.building.value, JobRow.attempts == attempt)
                .values(updated_at=time.time(), **values)
            )
            return result.rowcount == 1

    def release(self, job_id: str, attempt: int, reason: str) -> bool:
        """Give back a job this attempt claimed but never ran on its device (building -> queued).

        The attempt is not counted: the job did not run, so its retry budget is untouched.
        """
        with self._session() as s, s.begin():
            result = s.execute(
                update(JobRow)
                .where(JobRow.id == job_id, JobRow.status == JobStatus.building.value, JobRow.attempts == attempt)
                .values(status=JobStatus.queued.value, attempts=attempt - 1, worker=None, gpu=None,
                        building_at=None, built_at=None, updated_at=time.time(), error=reason)
            )
            return result.rowcount == 1

    def finish(self, job_id: str, attempt: int, result: dict[str, Any], verdict: str) -> bool:
        """Store the engine's result (job -> done). False if the job was taken from this attempt."""
        now = time.time()
        with self._session() as s, s.begin():
            outcome = s.execute(
                update(JobRow)
                .where(JobRow.id == job_id, JobRow.status.in_(IN_FLIGHT_STATUSES), JobRow.attempts == attempt)
                .values(status=JobStatus.done.value, finished_at=now, updated_at=now,
                        result=to_json_text(result, jsonb_safe=True), verdict=verdict, error=None)
            )
            return outcome.rowcount == 1

    def fail(self, job_id: str, reason: str, *, attempt: int | None = None, expected: str | None = None) -> bool:
        """Job -> failed with a reason (the service could not produce an evaluation).

        With `attempt` (and no `expected`), only while that attempt has the job in flight: a queued job
        belongs to no attempt, so a stale attempt (e.g. a thread the lane watchdog abandoned, whose job it
        requeued with the same attempt count) cannot fail the job before its next attempt claims it.
        """
        now = time.time()
        conditions = [JobRow.id == job_id]
        if expected:
            conditions.append(JobRow.status == expected)
        else:
            conditions.append(JobRow.status.in_(IN_FLIGHT_STATUSES if attempt is not None else ACTIVE_STATUSES))
        if attempt is not None:
            conditions.append(JobRow.attempts == attempt)
        with self._session() as s, s.begin():
            outcome = s.execute(
                update(JobRow).where(*conditions)
                .values(status=JobStatus.failed.value, finished_at=now, updated_at=now, error=reason)
            )
            return outcome.rowcount == 1

    # ---- export ---------------------------------------------------------------------------

    def iter_jobs(self, *, api_key_id: str | None = None, since: float | None = None,
                  finished_only: bool = True, page: int = 500) -> Iterator[Job]:
        """All jobs in creation order, page by page (constant memory)."""
        cursor: tuple[float, str] | None = None
        while True:
            query = select(JobRow).order_by(JobRow.created_at, JobRow.id).limit(page)
            if api_key_id is not None:
                query = query.where(JobRow.api_key_id == api_key_id)
            if since is not None:
                query = query.where(JobRow.created_at >= since)
            if finished_only:
                query = query.where(JobRow.status == JobStatus.done.value)
            if cursor is not None:
                query = query.where(or_(JobRow.created_at > cursor[0],
                                        (JobRow.created_at == cursor[0]) & (JobRow.id > cursor[1])))
            with self._session() as s:
                rows = s.scalars(query).all()
                jobs = [Job.from_row(r) for r in rows]
            yield from jobs
            if len(jobs) < page:
                return
            cursor = (jobs[-1].created_at, jobs[-1].id)
