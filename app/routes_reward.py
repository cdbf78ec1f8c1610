"""OpenRLHF remote reward endpoint: POST /get_reward.

Body {"query": [...], "prompts": [...], "labels": [...]}: each query is a completion (OpenRLHF
sends prompt + response; the prompt prefix is stripped when `prompts` is given), each label the
reference source or a registered problem_id. All items are submitted, then the call waits for
all of them, at most `timeout` seconds (capped by KERNELJUDGE_REWARD_WAIT_S).

Fallback: an item that could not be submitted, failed, was cancelled, did not finish in time or
finished with no verdict (status sandbox_error: the harness failed, `result.judged` is false) gets
reward FALLBACK_REWARD (0.0), `extra_logs.fallback` = 1.0 and its reason in `reasons`.
Unfinished items still queued are cancelled so they do not hold the queue.
OpenRLHF cannot send headers: the API key may be given as `?key=...` here.
"""

from __future__ import annotations

import asyncio
import re

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from pydantic import ValidationError

from worker.jobs.store import Job
from worker.models import NON_VERDICT_STATUSES, EvalOptions

from .auth import Principal, authenticate_bearer_or_query
from .schemas import PROBLEM_ID_PATTERN, EvaluationCreate, RewardRequest, RewardResponse
from .service import SubmissionError

router = APIRouter(tags=["trainers"])

FALLBACK_REWARD = 0.0
_PROBLEM_ID = re.compile(PROBLEM_ID_PATTERN)


def _item_body(query: str, prompt: str | None, label: str, options: EvalOptions) -> EvaluationCreate:
    completion = query[len(prompt):] if prompt and query.startswith(prompt) else query
    if _PROBLEM_ID.match(label.strip()):
        return EvaluationCreate(problem_id=label.strip(), completion=completion, options=options)
    return EvaluationCreate(reference=label, completion=completion, options=options)


def _reason_for(job: Job | None) -> str | None:
    if job is None:
        return "job disappeared from the store"
    if job.status == "done" and (job.result or {}).get("status") in NON_VERDICT_STATUSES:
        error = (job.result or {}).get("error") or {}
        return f"no verdict ({job.result['status']}: {error.get('kind')}: {str(error.get('message'))[:300]})"
    if job.status == "done":
        return None
    return f"{job.status}: {job.error or 'no reason recorded'}"


@router.post("/get_reward", response_model=RewardResponse,
             responses={401: {"description": "Missing or invalid key"}, 422: {"description": "Bad body"}})
async def get_reward(body: RewardRequest, request: Request,
                     reward_preset: str = Query(default="default", max_length=64),
                     timeout: float | None = Query(default=None, gt=0, le=86400, allow_inf_nan=False,
                                                   description="Seconds to wait for all items (server-capped)."),
                     principal: Principal = Depends(authenticate_bearer_or_query)) -> RewardResponse:
    n = len(body.query)
    if body.labels is None or len(body.labels) != n:
        raise HTTPException(422, [{"type": "value_error", "loc": ["body", "labels"],
                                   "msg": "give one label per query: the reference source or a problem_id"}])
    if body.prompts is not None and len(body.prompts) != n:
        raise HTTPException(422, [{"type": "value_error", "loc": ["body", "prompts"],
                                   "msg": "give one prompt per query (or none)"}])
    try:
        options = EvalOptions(reward_preset=reward_preset)
        from worker.engine.reward import validate_preset

        validate_preset(reward_preset, None)
    except (ValidationError, ValueError) as exc:
        raise HTTPException(422, [{"type": "value_error", "loc": ["query", "reward_preset"], "msg": str(exc)}]) from None

    state = request.app.state
    submitter = state.submitter
    reasons: list[str | None] = [None] * n
    job_ids: list[str | None] = [None] * n

    def submit_all() -> None:
        capacity = submitter.capacity(principal)
        for i in range(n):
            prompt = body.prompts[i] if body.prompts is not None else None
            try:
                item = _item_body(body.query[i], prompt, body.labels[i], options)  # type: ignore[index]
                job, _ = submitter.submit(item, principal, capacity)
                job_ids[i] = job.id
            except ValidationError as exc:
                reasons[i] = "invalid item: " + "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}"
                                                          for e in exc.errors())
            except SubmissionError as exc:
                reasons[i] = f"not submitted (HTTP {exc.status}): {exc.detail}"

    await asyncio.to_thread(submit_all)
    wait_s = min(timeout or state.settings.reward_wait_s, state.settings.reward_wait_s)
    submitted = [i for i in job_ids if i is not None]
    jobs = await state.events.wait_until_finished(state.store.get_many, submitted, wait_s) if submitted else {}
    unfinished = {job_id: job.status for job_id, job in jobs.items() if not job.terminal}
    for job_id, status in unfinished.items():
        if status == "queued":
            await asyncio.to_thread(state.store.cancel, job_id)

    rewards: list[float] = []
    logs: dict[str, list[float]] = {k: [] for k in ("correct", "compiled", "speedup", "format", "fallback")}
    for i in range(n):
        job = jobs.get(job_ids[i]) if job_ids[i] else None
        if reasons[i] is None and job_ids[i] in unfinished:
            reasons[i] = (f"timeout: not finished within {wait_s:.0f}s (was {unfinished[job_ids[i]]}"
                          + ("; withdrawn from the queue)" if unfinished[job_ids[i]] == "queued" else ")"))
        elif reasons[i] is None:
            reasons[i] = _reason_for(job)
        result = (job.result or {}) if job is not None and reasons[i] is None else {}
        comps = result.get("reward_components") or {}
        rewards.append(float(result.get("reward", FALLBACK_REWARD)) if result else FALLBACK_REWARD)
        logs["correct"].append(1.0 if result.get("correct") else 0.0)
        logs["compiled"].append(1.0 if result.get("compiled") else 0.0)
        logs["speedup"].append(float(result.get("speedup") or 0.0))
        logs["format"].append(float(comps.get("format", 0.0)))
        logs["fallback"].append(0.0 if result else 1.0)
    return RewardResponse(rewards=rewards, scores=list(rewards), extra_logs=logs, reasons=reasons, job_ids=job_ids)
