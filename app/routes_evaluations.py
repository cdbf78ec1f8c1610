"""/v1/evaluations: submit (single and batch), read, wait, cancel, export."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

from fastapi import APIRouter, Depends, Header, HTTPException, Query, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import ValidationError

from app.auth import Principal, authenticate
from app.schemas import BatchCreate, BatchItem, BatchResponse, EvaluationCreate, ItemError, JobList, JobView
from app.service import SubmissionError
from app.views import clean_errors, http_error, job_view, not_found
from worker.jobs.store import TERMINAL_STATUSES, Job, public_job
from worker.jobs.store.json_text import to_json_text

router = APIRouter(prefix="/v1", tags=["evaluations"])

ERRORS: dict[int | str, dict[str, Any]] = {401: {"description": "Missing or invalid API key"}, 413: {"description": "Body too large"},
          429: {"description": "Rate limit or quota (see Retry-After)"}, 503: {"description": "Queue full"}}
WaitParam = Query(default=0.0, ge=0, le=86400, allow_inf_nan=False,
                  description="Hold the request up to this many seconds (capped by the server) for the result.")
IdempotencyHeader = Header(default=None, alias="Idempotency-Key", min_length=1, max_length=200,
                           description="Same key (per API key) returns the same job instead of a new one.")


def _state(request: Request):
    return request.app.state


async def _wait(request: Request, jobs: list[Job], wait_s: float) -> dict[str, Job]:
    by_id = {job.id: job for job in jobs}
    pending = [job.id for job in jobs if not job.terminal]
    if wait_s <= 0 or not pending:
        return by_id
    state = _state(request)
    fresh = await state.events.wait_until_finished(state.store.get_many, pending,
                                                   min(wait_s, state.api.max_wait_s))
    by_id.update(fresh)
    return by_id


@router.post("/evaluations", status_code=202, response_model=JobView,
             responses={200: {"model": JobView, "description": "Finished within ?wait="},
                        409: {"description": "Idempotency-Key reused with another body"}, **ERRORS})
async def create_evaluation(body: EvaluationCreate, request: Request, response: Response,
                            wait: float = WaitParam, idempotency_key: str | None = IdempotencyHeader,
                            principal: Principal = Depends(authenticate)) -> JobView:
    """Queue one evaluation. 202 with the job; 200 if it finished within `wait`."""
    submitter = _state(request).submitter

    def submit():
        return submitter.submit(body, principal, submitter.capacity(principal), idempotency_key)

    try:
        job, _ = await asyncio.to_thread(submit)
    except SubmissionError as error:
        raise http_error(error) from None
    job = (await _wait(request, [job], wait))[job.id]
    response.status_code = 200 if job.terminal else 202
    response.headers["Location"] = f"/v1/evaluations/{job.id}"
    return job_view(job)


@router.post("/evaluations:batch", status_code=202, response_model=BatchResponse, responses=ERRORS)
async def create_batch(body: BatchCreate, request: Request, response: Response, wait: float = WaitParam,
                       idempotency_key: str | None = IdempotencyHeader,
                       principal: Principal = Depends(authenticate)) -> BatchResponse:
    """Queue many evaluations; a bad item gets an inline error and the others are accepted.

    With Idempotency-Key K, item i uses the key "K#i", so a retried batch returns the same jobs.
    """
    state = _state(request)
    limit = state.api.max_batch_items
    if len(body.items) > limit:
        raise HTTPException(422, [{"type": "too_long", "loc": ["body", "items"],
                                   "msg": f"at most {limit} items per batch; split the batch"}])
    submitter = state.submitter

    def submit_all() -> list[BatchItem]:
        capacity = submitter.capacity(principal)
        out: list[BatchItem] = []
        for index, raw in enumerate(body.items):
            loc = ("body", "items", index)
            try:
                item = EvaluationCreate.model_validate(raw)
                key = f"{idempotency_key}#{index}" if idempotency_key else None
                job, _ = submitter.submit(item, principal, capacity, key, loc)
            except ValidationError as exc:
                out.append(BatchItem(index=index, error=ItemError(status=422, detail=clean_errors(exc, loc))))
                continue
            except SubmissionError as exc:
                out.append(BatchItem(index=index, error=ItemError(status=exc.status, detail=exc.detail)))
                continue
            out.append(BatchItem(index=index, job=job_view(job)))
        return out

    items = await asyncio.to_thread(submit_all)
    accepted = [item for item in items if item.job is not None]
    if wait > 0 and accepted:
        ids = [item.job.id for item in accepted if item.job is not None]
        state_jobs = await asyncio.to_thread(state.store.get_many, ids)
        finished = await _wait(request, list(state_jobs.values()), wait)
        for item in accepted:
            if item.job is not None and item.job.id in finished:
                item.job = job_view(finished[item.job.id])
    response.status_code = 200 if accepted and all(i.job is not None and i.job.status.value in TERMINAL_STATUSES
                                                    for i in accepted) else 202
    return BatchResponse(accepted=len(accepted), rejected=len(items) - len(accepted), items=items)


@router.get("/evaluations", response_model=JobList, responses=ERRORS)
async def read_evaluations(request: Request,
                           ids: str = Query(min_length=1, max_length=40_000, description="Comma-separated job ids."),
                           wait: float = WaitParam, principal: Principal = Depends(authenticate)) -> JobList:
    """Read many jobs at once (optionally waiting until all are finished)."""
    state = _state(request)
    wanted = list(dict.fromkeys(i.strip() for i in ids.split(",") if i.strip()))
    if len(wanted) > state.api.max_ids_per_read:
        raise HTTPException(422, [{"type": "too_long", "loc": ["query", "ids"],
                                   "msg": f"at most {state.api.max_ids_per_read} ids per read"}])
    found = await asyncio.to_thread(state.store.get_many, wanted)
    visible = {i: j for i, j in found.items() if principal.can_see(j.api_key_id)}
    visible = await _wait(request, list(visible.values()), wait)
    return JobList(items=[job_view(visible[i]) for i in wanted if i in visible],
                   missing=[i for i in wanted if i not in visible])


async def _visible_job(request: Request, job_id: str, principal: Principal) -> Job:
    job = await asyncio.to_thread(_state(request).store.get, job_id)
    if job is None or not principal.can_see(job.api_key_id):
        raise not_found("evaluation", job_id)
    return job


@router.get("/evaluations/{job_id}", response_model=JobView, responses={404: {"description": "Unknown id"}, **ERRORS})
async def read_evaluation(job_id: str, request: Request, wait: float = WaitParam,
                          principal: Principal = Depends(authenticate)) -> JobView:
    job = await _visible_job(request, job_id, principal)
    return job_view((await _wait(request, [job], wait))[job.id])


@router.delete("/evaluations/{job_id}", response_model=JobView,
               responses={404: {"description": "Unknown id"}, 409: {"description": "Already started or finished"},
                          **ERRORS})
async def cancel_evaluation(job_id: str, request: Request, principal: Principal = Depends(authenticate)) -> JobView:
    """Cancel a queued job. A job that already started cannot be cancelled (409)."""
    before = await _visible_job(request, job_id, principal)
    job = await asyncio.to_thread(_state(request).store.cancel, job_id) if before.status == "queued" else before
    if job is None:
        raise not_found("evaluation", job_id)
    if before.status != "queued" or job.status != "cancelled":
        raise HTTPException(409, f"job {job_id} is {job.status}; only queued jobs can be cancelled")
    return job_view(job)


@router.get("/evaluations:export", response_class=StreamingResponse,
            responses={200: {"content": {"application/x-ndjson": {}},
                             "description": "One finished job per line, with its submission and reference."},
                       403: {"description": "Needs an admin key when all_keys=true"}, **ERRORS})
def export_evaluations(request: Request,
                       since: float | None = Query(default=None, ge=0, allow_inf_nan=False,
                                                   description="Only jobs created at or after this UNIX time."),
                       include_unfinished: bool = Query(default=False),
                       all_keys: bool = Query(default=False, description="Every client's jobs (admin keys)."),
                       principal: Principal = Depends(authenticate)) -> StreamingResponse:
    """Stream jobs as JSONL: every finished evaluation is a labelled data point."""
    if all_keys and not principal.admin:
        raise HTTPException(403, "all_keys=true needs an admin key (KEY:admin)")
    store = _state(request).store
    owner = None if all_keys else principal.key_id

    def lines() -> Iterator[bytes]:
        references: dict[str, str | None] = {}
        for job in store.iter_jobs(api_key_id=owner, since=since, finished_only=not include_unfinished):
            if job.problem_id not in references:
                if len(references) > 256:
                    references.clear()
                problem = store.get_problem(job.problem_id)
                references[job.problem_id] = problem.reference if problem else None
            record = public_job(job)
            record["submission"] = job.submission
            record["reference"] = references[job.problem_id]
            yield (to_json_text(record) + "\n").encode()

    return StreamingResponse(lines(), media_type="application/x-ndjson")
