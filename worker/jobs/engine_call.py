"""The two steps of a claimed job and their records in the store: the only engine call site.

`prepare_claimed` (validate, policy, build; CPU) and `execute_ready` (device stages) are run by
the pipeline (worker/jobs/pipeline.py), which both launchers use (worker/jobs/launchers/): the embedded workers of
`kerneljudge serve` and the Celery task of `kerneljudge worker`. `done` means the engine produced
an EvalResult (whatever its verdict); `failed` means it could not (missing problem, engine
crash), with the reason in `error`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from contract.requests import EvalOptions, EvalRequest
from contract.results import ErrorInfo, EvalResult
from contract.statuses import EvalStatus
from worker.jobs.store.jobs import JobStore
from worker.jobs.store.records import Job, Problem

if TYPE_CHECKING:
    from worker.config.tree import KernelJudgeConfig
    from worker.engine.gpu_schedule import DeviceLease, GpuSchedule

log = logging.getLogger(__name__)

BUILD_STAGES = frozenset({"validate", "build"})


@dataclass(frozen=True)
class WorkerIdentity:
    """One device of a worker process: the pipeline's lane for it (several jobs in flight)."""

    name: str  # e.g. embedded@host:gpu0 or celery@host:pid
    device: str  # "cpu" or "cuda": the device every job on this worker runs on
    gpu: str | None = None  # GPU index (as the worker sees it) or None on CPU


def extraction_failure_result(options: dict[str, Any], message: str) -> dict[str, Any]:
    """The result of a completion with no usable code block: an evaluation, with format = 0."""
    from worker.engine.verdict import reward

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
    # A job that names no policy profile gets the one its key has for the problem (get_problem).
    policy = dict(options.get("policy") or {})
    if policy.get("profile") is None and problem.profile is not None:
        policy["profile"] = problem.profile
        options["policy"] = policy
    return EvalRequest(reference=problem.reference, candidate=job.submission["candidate"], options=options)


@dataclass(frozen=True)
class EngineCalls:
    """The engine calls the pipeline makes (tests pass fakes with the same signatures)."""

    prepare: Callable[..., Any]  # (request, *, settings, on_stage) -> PreparedJob | EvalResult
    execute: Callable[..., Any]  # (prepared, *, settings, on_stage) -> EvalResult
    # (request, settings) -> bool: start the request's judge ahead, while its candidate is prepared.
    warm: Callable[..., Any] | None = None
    # (settings) -> set of problem ids (reference sha256) whose judge is warm on that device.
    warm_problems: Callable[..., Any] | None = None
    # (settings, threads) -> int: kill the sandboxes (judges, candidate runners) these threads hold, so
    # that a thread blocked on one's reply wakes with an error: a stalled lane's restart (watchdog).
    reset: Callable[..., Any] | None = None


def real_engine() -> EngineCalls:
    # Imported here so that the API and the Celery parent never load the engine's dependencies.
    from worker import engine
    from worker.engine.reference.judge_start import warm_reference
    from worker.engine.reference.reference_cache import cache_for

    return EngineCalls(prepare=engine.prepare, execute=engine.execute, warm=warm_reference,
                       warm_problems=lambda settings: cache_for(settings).problems(), reset=kill_sandboxes_held_by)


def kill_sandboxes_held_by(settings, threads) -> int:
    """Kill the judges and candidate runners `threads` hold on this device (the real engine's `reset`)."""
    from worker.engine.reference.reference_cache import cache_for
    from worker.engine.sandbox_pool import kill_runners_held_by

    return cache_for(settings).kill_held_by(threads) + kill_runners_held_by(threads)


def engine_settings_for(identity: WorkerIdentity, schedule: GpuSchedule | None = None, *,
                        config: KernelJudgeConfig):
    """Engine settings for one device of this worker: the process's configuration, pinned to its GPU.

    Built once per device lane and reused for all its jobs, so values the settings cache lazily
    (e.g. the CUDA arch read from nvidia-smi) survive between jobs. Embedded workers are threads
    of one process, so the GPU is chosen through `gpu_index` (the engine sets
    CUDA_VISIBLE_DEVICES for the sandboxes it starts).
    """
    from worker.engine.engine_settings import EngineSettings

    settings = EngineSettings.from_config(config)
    if identity.gpu is not None and identity.gpu.isdigit():
        settings.gpu_index = int(identity.gpu)
    settings.gpu_schedule = schedule
    return settings


