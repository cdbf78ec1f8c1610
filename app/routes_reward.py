"""OpenRLHF remote reward endpoint: POST /get_reward.

The contract (body, answer, fallback, prompt stripping, labels) is kerneljudge/adapters/openrlhf.py,
shared with OpenRLHF's file mode; this route adds what only the service does: submit every item,
wait for all of them at most `timeout` seconds (capped by KERNELJUDGE_REWARD_WAIT_S), and withdraw
items still queued at the deadline so they do not hold the queue.
A done job whose result is no verdict (status sandbox_error: the harness failed, `result.judged` is
false) gets the fallback like a failed one.
OpenRLHF cannot send headers: the API key may be given as `?key=...` here.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from pydantic import ValidationError

from app.auth import Principal, authenticate_bearer_or_query
from app.schemas import EvaluationCreate, RewardRequest
from app.service import SubmissionError
from contract.get_reward import (
    GetRewardRequestError,
    GetRewardResponse,
    RewardRequestItem,
    parse_get_reward_request,
    response_from_outcomes,
)
from contract.outcomes import DEFAULT_FALLBACK_REWARD, Outcome, outcome_from_done, outcome_from_failure
from contract.requests import EvalOptions
from contract.results import EvalResult
from worker.engine.verdict.reward import validate_preset
from worker.jobs.store import Job

router = APIRouter(tags=["trainers"])


def _invalid(loc: list[str], message: str) -> HTTPException:
    return HTTPException(422, [{"type": "value_error", "loc": loc, "msg": message}])


def _item_body(item: RewardRequestItem, options: EvalOptions) -> EvaluationCreate:
    assert item.reference is not None
    return EvaluationCreate(reference=item.reference.reference, problem_id=item.reference.problem_id,
                            completion=item.completion, options=options)


def _outcome(job_id: str | None, job: Job | None, reason: str | None) -> Outcome:
    if reason is None and job is not None and job.status == "done" and job.result:
        return outcome_from_done(EvalResult.model_validate(job.result), job.id, DEFAULT_FALLBACK_REWARD)
    if reason is None:
        reason = ("job disappeared from the store" if job is None
                  else f"{job.status}: {job.error or 'no reason recorded'}")
    return outcome_from_failure(reason, DEFAULT_FALLBACK_REWARD, job_id)


@router.post("/get_reward", response_model=GetRewardResponse,
             responses={401: {"description": "Missing or invalid key"}, 422: {"description": "Bad body"}})
async def get_reward(body: RewardRequest, request: Request,
                     reward_preset: str = Query(default="default", max_length=64),
                     timeout: float | None = Query(default=None, gt=0, le=86400, allow_inf_nan=False,
                                                   description="Seconds to wait for all items (server-capped)."),
                     principal: Principal = Depends(authenticate_bearer_or_query)) -> GetRewardResponse:
    try:
        items = parse_get_reward_request(body.model_dump())
    except GetRewardRequestError as exc:
        raise _invalid(["body", exc.field], str(exc)) from None
    try:
        validate_preset(reward_preset, None)
        options = EvalOptions(reward_preset=reward_preset)
    except (ValidationError, ValueError) as exc:
        raise _invalid(["query", "reward_preset"], str(exc)) from None

    state = request.app.state
    submitter = state.submitter
    n = len(items)
    reasons: list[str | None] = [item.label_error for item in items]
    job_ids: list[str | None] = [None] * n

    def submit_all() -> None:
        capacity = submitter.capacity(principal)
        for i, item in enumerate(items):
            if reasons[i] is not None:
                continue
            try:
                job, _ = submitter.submit(_item_body(item, options), principal, capacity)
                job_ids[i] = job.id
            except ValidationError as exc:
                reasons[i] = "invalid item: " + "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}"
                                                          for e in exc.errors())
            except SubmissionError as exc:
                reasons[i] = f"not submitted (HTTP {exc.status}): {exc.detail}"

    await asyncio.to_thread(submit_all)
    wait_s = min(timeout or state.api.reward_wait_s, state.api.reward_wait_s)
    submitted = [i for i in job_ids if i is not None]
    jobs = await state.events.wait_until_finished(state.store.get_many, submitted, wait_s) if submitted else {}
    unfinished = {job_id: job.status for job_id, job in jobs.items() if not job.terminal}
    for job_id, status in unfinished.items():
        if status == "queued":
            await asyncio.to_thread(state.store.cancel, job_id)
    for i, job_id in enumerate(job_ids):
        if job_id in unfinished:
            reasons[i] = (f"timeout: not finished within {wait_s:.0f}s (was {unfinished[job_id]}"
                          + ("; withdrawn from the queue)" if unfinished[job_id] == "queued" else ")"))
    return response_from_outcomes([_outcome(job_ids[i], jobs.get(job_ids[i] or ""), reasons[i]) for i in range(n)])
