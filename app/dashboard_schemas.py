"""Response bodies of /v1/dashboard/... (what the dashboard page draws)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from app.dashboard_stats import StageSummary as StageSummary  # /stages: the store's rows as they are
from app.schemas import JobView
from worker.jobs.store import JobStatus


class AccessView(BaseModel):
    key_required: bool = Field(description="False only in open mode (loopback, no keys).")


class SessionView(BaseModel):
    key_id: str = Field(description="Id of the API key (not the key), as stored with its jobs.")
    admin: bool
    scope: Literal["all_keys", "own_key"] = Field(description="Whose jobs the dashboard counts.")


class DeviceLoad(BaseModel):
    device: str = Field(description="'<host> GPU <index>' or '<host> CPU'.")
    workers: int
    busy: int


class WorkerView(BaseModel):
    name: str
    device: str
    busy: bool
    job_id: str | None = Field(default=None, description="The job it runs, if it is visible to this key.")
    job_status: JobStatus | None = None
    busy_for_s: float | None = Field(default=None, description="Seconds since it took its current job.")


class LiveView(BaseModel):
    at: str
    mode: str = Field(description="embedded (worker threads in the API process) or celery.")
    workers_alive: int
    queued: int = Field(description="Jobs of every key waiting for a worker: the queue in front of a new job.")
    queued_yours: int = Field(description="Of those, jobs in this dashboard's scope.")
    in_flight: int
    devices: list[DeviceLoad]
    workers: list[WorkerView] = Field(description="This process's embedded workers, and every worker that has a "
                                                  "job in flight or took one in the last 10 minutes (Celery).")


class OutcomeCounts(BaseModel):
    outcome: str = Field(description="The verdict of a finished evaluation, or failed / cancelled.")
    counts: list[int] = Field(description="Jobs finished in each bucket.")


class OutcomeSeries(BaseModel):
    since: str
    until: str
    bucket_s: float
    bucket_starts: list[str]
    series: list[OutcomeCounts]


class ProblemSpeedups(BaseModel):
    problem_id: str
    problem_name: str | None
    count: int = Field(description="Correct, timed jobs.")
    min: float
    p25: float
    median: float
    p75: float
    max: float


class RuleSummary(BaseModel):
    rule: str
    severity: str
    jobs: int = Field(description="Jobs in the window on which this rule fired.")
    example_job_id: str = Field(description="The latest of them.")
    message: str
    line: int | None
    evidence: str | None


class JobSummaryView(BaseModel):
    id: str
    status: JobStatus
    outcome: str | None = Field(description="Verdict of a finished evaluation, failed or cancelled; None while active.")
    created_at: str
    finished_at: str | None
    problem_id: str
    problem_name: str | None
    speedup: float | None
    reward: float | None
    rules_fired: int


class JobDetail(BaseModel):
    job: JobView
    problem_name: str | None
    candidate: str | None = Field(description="The source that was evaluated (extracted from the completion "
                                              "when a completion was sent).")
    completion: str | None = None
    extraction: str | None = Field(default=None, description="How the candidate was found in the completion.")
