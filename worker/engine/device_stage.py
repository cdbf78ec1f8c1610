"""The device half of an evaluation: the problem's judge, one warm candidate runner, the verdict.

The judge (worker.engine.judge) comes from the reference cache, or is started and fills it: it holds the
input sets and the reference's outputs. The candidate runner comes from the warm pool
(worker.engine.sandbox_pool) and serves this candidate only. Tensors go judge -> supervisor -> candidate
(inputs) and candidate -> supervisor -> judge (outputs) over the runners' pipes; the judge
compares and reports, this process decides. One operation runs at a time, so timings of the two
sides never overlap.
"""

from __future__ import annotations

import copy
import logging
import time

from ..models import (
    Backend,
    CorrectnessReport,
    Device,
    EnvironmentInfo,
    EvalResult,
    EvalStatus,
    TimingReport,
)
from . import build, compile_baseline, timing_stats
from .attribution import Attribution, attribute
from .gpu_schedule import ALONE_STAGE
from .judge import Comparison, JudgeSession
from .kernel_names import own_kernel_names
from .launch import UserFailure
from .policy.registry import is_disabled
from .prepared_job import PreparedJob, StageCallback, notify
from .reference_cache import CachedReference, ProblemKey, ReferenceTiming, cache_for, new_seeds
from .sandbox.process import PAYLOAD_KEY
from .sandbox_pool import PoolEmpty, WarmRunner, pool_for
from .settings import EngineSettings
from .timing_protocol import Measurement, TimedRun, measure
from .verification import PROBE_RULE, SHAPE_RULE, Observations, runtime_rules

log = logging.getLogger(__name__)

# A candidate's run reply may exceed an honest one's size by this much before it is refused unread.
REPLY_SLACK_BYTES = 1 << 20


class _ReferenceTimingFailure(Exception):
    """The judge failed while timing the reference (told apart by origin, not by message)."""

    def __init__(self, failure: UserFailure) -> None:
        super().__init__(failure.message)
        self.failure = failure


class _JudgeFailure(Exception):
    """The judge failed outside the reference's own code (sending inputs, comparing)."""

    def __init__(self, failure: UserFailure, during: str) -> None:
        super().__init__(failure.message)
        self.failure = failure
        self.during = during


