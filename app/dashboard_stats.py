"""Aggregates over the job store for the dashboard, computed by the database (SQLite or PostgreSQL).

Every query is scoped to one API key (`owner`) or to all keys (`owner=None`, admins), and bounded:
the callers pass a time window and a row limit. Results are stored as JSON text (schema.py), so
fields inside them are read with the database's own JSON functions; `_Dialect` hides how the two
databases spell those.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict
from sqlalchemy import (
    Float,
    Integer,
    Text,
    and_,
    case,
    cast,
    distinct,
    func,
    select,
    true,
    type_coerce,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.sql.elements import ColumnElement

from worker.jobs.store.jobs import JobStore
from worker.jobs.store.records import IN_FLIGHT_STATUSES, TERMINAL_STATUSES, JobStatus
from worker.jobs.store.schema import JobRow, ProblemRow


@dataclass(frozen=True)
class InFlightJob:
    job_id: str
    api_key_id: str
    worker: str | None
    gpu: str | None
    status: str
    building_at: float | None


@dataclass(frozen=True)
class QueueSnapshot:
    queued: int  # every key's queued jobs: how deep the queue in front of a new job is
    queued_owned: int  # of those, the scope's own (equal to `queued` for all keys)
    in_flight: list[InFlightJob]
    recent_workers: list[tuple[str, str | None]]  # (worker, gpu) that took a job lately


@dataclass(frozen=True)
class OutcomeCount:
    bucket: int  # index of the time bucket, from the window's start
    outcome: str  # the verdict of a `done` job, else the job status (failed, cancelled)
    count: int


@dataclass(frozen=True)
class SpeedupQuantiles:
    problem_id: str
    problem_name: str | None
    count: int
    minimum: float
    p25: float
    median: float
    p75: float
    maximum: float


@dataclass(frozen=True)
class RuleExample:
    rule: str
    severity: str
    jobs: int  # jobs on which the rule fired (a job can fire a rule on several lines)
    example_job_id: str  # the latest such job
    message: str
    line: int | None
    evidence: str | None


# Seconds one engine stage took over a window's finished jobs. Also the dashboard API's answer as it is
# (`GET /v1/dashboard/stages`, app/dashboard_schemas.py): a pydantic model, without a docstring, which
# would become its description in the OpenAPI document.
class StageSummary(BaseModel):
    model_config = ConfigDict(frozen=True)

    stage: str
    count: int
    mean_s: float
    p50_s: float
    p95_s: float
    max_s: float
    slowest_job_id: str


@dataclass(frozen=True)
class JobSummary:
    job_id: str
    status: str
    outcome: str | None
    created_at: float
    finished_at: float | None
    problem_id: str
    problem_name: str | None
    speedup: float | None
    reward: float | None
    rules_fired: int


class _Dialect:
    """What SQLite and PostgreSQL spell differently: JSON fields of the `result` text, and flooring.

    Every read takes a stored row as it comes: a field of another JSON type than expected reads as
    NULL (or as no items), and on SQLite text that is not JSON at all reads as no document.
    PostgreSQL cannot test text for JSON inside a query; there the store never writes text its
    jsonb refuses (json_text.py) and repairs what older versions wrote (repair.py).
    """

    def __init__(self, dialect: str):
        self.postgres = dialect == "postgresql"

    def _doc(self, column):
        # PostgreSQL needs the text cast to jsonb; SQLite's JSON functions read the text as it is,
        # and read NULL (nothing) instead of raising when it is not valid JSON.
        return cast(column, JSONB) if self.postgres else case((func.json_valid(column) == 1, column))

    def _field(self, column, key: str, json_type: str):
        """The field `key` of the document when it has this JSON type (array, object), else NULL."""
        if self.postgres:
            field = self._doc(column)[key]
            return case((func.jsonb_typeof(field) == json_type, field))
        doc = self._doc(column)
        return case((func.json_type(doc, f"$.{key}") == json_type, doc))

    def number(self, column, key: str) -> ColumnElement[float]:
        if self.postgres:
            field = self._doc(column)[key]
            return case((func.jsonb_typeof(field) == "number", cast(field.astext, Float)))
        doc, path = self._doc(column), f"$.{key}"
        return case((func.json_type(doc, path).in_(("integer", "real")), type_coerce(func.json_extract(doc, path),
                                                                                    Float)))

    def array_length(self, column, key: str) -> ColumnElement[int]:
        array = self._field(column, key, "array")
        if self.postgres:
            return func.coalesce(func.jsonb_array_length(array), 0)
        return func.coalesce(func.json_array_length(array, f"$.{key}"), 0)

    def array_items(self, column, key: str):
        """A table-valued function with one row (`value`, and `type` on SQLite) per element of the array `key`."""
        array = self._field(column, key, "array")
        if self.postgres:
            return func.jsonb_array_elements(array).table_valued("value").lateral()
        return func.json_each(array, f"$.{key}").table_valued("value", "type")

    def item_text(self, items, field: str) -> ColumnElement[str]:
        if self.postgres:
            return items.c.value.op("->>")(field)  # NULL when the element is not an object
        return func.json_extract(case((items.c.type == "object", items.c.value)), f"$.{field}")

    def item_number(self, items, field: str) -> ColumnElement[float]:
        if self.postgres:
            value = items.c.value.op("->")(field)
            return case((func.jsonb_typeof(value) == "number", cast(cast(value, Text), Float)))
        element = case((items.c.type == "object", items.c.value))
        return case((func.json_type(element, f"$.{field}").in_(("integer", "real")),
                     type_coerce(func.json_extract(element, f"$.{field}"), Float)))

    def object_items(self, column, key: str):
        """A table-valued function with one row (`key`, `value`, and `type` on SQLite) per member of the
        object `key`; `member_number` reads a member's value."""
        members = self._field(column, key, "object")
        if self.postgres:
            return func.jsonb_each(members).table_valued("key", "value").lateral()
        return func.json_each(members, f"$.{key}").table_valued("key", "value", "type")

    def member_number(self, items) -> ColumnElement[float]:
        if self.postgres:
            return case((func.jsonb_typeof(items.c.value) == "number", cast(cast(items.c.value, Text), Float)))
        return case((items.c.type.in_(("integer", "real")), type_coerce(items.c.value, Float)))

    def bucket(self, offset: ColumnElement[float], width_s: float) -> ColumnElement[int]:
        # PostgreSQL's CAST rounds; SQLite's truncates, which is floor for the offsets here (>= 0).
        ratio = offset / width_s
        return cast(func.floor(ratio) if self.postgres else ratio, Integer)