@dataclass
class ReadyJob:
    """A claimed job whose candidate the engine prepared (validated, built): it waits for its device."""

    job: Job
    problem: Problem
    prepared: Any  # worker.engine.PreparedJob

    def discard(self) -> None:
        self.prepared.discard()


def prepare_claimed(store: JobStore, job: Job, identity: WorkerIdentity, settings: Any,
                    engine: EngineCalls) -> ReadyJob | Job | None:
    """Prepare a job this worker claimed (status `building`), on a CPU thread.

    Its problem's judge is started ahead first (engine.warm, in the background), so that it is ready
    when the job reaches the device. Returns a ReadyJob for the device stage, or the job's final
    record when it ended here (an invalid source, a build error, a missing problem, an engine crash),
    or None when this attempt no longer owns the job.
    """
    attempt = job.attempts
    problem = store.get_problem(job.problem_id, job.api_key_id)  # with the profile of the job's own key
    if problem is None:
        return _failed(store, job, f"problem {job.problem_id} is not in the store")
    try:
        request = build_request(job, problem, identity)
    except (ValidationError, KeyError) as exc:
        return _failed(store, job, f"stored submission is not a valid evaluation request: {exc}")
    if engine.warm is not None:
        try:
            engine.warm(request, settings)
        except Exception:  # a warm-up is an optimisation: the job's own reference stage starts the judge
            log.exception("starting the judge of job %s ahead failed", job.id)
    try:
        prepared = engine.prepare(request, settings=settings, on_stage=None)
    except Exception as exc:  # the engine must return a verdict; anything else is a service failure
        log.exception("engine crashed preparing job %s", job.id)
        return _failed(store, job, f"the evaluation engine crashed: {type(exc).__name__}: {exc}")
    if isinstance(prepared, EvalResult):
        return _record(store, job, problem, prepared)
    if not store.mark_built(job.id, attempt):
        prepared.discard()
        log.warning("job %s changed state while attempt %d was prepared; dropped", job.id, attempt)
        return None
    return ReadyJob(job=job, problem=problem, prepared=prepared)


def execute_ready(store: JobStore, ready: ReadyJob, settings: Any, engine: EngineCalls,
                  lease: DeviceLease, progress: Callable[[], None] | None = None) -> Job | None:
    """Run a prepared job's device stages under its device lease and record the outcome.

    `progress` is called at every stage the engine enters (the lane watchdog's sign of life).
    Returns the final record, or None when this attempt no longer owns the job.
    """
    job = ready.job
    waited_s = timing_waited_s = 0.0

    def on_stage(stage: str) -> None:
        nonlocal waited_s, timing_waited_s
        if progress is not None:
            progress()
        entered = time.monotonic()
        lease.enter(stage)  # may wait: another job is timing on this device
        waited_s += time.monotonic() - entered
        if lease.held == "exclusive":  # waited for the other jobs' stages to end, to time alone
            timing_waited_s += time.monotonic() - entered
        if progress is not None:
            progress()  # and again once it has the device
        if stage not in BUILD_STAGES:
            store.mark_running(job.id, job.attempts)  # no-op after the first device stage

    try:
        result = engine.execute(ready.prepared, settings=settings, on_stage=on_stage)
    except Exception as exc:  # the engine must return a verdict; anything else is a service failure
        log.exception("engine crashed on job %s", job.id)
        ready.discard()
        return _failed(store, job, f"the evaluation engine crashed: {type(exc).__name__}: {exc}")
    finally:
        lease.release()
    result.extra.device_wait_s = round(waited_s, 3)
    result.extra.timing_wait_s = round(timing_waited_s, 3)
    return _record(store, job, ready.problem, result)


def _failed(store: JobStore, job: Job, reason: str) -> Job | None:
    if not store.fail(job.id, reason, attempt=job.attempts):
        return None
    return store.get(job.id)


def _record(store: JobStore, job: Job, problem: Problem, result: EvalResult) -> Job | None:
    payload = result.model_dump(mode="json")
    extraction = job.submission.get("extraction")
    if extraction:
        payload.setdefault("extra", {})["extraction"] = extraction
    if not store.finish(job.id, job.attempts, payload, result.status.value):
        log.warning("job %s changed state while attempt %d ran; its result was not stored", job.id, job.attempts)
        return None
    if result.correctness is not None:
        store.note_degenerate_reference(problem.id, result.correctness.degenerate_reference)
    return store.get(job.id)