class DeviceStage:
    def __init__(self, prepared: PreparedJob, settings: EngineSettings, on_stage: StageCallback | None) -> None:
        self.prepared = prepared
        self.settings = settings
        self.on_stage = on_stage
        self.options = prepared.request.options
        self.builder = prepared.builder
        self.shape_check = not is_disabled(SHAPE_RULE, self.options.policy.disabled_rules)
        self.probe_check = not is_disabled(PROBE_RULE, self.options.policy.disabled_rules)
        self.profile = self.options.policy.profile or "partial"
        self.cache = cache_for(settings)
        self._begin_pass()

    def _begin_pass(self) -> None:
        # Learned along one pass over the device stages, used by the runtime rules.
        self._attribution: Attribution | None = None
        self._shape_failure: str | None = None
        self._judge_healthy = True
        self._out_of_memory: str | None = None  # the first device-memory failure of this pass

    def run(self) -> EvalResult:
        """One pass over the device stages; a second, alone on the device, when the first ran out of
        device memory while other jobs shared it (their memory, not the candidate's, may be the cause)."""
        before = copy.deepcopy(self.builder)
        result = self._run_once()
        if self._out_of_memory is None or not self._device_shared():
            return result
        first = self._out_of_memory
        self.builder = self.prepared.builder = before
        self._begin_pass()
        self.builder.extra["retried_alone"] = f"the first pass ran out of device memory beside other jobs: {first}"
        notify(self.on_stage, ALONE_STAGE)
        return self._run_once()

    def _device_shared(self) -> bool:
        schedule = self.settings.gpu_schedule
        return schedule is not None and schedule.sharers > 1

    def _note_memory(self, failure: UserFailure) -> None:
        if failure.kind == "out_of_memory" and self._out_of_memory is None:
            self._out_of_memory = failure.message[:500]

    def _run_once(self) -> EvalResult:
        notify(self.on_stage, "reference")
        with self.builder.stage("reference"):
            entry = self._reference()
        if isinstance(entry, EvalResult):
            return entry
        pool = pool_for(self.options.device, self.options.sandbox, self.settings)
        runner: WarmRunner | None = None
        try:
            notify(self.on_stage, "candidate")
            with self.builder.stage("candidate"):
                try:
                    runner = pool.take(self.options.limits.run_s)
                except PoolEmpty as exc:
                    return self.builder.fail(EvalStatus.sandbox_error, "no_sandbox",
                                             f"{exc}: the evaluator is overloaded, submit the job again later")
            result = self._judged(entry, runner)
        finally:
            self.cache.checkin(entry, healthy=self._judge_healthy)
            if runner is not None:
                # Stopped here, not in the background: its log is complete only once it has exited.
                runner.session.process.close(grace_s=2.0)
                self.builder.set_candidate_log(runner.session.logs())
                pool.retire(runner)
        result.candidate_log = self.builder.candidate_log
        return result

    def _judged(self, entry: CachedReference, runner: WarmRunner) -> EvalResult:
        try:
            return self._with_runner(entry, runner)
        except _JudgeFailure as wrapped:
            self._judge_healthy = False
            self._note_memory(wrapped.failure)
            log.warning("judge failed while %s: %s", wrapped.during, wrapped.failure.message)
            # No verdict either way (EvalResult.judged is false): a device-memory failure is run once more
            # alone on a shared device (see run), and says whether it already was.
            memory = wrapped.failure.kind == "out_of_memory"
            alone = " even alone on the device" if memory and "retried_alone" in self.builder.extra else ""
            return self.builder.fail(
                EvalStatus.sandbox_error, "judge_out_of_memory" if memory else "judge_failed",
                f"the judge (the process that holds the reference's outputs and compares) "
                f"{'ran out of device memory' + alone if memory else 'failed'} while {wrapped.during}: "
                f"{wrapped.failure.message}; this is not a verdict on the candidate: skip it or submit it again")

    # -- the judge ----------------------------------------------------------------------
    def _reference(self) -> CachedReference | EvalResult:
        opts = self.options
        request = self.prepared.request
        key = ProblemKey.of(request.reference, opts, self.settings, shape_check=self.shape_check)
        entry = self.cache.checkout(key)
        if entry is not None:
            self.builder.extra["reference_cache"] = "hit"
        else:
            seeds = new_seeds(opts.seed, opts.trials, self.settings.timing_pool_size)
            if not self.shape_check:
                seeds["shape_seeds"] = []
            judge = JudgeSession(request.reference, opts, self.settings)
            try:
                judge.start(seeds, time.monotonic() + opts.limits.run_s,
                            shape_max_bytes=self.settings.shape_trial_max_bytes)
            except UserFailure as failure:
                judge.close()
                self._note_memory(failure)
                return self.builder.reference_failure(failure)
            except BaseException:
                judge.close()
                raise
            entry = self.cache.add(CachedReference(key, judge, seeds))
            self.builder.extra["reference_cache"] = "miss" if entry.cached else "off"
        generated = entry.judge.generated
        assert generated is not None
        self._record_environment(generated.environment)
        if generated.truth_skipped:
            self.builder.extra["precision_skipped"] = generated.truth_skipped
        return entry

    def _judge_call(self, during: str, call):
        try:
            return call()
        except UserFailure as failure:
            raise _JudgeFailure(failure, during) from failure

    # -- the candidate ------------------------------------------------------------------
    def _with_runner(self, entry: CachedReference, runner: WarmRunner) -> EvalResult:
        opts = self.options
        judge = entry.judge
        generated = judge.generated
        assert generated is not None
        session = runner.session
        deadline = time.monotonic() + opts.limits.run_s
        judge_deadline = time.monotonic() + opts.limits.run_s
        with self.builder.stage("candidate"):
            if self.prepared.ext_dir is not None and runner.ext_dir is not None:
                build.private_copy(self.prepared.ext_dir, runner.ext_dir)
            inputs = self._judge_call("sending the inputs", lambda: judge.inputs(judge_deadline))
            session.process.max_payload_bytes = 2 * generated.reply_bytes + REPLY_SLACK_BYTES
            try:
                session.load(self.prepared.request.candidate, deadline, cpu_s=int(opts.limits.run_s * 4) + 60)
                done = session.request("run", deadline, forward=inputs, init_seed=entry.seeds["init_seed"],
                                       poison_bytes=2 * generated.output_bytes)
            except UserFailure as failure:
                self._note_memory(failure)
                return self.builder.candidate_failure(failure, during="run")
        self.builder.compiled = True
        tampered = list(done.get("tampered") or [])

        notify(self.on_stage, "compare")
        with self.builder.stage("compare"):
            if PAYLOAD_KEY not in done:
                return self.builder.fail(EvalStatus.incorrect, "invalid_output",
                                         "the candidate's outputs could not be read: its reply carried no tensors")
            comparison: Comparison = self._judge_call(
                "comparing", lambda: judge.compare(done, judge_deadline, probe_check=self.probe_check))
            if comparison.report is None:
                return self.builder.fail(EvalStatus.incorrect, "invalid_output", comparison.invalid or "")
            report = comparison.report
            if comparison.perturbed_trials:
                self.builder.extra["perturbed_trials"] = comparison.perturbed_trials
            shape = report.shape_trial
            if shape is not None and shape.ran and shape.passed is False:
                self._shape_failure = f"inputs {shape.problem_shapes} -> {shape.shapes}: {shape.message}"
        # Not after a failed doubled-batch trial: that may also have broken the CUDA context.
        if report.passed and not self._shape_failure:
            try:
                traced = session.request("trace", deadline)
            except UserFailure as failure:
                self._note_memory(failure)
                return self.builder.candidate_failure(failure, during="kernel trace")
            self._attribution = attribute(traced.get("events") or {},
                                          own_kernel_names(self.prepared.request.candidate), opts.device.value)
            if self._attribution is None:
                log.warning("the kernel trace recorded no GPU activity; attribution skipped (is CUPTI usable?)")
                self.builder.extra["attribution_skipped"] = "the profiler recorded no GPU activity"
            else:
                self.builder.coverage = self._attribution.report
                if self._attribution.truncated:
                    self.builder.extra["trace_truncated"] = True
            tampered += list(traced.get("tampered") or [])
        if tampered or not report.passed or self._shape_failure or not opts.timing:
            return self._finish(report, self._observations(report, tampered=tampered))

        # Still in the shared "compare" schedule: a compile never holds the GPU exclusively.
        with self.builder.stage("compile_baseline"):
            compile_missing = self._compile_baseline(entry)
        if not self._judge_healthy:
            self.builder.extra["timing_skipped"] = f"the judge is gone: {compile_missing}"
            return self._finish(report, self._observations(report, tampered=tampered))

        notify(self.on_stage, "timing")
        with self.builder.stage("timing"):
            try:
                timing, observations = self._timing(entry, runner, report, tampered, compile_missing)
            except _ReferenceTimingFailure as wrapped:
                # The reference already ran cleanly; dying or hanging now points at the candidate
                # (GPU work it left running), so only its own errors are held against the reference.
                self._judge_healthy = False
                failure = wrapped.failure
                if failure.kind in ("timeout", "crashed"):
                    return self.builder.candidate_failure(failure, during="timing")
                return self.builder.reference_failure(failure)
            except UserFailure as failure:
                return self.builder.candidate_failure(failure, during="timing")
        return self._finish(report, observations, timing)

    def _finish(self, report: CorrectnessReport, observations: Observations,
                timing: TimingReport | None = None) -> EvalResult:
        self.builder.add_rules(runtime_rules(observations, self.options.policy))
        notify(self.on_stage, "reward")
        return self.builder.finish(correctness=report, timing=timing)

    def _record_environment(self, env: dict) -> None:
        fields = ("gpu_name", "driver", "cuda", "torch", "triton", "python")
        current = self.builder.environment or EnvironmentInfo(device=self.options.device, sandbox=self.options.sandbox)
        self.builder.environment = current.model_copy(update={name: env.get(name) for name in fields})

    def _observations(self, report: CorrectnessReport | None = None, **fields) -> Observations:
        return Observations(
            device=self.options.device.value, attribution=self._attribution, profile=self.profile,
            own_kernels_required=self.options.backend != Backend.pytorch,
            precision=report.precision if report else None, inputs=report.inputs if report else None,
            probes=report.probes if report else [],
            shape_trial_failure=self._shape_failure, peak_bandwidth_gbps=self.settings.peak_bandwidth_gbps, **fields,
        )

    def _compile_baseline(self, entry: CachedReference) -> str | None:
        """Why this job has no torch.compile baseline, or None (compiled by this job or an earlier one)."""
        off = compile_baseline.off_reason(self.options, self.settings, self.cache, entry)
        if off is not None:
            return off
        step = compile_baseline.ensure_compiled(entry, self.cache, self.settings)
        self.builder.extra["compile_baseline"] = step.extra()
        if step.judge_failed:
            self._judge_healthy = False
        assert step.baseline is not None
        return None if step.baseline.available else step.baseline.reason or "not available"

    # -- timing (see timing_protocol) ---------------------------------------------------------
    def _reference_timing(self, entry: CachedReference, deadline: float) -> ReferenceTiming:
        if self.cache.timing_fresh(entry):
            assert entry.timing is not None
            return entry.timing
        try:
            measured = measure(lambda runs, final: entry.judge.time(runs, deadline), self.options)
        except UserFailure as failure:
            failure.message = f"reference timing: {failure.message}"
            raise _ReferenceTimingFailure(failure) from failure
        entry.timing = ReferenceTiming(measured.timed.device_ms, measured.runs, time.monotonic())
        return entry.timing

    def _timing(self, entry: CachedReference, runner: WarmRunner, report: CorrectnessReport,
                tampered: list[str], compile_missing: str | None) -> tuple[TimingReport, Observations]:
        opts = self.options
        deadline = time.monotonic() + opts.limits.timing_s
        reference = self._reference_timing(entry, deadline)
        session = runner.session

        def candidate_run(runs: int, final: bool) -> TimedRun:
            start = time.monotonic()
            reply = session.request("time", deadline, expect="timing", runs=runs, snapshot=final)
            return TimedRun.from_reply(reply, time.monotonic() - start)

        measured: Measurement = measure(candidate_run, opts)
        snapshot = session.request("timed_outputs", deadline)
        if PAYLOAD_KEY in snapshot:
            ok, message = self._judge_call("re-checking timed outputs",
                                           lambda: entry.judge.check_timed(snapshot, deadline))
        else:
            ok, message = False, "timed run: the candidate sent no outputs"
        tampered = [*tampered, *measured.tampered, *(snapshot.get("tampered") or [])]
        ref_stats = timing_stats.summarize(reference.device_ms)
        cand_stats = measured.stats
        speedup = ref_stats.median_ms / cand_stats.median_ms if cand_stats.median_ms > 0 else float("inf")
        method = "cuda_events+l2_flush+device_sync" if opts.device == Device.cuda else "host_clock"
        host = measured.timed.host_ms
        age = round(reference.age_s(), 3)
        timing = TimingReport(
            method=method, device=(self.builder.environment.gpu_name if self.builder.environment else None)
            or opts.device.value,
            reference=ref_stats, candidate=cand_stats, speedup=speedup,
            speedup_ci95=timing_stats.speedup_ci(reference.device_ms, measured.timed.device_ms),
            candidate_host_median_ms=timing_stats.summarize(host).median_ms if host else None,
            reference_age_s=age,
        )
        self._add_compile_timing(timing, entry, measured, deadline, compile_missing)
        observations = self._observations(
            report, tampered=tampered, timed_outputs_ok=ok, timed_outputs_message=message,
            candidate_device_median_ms=cand_stats.median_ms, candidate_device_std_ms=cand_stats.std_ms,
            speedup=speedup, min_bytes=entry.judge.generated.output_bytes if entry.judge.generated else 0,
        )
        self.builder.extra["timing_runs"] = {"reference": reference.runs, "candidate": measured.runs,
                                             "reference_age_s": age}
        return timing, observations

    def _add_compile_timing(self, timing: TimingReport, entry: CachedReference, measured: Measurement,
                            deadline: float, missing: str | None) -> None:
        """The compiled reference's timing and the speedup against it, taken after everything the
        verdict needs: a failure here loses the baseline (and the judge), never the verdict."""
        if missing is None:
            try:
                compiled = compile_baseline.compile_timing(entry, self.cache, self.options, deadline)
            except UserFailure as failure:
                self._judge_healthy = False
                missing = f"the compiled reference failed while timed ({failure.kind}): {failure.message[:500]}"
                if entry.key is not None:
                    self.cache.compile_failures[entry.key] = missing
                entry.compiled = None
        if missing is not None:
            timing.compile_baseline_missing = missing
            return
        stats = timing_stats.summarize(compiled.device_ms)
        cand_ms = measured.stats.median_ms
        timing.compile_reference = stats
        timing.compile_reference_median_ms = stats.median_ms
        timing.compile_speedup = stats.median_ms / cand_ms if cand_ms > 0 else float("inf")
        timing.compile_speedup_ci95 = timing_stats.speedup_ci(compiled.device_ms, measured.timed.device_ms)
        timing.compile_reference_age_s = round(compiled.age_s(), 3)
