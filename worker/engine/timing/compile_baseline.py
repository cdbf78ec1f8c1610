"""The torch.compile baseline, seen from a job: its problem's persisted record, attached when there is one.

The baseline is measured once per problem, device model and torch/Triton version, in the background
(worker/engine/timing/baseline_worker.py), never on a job's path, and kept in the baseline book (the job
store for the service). A job that finds no record asks for one and goes on without it
(`extra.compile_baseline.state` = "pending"); only a job whose reward uses the compile baseline
(`options.reward_baseline == "compile"`) waits for it, holding nothing on the device meanwhile
("waited"), and so does every job of the engine alone (no device schedule to keep the background
measurement apart from the next job's timing). A stale record (older than `baseline_retime_s`) is still attached and measured again
in the background. The job's speedup against torch.compile is its own eager speedup scaled by the
record's eager/compiled ratio (baselines.compile_speedup). Every way of not having a baseline is
recorded as a reason on the result (`timing.compile_baseline_missing`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from contract.requests import EvalOptions
from contract.results import TimingReport, TimingStats
from worker.engine.engine_settings import EngineSettings
from worker.engine.timing import baselines
from worker.engine.timing.baseline_worker import BaselineTask, worker_for
from worker.engine.timing.baselines import COMPILE_BASELINE, BaselineKey, CompileBaselineRecord

PENDING = "pending: the compile baseline of this problem is being measured in the background; later jobs get it"


def off_reason(options: EvalOptions, settings: EngineSettings) -> str | None:
    """Why this job gets no compile baseline, or None when it wants one."""
    if not settings.compile_baseline:
        return "switched off on this worker (KERNELJUDGE_COMPILE_BASELINE=0)"
    wanted = options.wants_compile_baseline()
    if not wanted:
        return "off for this job (options.compile_baseline; off by default on cpu)"
    return None


@dataclass
class Attachment:
    """What a job got: the record (if any), how (attached, waited, pending, failed) and why not."""

    record: CompileBaselineRecord | None
    state: str
    missing: str | None

    def extra(self) -> dict:
        info: dict = {"state": self.state}
        if self.record is not None:
            info.update(available=self.record.available, age_s=round(self.record.age_s(), 1),
                        compile_s=self.record.compile_s, measured_on=self.record.measured_on)
        return info


def request(key: BaselineKey, reference: str, options: EvalOptions, settings: EngineSettings) -> None:
    """Ask for the problem's baseline in the background when it is missing or stale (not when wanted off)."""
    if off_reason(options, settings) is not None:
        return
    record = settings.baseline_book().get(key, COMPILE_BASELINE)
    worker = worker_for(settings)
    if record is None and worker.failure(key) is not None:
        return  # its reference failed in the baseline's judge on this worker: not again at every job
    if not baselines.fresh(record, settings.baseline_retime_s):
        worker.request(BaselineTask(key, reference, options))


def attach(key: BaselineKey, reference: str, options: EvalOptions, settings: EngineSettings, *, wait: bool,
           release_device: Callable[[], None]) -> Attachment:
    """The job's compile baseline (see the module docstring). `release_device` is called before waiting."""
    request(key, reference, options, settings)
    worker = worker_for(settings)
    record = settings.baseline_book().get(key, COMPILE_BASELINE)
    state = "attached"
    if record is None:
        failure = worker.failure(key)
        if failure is not None:
            return Attachment(None, "failed", failure)
        if not wait:
            return Attachment(None, "pending", PENDING)
        release_device()
        record = worker.wait(key, settings.compile_baseline_timeout_s)
        if record is None:
            return Attachment(None, "failed", worker.failure(key) or "the compile baseline was not measured within "
                                                                     f"{settings.compile_baseline_timeout_s:.0f}s")
        state = "waited"
    assert isinstance(record, CompileBaselineRecord)
    return Attachment(record, state, None if record.available else record.reason or "not available")


def apply(timing: TimingReport, record: CompileBaselineRecord) -> None:
    """The job's timing against torch.compile, from its own eager speedup and the record."""
    timing.compile_reference = TimingStats.model_validate(record.compiled_stats) if record.compiled_stats else None
    timing.compile_reference_median_ms = record.compiled_median_ms
    timing.compile_speedup = baselines.compile_speedup(timing.speedup, record)
    timing.compile_speedup_ci95 = baselines.compile_speedup_interval(timing.speedup_ci95, record)
    timing.compile_reference_age_s = round(record.age_s(), 3)
