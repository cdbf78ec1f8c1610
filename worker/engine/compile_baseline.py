"""The torch.compile baseline, seen from the supervisor: compiled once per cached judge, timed like the eager reference.

The judge compiles its reference (sandbox_runtime/compile_baseline.py) the first time a job on
that problem wants the baseline, and the entry keeps what it reported, so the compile cost is
paid once per problem and GPU, not per job. The compile runs in the job's shared device stage
before timing, and only for a candidate that passed correctness: never inside the exclusive
timing stage, where a 10-60 s compile would hold the GPU from every other job.

Its timing uses the same protocol and input pool as the eager reference, is kept on the entry
and is re-measured on the same schedule. It is taken last in the timing stage, after the
candidate's timed outputs were re-checked, so a compiled reference that breaks the judge costs
the baseline and never the candidate's verdict. Every way of not having a baseline is recorded
as a reason on the result (`timing.compile_baseline_missing`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..models import Device, EvalOptions
from .judge import CompileBaseline
from .launch import UserFailure
from .reference_cache import CachedReference, ReferenceCache, ReferenceTiming
from .settings import EngineSettings
from .timing_protocol import measure


def off_reason(options: EvalOptions, settings: EngineSettings, cache: ReferenceCache,
               entry: CachedReference) -> str | None:
    """Why this job gets no compile baseline, or None when it wants one."""
    if not settings.compile_baseline:
        return "switched off on this worker (KERNELJUDGE_COMPILE_BASELINE=0)"
    wanted = options.compile_baseline if options.compile_baseline is not None else options.device == Device.cuda
    if not wanted:
        return "off for this job (options.compile_baseline; off by default on cpu)"
    if entry.key is not None and entry.key in cache.compile_failures:
        return cache.compile_failures[entry.key]
    return None


@dataclass
class CompileStep:
    """This job's part in the baseline: what the entry holds and whether this job paid for it."""

    baseline: CompileBaseline | None
    compiled_now: bool
    judge_failed: bool = False

    def extra(self) -> dict:
        if self.baseline is None:
            return {}
        return {"compiled_for_this_job": self.compiled_now, "compile_s": self.baseline.compile_s,
                "judge_compiles": self.baseline.compiles, "available": self.baseline.available}


def ensure_compiled(entry: CachedReference, cache: ReferenceCache, settings: EngineSettings) -> CompileStep:
    """The entry's compiled reference, compiling it now if no job has yet."""
    if entry.compiled is not None:
        return CompileStep(entry.compiled, compiled_now=False)
    try:
        entry.compiled = entry.judge.compile(time.monotonic() + settings.compile_baseline_timeout_s)
    except UserFailure as failure:
        # The judge died or hung while compiling: its entry is dropped, and the problem is not
        # compiled again (a fresh judge would fail the same way at every job).
        reason = f"torch.compile of the reference broke the judge ({failure.kind}): {failure.message[:500]}"
        if entry.key is not None:
            cache.compile_failures[entry.key] = reason
        return CompileStep(CompileBaseline(False, reason, 0.0, 1), compiled_now=True, judge_failed=True)
    return CompileStep(entry.compiled, compiled_now=True)


def compile_timing(entry: CachedReference, cache: ReferenceCache, options: EvalOptions,
                   deadline: float) -> ReferenceTiming:
    """The compiled reference's timing: the entry's while fresh, else measured now (UserFailure: the
    judge failed while timing it)."""
    if cache.fresh(entry.compile_timing):
        assert entry.compile_timing is not None
        return entry.compile_timing
    measured = measure(lambda runs, warmup, _: entry.judge.time(runs, warmup, deadline, compiled=True), options)
    entry.compile_timing = ReferenceTiming(measured.timed.device_ms, measured.runs, time.monotonic())
    return entry.compile_timing
