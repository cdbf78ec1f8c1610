"""Collects what each stage learned and turns it into the public EvalResult."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from contract.requests import EvalOptions
from contract.results import (
    CorrectnessReport,
    CoverageReport,
    EnvironmentInfo,
    ErrorInfo,
    ErrorKind,
    EvalResult,
    ResultNotes,
    RuleHit,
    TimingReport,
)
from contract.statuses import NON_VERDICT_STATUSES, Backend, EvalStatus
from sandbox_side.runtime.failure_kind import FailureKind
from worker.engine.launch import UserFailure
from worker.engine.stage import Stage
from worker.engine.verdict import reward

MAX_CANDIDATE_LOG = 8000

# How a candidate failure kind maps to the verdict's status.
CANDIDATE_STATUS = {
    FailureKind.compile_error: EvalStatus.compile_error,
    FailureKind.runtime_error: EvalStatus.runtime_error,
    FailureKind.invalid_output: EvalStatus.incorrect,
    FailureKind.timeout: EvalStatus.timeout,
    FailureKind.crashed: EvalStatus.runtime_error,
    FailureKind.protocol: EvalStatus.runtime_error,
    FailureKind.out_of_memory: EvalStatus.runtime_error,
}
HINTS = {
    FailureKind.compile_error: "fix the compiler errors shown in log_excerpt",
    FailureKind.runtime_error: "the traceback is in log_excerpt",
    FailureKind.invalid_output: "forward must return a plain torch.Tensor or a tuple of them",
    FailureKind.timeout: "the candidate ran past its time limit and was killed with all its processes",
    FailureKind.crashed: "the process died without reporting (os._exit, a signal, or running out of memory)",
    FailureKind.protocol: "the candidate wrote to the evaluator's reply channel",
    FailureKind.out_of_memory: "it ran out of device memory with no other job's stage running beside it: allocate less",
}


def candidate_error_kind(kind: FailureKind) -> ErrorKind:
    """A candidate's failure as its result's `error.kind`: the same name."""
    return ErrorKind(kind.value)


def reference_error_kind(kind: FailureKind) -> ErrorKind:
    """The reference's failure as the result's `error.kind`: `reference_` and its name."""
    return ErrorKind(f"reference_{kind.value}")


class ResultBuilder:
    def __init__(self, options: EvalOptions) -> None:
        self.options = options
        self.stages: dict[str, float] = {}
        self.backend: Backend | None = None
        self.compiled = False
        self.rules: list[RuleHit] = []
        self.environment: EnvironmentInfo | None = None
        self.extra = ResultNotes()
        self.candidate_log: str | None = None
        self.error: ErrorInfo | None = None
        self.status: EvalStatus | None = None
        self.coverage: CoverageReport | None = None

    @contextmanager
    def stage(self, stage: Stage) -> Iterator[None]:
        """Time a stage: its seconds add up in the result's `stages`, under the stage's name."""
        name = Stage(stage).value
        start = time.monotonic()
        try:
            yield
        finally:
            self.stages[name] = round(self.stages.get(name, 0.0) + time.monotonic() - start, 4)

    def add_rules(self, hits: list[RuleHit]) -> None:
        self.rules.extend(hits)

    @property
    def rejected(self) -> bool:
        return any(hit.severity == "reject" for hit in self.rules)

    @property
    def flagged(self) -> bool:
        return any(hit.severity == "flag" for hit in self.rules)

    def set_candidate_log(self, text: str) -> None:
        if len(text) > MAX_CANDIDATE_LOG:
            half = MAX_CANDIDATE_LOG // 2 - 40
            text = f"{text[:half]}\n[... {len(text) - 2 * half} characters dropped ...]\n{text[-half:]}"
        self.candidate_log = text or None

    # -- failures ---------------------------------------------------------------------
    def fail(self, status: EvalStatus, kind: ErrorKind, message: str, *, line: int | None = None,
             log_excerpt: str | None = None) -> EvalResult:
        self.status = status
        self.error = ErrorInfo(kind=kind, message=message, line=line, log_excerpt=log_excerpt or None)
        return self.finish()

    def candidate_failure(self, failure: UserFailure, *, during: str) -> EvalResult:
        status = CANDIDATE_STATUS[failure.kind]
        if status == EvalStatus.compile_error:
            self.compiled = False
        elif during != "build" and self.backend != Backend.cuda:
            self.compiled = True  # Triton kernels compile at first launch
        message = f"candidate {during}: {failure.message}"
        if failure.kind == FailureKind.timeout:
            # The sandbox only knows the time left when it started waiting; the user set the stage's limit.
            name = "build_s" if during == "build" else "timing_s" if during == "timing" else "run_s"
            message += f"; the stage's limit is {getattr(self.options.limits, name):g}s (options.limits.{name})"
        hint = HINTS.get(failure.kind)
        if hint:
            message = f"{message} ({hint})"
        return self.fail(status, candidate_error_kind(failure.kind), message,
                         log_excerpt=failure.detail[-4000:] or None)

    def reference_failure(self, failure: UserFailure) -> EvalResult:
        return self.fail(EvalStatus.invalid_input, reference_error_kind(failure.kind),
                         f"the reference failed, so nothing can be judged: {failure.message}",
                         log_excerpt=failure.detail[-4000:] or None)

    # -- the verdict --------------------------------------------------------------------
    def finish(self, *, correctness: CorrectnessReport | None = None, timing: TimingReport | None = None
               ) -> EvalResult:
        correct = bool(correctness and correctness.passed and self.error is None)
        status = self.status
        if self.rejected:
            status = EvalStatus.rejected
        elif status is None:
            status = EvalStatus.ok if correct else EvalStatus.incorrect
        if status == EvalStatus.rejected and self.error is None:
            first = next(hit for hit in self.rules if hit.severity == "reject")
            self.error = ErrorInfo(kind=ErrorKind.rejected, message=f"{first.rule}: {first.message}", line=first.line,
                                   log_excerpt=first.evidence)
        speedup = timing.speedup if (timing and correct) else None
        compile_speedup = timing.compile_speedup if (timing and correct) else None
        rewarded, note = reward.reward_speedup(self.options.reward_baseline, speedup, compile_speedup,
                                               timing.compile_baseline_missing if timing else None)
        if note is not None:
            self.extra.reward_baseline = note
        comps = reward.components(compiled=self.compiled, correct=correct, speedup=rewarded,
                                  coverage=self.coverage.share if self.coverage else None,
                                  compile_speedup=compile_speedup)
        if status in NON_VERDICT_STATUSES:
            comps, value = {}, reward.NO_VERDICT_REWARD  # nothing was judged: no components, no score
        else:
            value = reward.compute_reward(
                self.options.reward_preset, comps, weights=self.options.reward_weights,
                rejected=status == EvalStatus.rejected, flagged=self.flagged,
                flagged_reward=self.options.policy.flagged_reward,
            )
        return EvalResult(
            status=status, compiled=self.compiled, correct=correct and status == EvalStatus.ok,
            flagged=self.flagged, speedup=speedup, reward=value, reward_preset=self.options.reward_preset,
            # What the job asked for, as it was applied (the note in extra.reward_baseline says when eager stood in).
            reward_baseline=self.options.reward_baseline,
            compile_baseline=self.options.wants_compile_baseline(),
            reward_components=comps, backend=self.backend, error=self.error, correctness=correctness,
            timing=timing, rules=self.rules, coverage=self.coverage, stages=self.stages, environment=self.environment,
            candidate_log=self.candidate_log, extra=self.extra,
        )
