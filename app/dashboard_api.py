"""/v1/dashboard/...: the JSON the dashboard page draws, scoped like the rest of the API.

A key sees aggregates over its own jobs; an admin key (and open mode) over every key's jobs.
Every answer is bounded: a time window of at most 30 days and a row limit per list.
"""

from __future__ import annotations

import asyncio
import time

from fastapi import APIRouter, Depends, Query, Request

from app.auth import Principal, authenticate
from app.dashboard_schemas import (
    AccessView,
    DeviceLoad,
    JobDetail,
    JobSummaryView,
    LiveView,
    OutcomeCounts,
    OutcomeSeries,
    ProblemSpeedups,
    RuleSummary,
    SessionView,
    StageSummary,
    WorkerView,
)
from app.dashboard_stats import InFlightJob, JobStats, QueueSnapshot
from app.views import job_view, not_found
from worker.jobs.store import JobStatus
from worker.jobs.store.records import iso_time

router = APIRouter(prefix="/v1/dashboard", tags=["dashboard"],
                   responses={401: {"description": "Missing or invalid API key"},
                              429: {"description": "Rate limit (see Retry-After)"}})

# Celery workers are known to the API only through the jobs they take: list those seen this recently.
RECENT_WORKER_S = 600.0
HoursParam = Query(default=24.0, ge=0.1, le=720, allow_inf_nan=False, description="Window: the last N hours.")


def _owner(principal: Principal) -> str | None:
    return None if principal.admin else principal.key_id


def _stats(request: Request) -> JobStats:
    return JobStats(request.app.state.store)


@router.get("/access", response_model=AccessView)
async def access(request: Request) -> AccessView:
    """Whether the page must ask for a key (it asks nothing in open mode). Needs no key itself."""
    return AccessView(key_required=not request.app.state.api.open_mode)


@router.get("/session", response_model=SessionView)
async def session(principal: Principal = Depends(authenticate)) -> SessionView:
    """Who the dashboard is signed in as (the page checks a key with this before keeping it)."""
    return SessionView(key_id=principal.key_id, admin=principal.admin,
                       scope="all_keys" if principal.admin else "own_key")


def _device_label(worker: str, gpu: str | None) -> str:
    # Worker names are "<kind>@<host>:<suffix>" (worker/jobs/launchers/embedded_launcher.py,
    # worker/jobs/distributed/tasks.py).
    host = worker.split("@", 1)[-1].rsplit(":", 1)[0]
    return f"{host} GPU {gpu}" if gpu is not None else f"{host} CPU"


def _workers(snapshot: QueueSnapshot, configured: list[tuple[str, str | None]], principal: Principal,
             now: float) -> list[WorkerView]:
    """Configured embedded workers, workers with a job in flight, and workers that took a job lately."""
    busy: dict[str, InFlightJob] = {job.worker: job for job in snapshot.in_flight if job.worker}
    devices: dict[str, str | None] = dict(configured)
    for name, gpu in snapshot.recent_workers:
        devices.setdefault(name, gpu)
    for name, job in busy.items():
        devices[name] = job.gpu
    views = []
    for name in sorted(devices):
        job = busy.get(name)
        visible = job is not None and principal.can_see(job.api_key_id)
        views.append(WorkerView(
            name=name, device=_device_label(name, devices[name]), busy=job is not None,
            job_id=job.job_id if visible else None,
            job_status=JobStatus(job.status) if job is not None else None,
            busy_for_s=now - job.building_at if job is not None and job.building_at is not None else None,
        ))
    return views


def _device_loads(workers: list[WorkerView]) -> list[DeviceLoad]:
    loads: dict[str, DeviceLoad] = {}
    for worker in workers:
        load = loads.setdefault(worker.device, DeviceLoad(device=worker.device, workers=0, busy=0))
        load.workers += 1
        load.busy += worker.busy
    return [loads[device] for device in sorted(loads)]


@router.get("/live", response_model=LiveView)
async def live(request: Request, principal: Principal = Depends(authenticate)) -> LiveView:
    """Queue depth and what every worker is doing now (the page polls this)."""
    state = request.app.state
    launcher = state.launcher
    snapshot, alive = await asyncio.gather(
        asyncio.to_thread(_stats(request).queue, _owner(principal), recent_s=RECENT_WORKER_S),
        asyncio.to_thread(launcher.workers_alive),
    )
    configured = [(identity.name, identity.gpu) for identity in launcher.identities]  # none in Celery mode
    now = time.time()
    workers = _workers(snapshot, configured, principal, now)
    return LiveView(at=iso_time(now) or "", mode=launcher.mode, workers_alive=alive, queued=snapshot.queued,
                    queued_yours=snapshot.queued_owned, in_flight=len(snapshot.in_flight),
                    devices=_device_loads(workers), workers=workers)


