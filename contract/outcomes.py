"""A result read as a trainer's reward: one sample's `Outcome`, the same for every adapter and `/get_reward`.

  - the service produced a verdict (job `done`, `result.judged`): reward = result.reward, components from
    the result, `correct` = the verdict's `correct` (true only for status `ok`: a rejected kernel whose
    outputs matched is not correct);
  - anything else (bad label, service unreachable, job failed or cancelled, deadline passed, or a done
    job whose result is no verdict: status sandbox_error, the harness failed): reward = the caller's
    `fallback_reward` (default 0.0), `fallback` = 1 and `reason` says why.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from contract.http_objects import Job
from contract.results import EvalResult
from contract.statuses import JobStatus

DEFAULT_FALLBACK_REWARD = 0.0
# Components reported per sample (metrics/logs), in this order.
LOGGED_COMPONENTS = ("format", "compiled", "correct", "speedup")


@dataclass(frozen=True)
class Outcome:
    reward: float
    components: dict[str, float] = field(default_factory=dict)
    status: str = "fallback"  # the verdict's status (ok, incorrect, ...) or "fallback"
    reason: str | None = None  # why the fallback reward was given
    job_id: str | None = None
    correct: bool = False  # the verdict's `correct`: passed every trial and was not rejected

    @property
    def fallback(self) -> bool:
        return self.reason is not None

    def metrics(self) -> dict[str, float]:
        values = {name: float(self.components.get(name, 0.0)) for name in LOGGED_COMPONENTS}
        values["correct"] = 1.0 if self.correct else 0.0  # the verdict's, not the reward formula's input
        values["fallback"] = 1.0 if self.fallback else 0.0
        return values


def outcome_from_result(result: EvalResult, job_id: str | None = None) -> Outcome:
    return Outcome(result.reward, dict(result.reward_components), result.status.value, None, job_id,
                   correct=result.correct)


def outcome_from_failure(reason: str, fallback_reward: float, job_id: str | None = None) -> Outcome:
    return Outcome(fallback_reward, {}, "fallback", reason, job_id)


def outcome_from_done(result: EvalResult, job_id: str | None, fallback_reward: float) -> Outcome:
    """A finished job's outcome: its verdict, or the fallback when the result is no verdict (the harness failed)."""
    if not result.judged:
        error = result.error
        why = f"{error.kind}: {error.message}" if error else "the harness failed"
        return outcome_from_failure(f"job {job_id}: no verdict ({result.status.value}, {why})"[:2000],
                                    fallback_reward, job_id)
    return outcome_from_result(result, job_id)


def outcome_from_job(job: Job, fallback_reward: float) -> Outcome:
    if job.status is JobStatus.done and job.result is not None:
        return outcome_from_done(job.result, job.id, fallback_reward)
    if not job.finished:
        return outcome_from_failure(f"job {job.id} still {job.status.value} at the deadline", fallback_reward, job.id)
    return outcome_from_failure(f"job {job.id} {job.status.value}: {job.error_message or 'no reason given'}",
                                fallback_reward, job.id)
