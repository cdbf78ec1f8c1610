"""Run one claimed job through the engine and record the outcome: the only engine call site.

Both executors use it: the embedded worker threads of `kerneljudge serve` and the Celery task
of `kerneljudge worker`. `done` means the engine produced an EvalResult (whatever its verdict);
`failed` means it could not (missing problem, engine crash), with the reason in `error`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from worker.models import ErrorInfo, EvalOptions, EvalRequest, EvalResult, EvalStatus

from .jobs import JobStore
from .records import Job, Problem

log = logging.getLogger(__name__)

BUILD_STAGES = frozenset({"validate", "build"})


@dataclass(frozen=True)
class WorkerIdentity:
    name: str  # e.g. embedded@host:gpu0 or celery@host:pid
    device: str  # "cpu" or "cuda": the device every job on this worker runs on
    gpu: str | None = None  # GPU index (as the worker sees it) or None on CPU


def extraction_failure_result(options: dict[str, Any], message: str) -> dict[str, Any]:
    """The result of a completion with no usable code block: an evaluation, with format = 0."""
    from worker import reward

    parsed = EvalOptions.model_validate(options)
    comps = reward.components(compiled=False, correct=False, speedup=None, extracted=False)
    value = reward.compute_reward(parsed.reward_preset, comps, weights=parsed.reward_weights)
    result = EvalResult(
        status=EvalStatus.invalid_input,
        reward=value,
        reward_preset=parsed.reward_preset,
        reward_components=comps,
        error=ErrorInfo(kind="no_candidate", message=message),
    )
    return result.model_dump(mode="json")


def build_request(job: Job, problem: Problem, identity: WorkerIdentity) -> EvalRequest:
    options = dict(job.submission.get("options") or {})
    # The worker decides the device: a job runs where it was scheduled.
    options["device"] = identity.device
    # A job that names no policy profile gets its problem's.
    policy = dict(options.get("policy") or {})
    if policy.get("profile") is None and problem.profile is not None:
        policy["profile"] = problem.profile
        options["policy"] = policy
    return EvalRequest(reference=problem.reference, candidate=job.submission["candidate"], options=options)


def call_engine(request: EvalRequest, identity: WorkerIdentity, on_stage: Callable[[str], None]) -> EvalResult:
    # Imported here so that the API and the Celery parent never load the engine's dependencies.
    from worker import engine

    return engine.evaluate(request, settings=engine_settings_for(identity), on_stage=on_stage)


@functools.cache
def engine_settings_for(identity: WorkerIdentity):
    """Engine settings for this worker: the environment's, pinned to the worker's GPU.

    Built once per worker identity (a frozen, hashable dataclass) and reused for all its jobs,
    so values the settings cache lazily (e.g. the CUDA arch read from nvidia-smi) survive
    between jobs. Each identity is one worker running one job at a time.

    Embedded workers are threads of one process, so the GPU is chosen per job through
    `gpu_index` (the engine sets CUDA_VISIBLE_DEVICES for the sandboxes it starts).
    """
    from worker.settings import EngineSettings

    settings = EngineSettings.from_env()
    if identity.gpu is not None and identity.gpu.isdigit():
        settings.gpu_index = int(identity.gpu)
    return settings


def run_claimed_job(store: JobStore, job: Job, identity: WorkerIdentity) -> Job | None:
    """Evaluate a job this worker has claimed (status `building`); return its final record."""
    attempt = job.attempts
    problem = store.get_problem(job.problem_id)
    if problem is None:
        store.fail(job.id, f"problem {job.problem_id} is not in the store", attempt=attempt)
        return store.get(job.id)
    try:
        request = build_request(job, problem, identity)
    except (ValidationError, KeyError) as exc:
        store.fail(job.id, f"stored submission is not a valid evaluation request: {exc}", attempt=attempt)
        return store.get(job.id)

    def on_stage(stage: str) -> None:
        if stage not in BUILD_STAGES:
            store.mark_running(job.id, attempt)  # no-op after the first non-build stage

    try:
        result = call_engine(request, identity, on_stage)
    except Exception as exc:  # the engine must return a verdict; anything else is a service failure
        log.exception("engine crashed on job %s", job.id)
        store.fail(job.id, f"the evaluation engine crashed: {type(exc).__name__}: {exc}", attempt=attempt)
        return store.get(job.id)

    payload = result.model_dump(mode="json")
    extraction = job.submission.get("extraction")
    if extraction:
        payload.setdefault("extra", {})["extraction"] = extraction
    if not store.finish(job.id, attempt, payload, result.status.value):
        log.warning("job %s changed state while attempt %d ran; its result was not stored", job.id, attempt)
    elif result.correctness is not None:
        store.note_degenerate_reference(problem.id, result.correctness.degenerate_reference)
    return store.get(job.id)