@router.get("/outcomes", response_model=OutcomeSeries)
async def outcomes(request: Request, hours: float = HoursParam,
                   buckets: int = Query(default=48, ge=1, le=240, description="Number of time buckets."),
                   principal: Principal = Depends(authenticate)) -> OutcomeSeries:
    """Finished jobs per time bucket, by verdict (failed / cancelled for jobs with no evaluation)."""
    until = time.time()
    since = until - hours * 3600
    counts = await asyncio.to_thread(_stats(request).outcomes, _owner(principal), since, until, buckets)
    width = (until - since) / buckets
    series: dict[str, list[int]] = {}
    for row in counts:
        series.setdefault(row.outcome, [0] * buckets)[row.bucket] = row.count
    return OutcomeSeries(
        since=iso_time(since) or "", until=iso_time(until) or "", bucket_s=width,
        bucket_starts=[iso_time(since + i * width) or "" for i in range(buckets)],
        series=[OutcomeCounts(outcome=name, counts=values) for name, values in sorted(series.items())],
    )


@router.get("/speedups", response_model=list[ProblemSpeedups])
async def speedups(request: Request, hours: float = HoursParam,
                   problems: int = Query(default=12, ge=1, le=50, description="At most this many problems."),
                   principal: Principal = Depends(authenticate)) -> list[ProblemSpeedups]:
    """Speedup quantiles of correct, timed jobs per problem (the problems with the most such jobs)."""
    rows = await asyncio.to_thread(_stats(request).speedups, _owner(principal), time.time() - hours * 3600, problems)
    return [ProblemSpeedups(problem_id=r.problem_id, problem_name=r.problem_name, count=r.count, min=r.minimum,
                            p25=r.p25, median=r.median, p75=r.p75, max=r.maximum) for r in rows]


@router.get("/rules", response_model=list[RuleSummary])
async def rules(request: Request, hours: float = HoursParam,
                limit: int = Query(default=10, ge=1, le=50),
                principal: Principal = Depends(authenticate)) -> list[RuleSummary]:
    """The reward-hacking rules that fired on the most jobs, each with its latest hit."""
    rows = await asyncio.to_thread(_stats(request).rules, _owner(principal), time.time() - hours * 3600, limit)
    return [RuleSummary(rule=r.rule, severity=r.severity, jobs=r.jobs, example_job_id=r.example_job_id,
                        message=r.message, line=r.line, evidence=r.evidence) for r in rows]


@router.get("/stages", response_model=list[StageSummary])
async def stages(request: Request, hours: float = HoursParam,
                 principal: Principal = Depends(authenticate)) -> list[StageSummary]:
    """Seconds per engine stage (mean, median, p95, max, and the slowest job), slowest first."""
    return await asyncio.to_thread(_stats(request).stages, _owner(principal), time.time() - hours * 3600)


@router.get("/jobs", response_model=list[JobSummaryView])
async def recent_jobs(request: Request, limit: int = Query(default=25, ge=1, le=200),
                      outcome: str | None = Query(default=None, max_length=32, pattern=r"^[a-z_]+$",
                                                  description="Only finished jobs with this verdict or status."),
                      principal: Principal = Depends(authenticate)) -> list[JobSummaryView]:
    """The latest jobs, newest first."""
    rows = await asyncio.to_thread(_stats(request).recent_jobs, _owner(principal), limit, outcome)
    return [JobSummaryView(id=r.job_id, status=JobStatus(r.status), outcome=r.outcome,
                           created_at=iso_time(r.created_at) or "", finished_at=iso_time(r.finished_at),
                           problem_id=r.problem_id, problem_name=r.problem_name, speedup=r.speedup,
                           reward=r.reward, rules_fired=r.rules_fired) for r in rows]


@router.get("/jobs/{job_id}", response_model=JobDetail, responses={404: {"description": "Unknown id"}})
async def job_detail(job_id: str, request: Request, principal: Principal = Depends(authenticate)) -> JobDetail:
    """One job with its submission: result, rules and evidence, and the candidate's source."""
    store = request.app.state.store
    job = await asyncio.to_thread(store.get, job_id)
    if job is None or not principal.can_see(job.api_key_id):
        raise not_found("evaluation", job_id)
    problem = await asyncio.to_thread(store.get_problem, job.problem_id)
    return JobDetail(job=job_view(job), problem_name=problem.name if problem else None,
                     candidate=job.submission.get("candidate"), completion=job.submission.get("completion"),
                     extraction=job.submission.get("extraction"))