def _outcome() -> ColumnElement[str]:
    return case((JobRow.status == JobStatus.done.value, func.coalesce(JobRow.verdict, JobRow.status)),
                else_=JobRow.status)


def _owned(owner: str | None) -> list[ColumnElement[bool]]:
    return [] if owner is None else [JobRow.api_key_id == owner]


class JobStats:
    """Read-only aggregate queries on a JobStore's database."""

    def __init__(self, store: JobStore):
        self.engine = store.engine
        self.sql = _Dialect(self.engine.dialect.name)

    def queue(self, owner: str | None, *, recent_s: float, limit: int = 500) -> QueueSnapshot:
        """Queued counts, jobs in flight, and the workers that took a job in the last `recent_s` seconds."""
        queued = JobRow.status == JobStatus.queued.value
        with self.engine.connect() as conn:
            total, owned = conn.execute(
                select(func.count(), func.count().filter(and_(queued, *_owned(owner)))).where(queued)
            ).one()
            in_flight = conn.execute(
                select(JobRow.id, JobRow.api_key_id, JobRow.worker, JobRow.gpu, JobRow.status, JobRow.building_at)
                .where(JobRow.status.in_(IN_FLIGHT_STATUSES))
                .order_by(JobRow.building_at).limit(limit)
            ).all()
            recent = conn.execute(
                select(JobRow.worker, JobRow.gpu).distinct()
                .where(JobRow.building_at >= time.time() - recent_s, JobRow.worker.is_not(None))
                .order_by(JobRow.worker).limit(limit)
            ).all()
        return QueueSnapshot(
            queued=int(total or 0), queued_owned=int(owned or 0),
            in_flight=[InFlightJob(*row) for row in in_flight],
            recent_workers=[(worker, gpu) for worker, gpu in recent],
        )

    def outcomes(self, owner: str | None, since: float, until: float, buckets: int) -> list[OutcomeCount]:
        """Finished jobs per time bucket (by finish time) and outcome."""
        width = (until - since) / buckets
        bucket = self.sql.bucket(JobRow.finished_at - since, width).label("bucket")
        outcome = _outcome().label("outcome")
        query = (
            select(bucket, outcome, func.count())
            .where(JobRow.status.in_(TERMINAL_STATUSES), JobRow.finished_at >= since,
                   JobRow.finished_at < until, *_owned(owner))
            .group_by(bucket, outcome).order_by(bucket, outcome)
        )
        with self.engine.connect() as conn:
            return [OutcomeCount(int(b), o, int(n)) for b, o, n in conn.execute(query)
                    if 0 <= b < buckets]

    def speedups(self, owner: str | None, since: float, max_problems: int) -> list[SpeedupQuantiles]:
        """Quantiles of the speedup of correct jobs, for the problems with the most of them."""
        speedup = self.sql.number(JobRow.result, "speedup")
        samples = (
            select(JobRow.problem_id.label("problem_id"), speedup.label("speedup"),
                   func.cume_dist().over(partition_by=JobRow.problem_id, order_by=speedup).label("rank"))
            .where(JobRow.status == JobStatus.done.value, JobRow.verdict == "ok", JobRow.finished_at >= since,
                   speedup.is_not(None), *_owned(owner))
            .subquery()
        )

        def quantile(q: float):
            # The smallest sample whose cumulative share reaches q (the lower empirical quantile).
            return func.min(case((samples.c.rank >= q, samples.c.speedup)))

        count = func.count().label("n")
        query = (
            select(samples.c.problem_id, ProblemRow.name, count, func.min(samples.c.speedup), quantile(0.25),
                   quantile(0.5), quantile(0.75), func.max(samples.c.speedup))
            .select_from(samples)
            .outerjoin(ProblemRow, ProblemRow.id == samples.c.problem_id)
            .group_by(samples.c.problem_id, ProblemRow.name)
            .order_by(count.desc(), samples.c.problem_id)
            .limit(max_problems)
        )
        with self.engine.connect() as conn:
            return [SpeedupQuantiles(pid, name, int(n), *(float(v) for v in values))
                    for pid, name, n, *values in conn.execute(query)]

    def rules(self, owner: str | None, since: float, limit: int) -> list[RuleExample]:
        """The rules that fired on the most jobs, each with its latest hit as an example."""
        items = self.sql.array_items(JobRow.result, "rules")
        texts = {field: self.sql.item_text(items, field) for field in ("rule", "severity", "message", "evidence")}
        hits = (
            select(JobRow.id.label("job_id"), JobRow.finished_at.label("finished_at"),
                   *(text.label(field) for field, text in texts.items()),
                   self.sql.item_number(items, "line").label("line"))
            .select_from(JobRow).join(items, true())
            .where(JobRow.status == JobStatus.done.value, JobRow.finished_at >= since, texts["rule"].is_not(None),
                   *_owned(owner))
            .cte("hits")
        )
        jobs = func.count(distinct(hits.c.job_id)).label("jobs")
        top = select(hits.c.rule, jobs).group_by(hits.c.rule).order_by(jobs.desc(), hits.c.rule).limit(limit).cte("top")
        latest = (
            select(hits, func.row_number().over(partition_by=hits.c.rule,
                                                order_by=(hits.c.finished_at.desc(), hits.c.job_id.desc(),
                                                          hits.c.line)).label("recency"))
            .where(hits.c.rule.in_(select(top.c.rule)))
            .subquery()
        )
        query = (
            select(top.c.rule, latest.c.severity, top.c.jobs, latest.c.job_id, latest.c.message, latest.c.line,
                   latest.c.evidence)
            .join(latest, and_(latest.c.rule == top.c.rule, latest.c.recency == 1))
            .order_by(top.c.jobs.desc(), top.c.rule)
        )
        with self.engine.connect() as conn:
            return [RuleExample(rule, severity or "", int(n), job_id, message or "",
                                int(line) if line is not None else None, evidence)
                    for rule, severity, n, job_id, message, line, evidence in conn.execute(query)]

    def stages(self, owner: str | None, since: float, limit: int = 20) -> list[StageSummary]:
        """Seconds spent per engine stage, slowest (by p95) first."""
        items = self.sql.object_items(JobRow.result, "stages")
        seconds = self.sql.member_number(items)
        samples = (
            select(JobRow.id.label("job_id"), items.c.key.label("stage"), seconds.label("seconds"),
                   func.cume_dist().over(partition_by=items.c.key, order_by=seconds).label("rank"),
                   func.row_number().over(partition_by=items.c.key,
                                          order_by=(seconds.desc(), JobRow.id)).label("slowness"))
            .select_from(JobRow).join(items, true())
            .where(JobRow.status == JobStatus.done.value, JobRow.finished_at >= since, seconds.is_not(None),
                   *_owned(owner))
            .subquery()
        )

        def quantile(q: float):
            return func.min(case((samples.c.rank >= q, samples.c.seconds)))

        p95 = quantile(0.95).label("p95")
        query = (
            select(samples.c.stage, func.count(), func.avg(samples.c.seconds), quantile(0.5), p95,
                   func.max(samples.c.seconds), func.max(case((samples.c.slowness == 1, samples.c.job_id))))
            .group_by(samples.c.stage).order_by(p95.desc(), samples.c.stage).limit(limit)
        )
        with self.engine.connect() as conn:
            return [StageSummary(stage=stage, count=int(n), mean_s=float(mean), p50_s=float(p50), p95_s=float(p95_s),
                                 max_s=float(top), slowest_job_id=slowest)
                    for stage, n, mean, p50, p95_s, top, slowest in conn.execute(query)]

    def recent_jobs(self, owner: str | None, limit: int, outcome: str | None = None) -> list[JobSummary]:
        """The latest jobs (newest first), optionally of one outcome."""
        rules = self.sql.array_length(JobRow.result, "rules")
        query = (
            select(JobRow.id, JobRow.status, case((JobRow.status.in_(TERMINAL_STATUSES), _outcome())),
                   JobRow.created_at, JobRow.finished_at, JobRow.problem_id, ProblemRow.name,
                   self.sql.number(JobRow.result, "speedup"), self.sql.number(JobRow.result, "reward"), rules)
            .outerjoin(ProblemRow, ProblemRow.id == JobRow.problem_id)
            .where(*_owned(owner))
            .order_by(JobRow.created_at.desc(), JobRow.id.desc()).limit(limit)
        )
        if outcome is not None:
            query = query.where(JobRow.status.in_(TERMINAL_STATUSES), _outcome() == outcome)
        with self.engine.connect() as conn:
            return [JobSummary(job_id, status, out, created, finished, pid, name, speedup, reward, int(fired or 0))
                    for job_id, status, out, created, finished, pid, name, speedup, reward, fired
                    in conn.execute(query)]
