"""The device half of an evaluation: the problem's judge, one warm candidate runner, the verdict.

The judge (worker.engine.reference.judge) comes from the reference cache, or is started and fills it: it holds the
input sets and the reference's outputs. The candidate runner comes from the warm pool
(worker.engine.sandbox_pool) and serves this candidate only. Tensors go judge -> supervisor -> candidate
(inputs) and candidate -> supervisor -> judge (outputs) over the runners' pipes; the judge
compares and reports, this process decides. One operation runs at a time, so timings of the two
sides never overlap.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import itertools
import logging
import random
import socket
import time
from collections.abc import Iterator

from contract.results import (
    CorrectnessReport,
    EnvironmentInfo,
    ErrorKind,
    EvalResult,
    TimingReport,
    TimingRunsNote,
    TimingVariantsNote,
    TrialsSizedNote,
)
from contract.statuses import Backend, Device, EvalStatus
from sandbox_side.runtime.failure_kind import FailureKind
from sandbox_side.runtime.messages import (
    ApplyTimingVariants,
    Run,
    RunDone,
    Time,
    TimedOutputs,
    TimedOutputsDone,
    Timing,
    Trace,
    Traced,
    TritonCache,
    TritonCacheDone,
    VariantsApplied,
)
from worker.engine.build import builder as build
from worker.engine.build import triton_cache
from worker.engine.cpu_plan import timing_cores
from worker.engine.engine_settings import EngineSettings
from worker.engine.launch import RunnerSession, UserFailure, reported_parts
from worker.engine.policy.registry import is_disabled
from worker.engine.prepared_job import PreparedJob, StageCallback, notify
from worker.engine.process_tree import tree_cpu_s
from worker.engine.reference import judge_start
from worker.engine.reference.generate_hold import GenerateHold
from worker.engine.reference.judge import Comparison, JudgeStartFailure, TimedCheck
from worker.engine.reference.reference_cache import CachedReference, ProblemKey, cache_for
from worker.engine.sandbox_pool import PoolEmpty, WarmRunner, pool_for
from worker.engine.stage import Stage
from worker.engine.timing import baselines, clock_check, compile_baseline
from worker.engine.timing.baselines import (
    REFERENCE_TIMING,
    BaselineKey,
    CompileBaselineRecord,
    ReferenceTimingRecord,
)
from worker.engine.timing.timing_protocol import CallOrder, PairedWindow, TimedBlock, measure_paired
from worker.engine.verdict import physics
from worker.engine.verdict.attribution import Attribution, attribute
from worker.engine.verdict.kernel_names import own_kernel_names
from worker.engine.verdict.result_builder import ResultBuilder
from worker.engine.verdict.verification import (
    PROBE_RULE,
    SHAPE_RULE,
    TAMPER_RULE,
    Observations,
    runtime_rules,
    trace_disagrees,
)

log = logging.getLogger(__name__)

# A candidate's run reply may exceed an honest one's size by this much before it is refused unread.
REPLY_SLACK_BYTES = 1 << 20
# A runner's compiled Triton kernels, packed in its memory, come back within this.
TRITON_CACHE_REPLY_S = 30.0


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


class _JudgeLost(Exception):
    """The judge this job shares could not serve its exchange: another job's exchange broke it or held it too long,
    or its process is gone. Nothing of this job's was judged wrongly; its device stages run again with another."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


class _JobEnds(Exception):
    """A device stage ended the job; `result` is its EvalResult."""

    def __init__(self, result: EvalResult) -> None:
        super().__init__(result.status.value)
        self.result = result


@dataclasses.dataclass
class CandidateRun:
    """Stage `candidate`'s output: the candidate's reply with its outputs, what it tampered with, and the
    deadlines of the run's later calls: the candidate's (the kernel trace) and the judge's (the comparison)."""

    done: RunDone
    tampered: list[str]
    deadline: float
    judge_deadline: float


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
        self._physics_reads: physics.ProblemReads | None = None  # what the judge measured for KJ-R06
        self._shape_failure: str | None = None
        self._shape_precision: str | None = None  # a precision-class difference on the doubled batch (KJ-R12)
        self._judge_healthy = True
        self._judge_lost: str | None = None  # why the shared judge could not serve this pass (_JudgeLost)
        self._out_of_memory: str | None = None  # the first device-memory failure of this pass

    def run(self) -> EvalResult:
        """One pass over the device stages; another with another judge when the shared one could not serve this
        job (_JudgeLost, once); and one alone on the device when a pass ran out of device memory while other
        jobs shared it (their memory, not the candidate's, may be the cause)."""
        before = copy.deepcopy(self.builder)
        result = self._run_once()
        if self._judge_lost is not None:
            lost = self._judge_lost
            self._new_pass(before)
            self.builder.extra.judge_lost = (f"the judge this job shared with other jobs of its problem could not "
                                             f"serve it ({lost}): its device stages ran again with another judge")
            result = self._run_once()
        if self._out_of_memory is None or not self._device_shared():
            return result
        first, lost_note = self._out_of_memory, self.builder.extra.judge_lost
        self._new_pass(before)
        self.builder.extra.judge_lost = lost_note
        self.builder.extra.retried_alone = f"the first pass ran out of device memory beside other jobs: {first}"
        notify(self.on_stage, Stage.alone)
        return self._run_once()

    def _new_pass(self, before: ResultBuilder) -> None:
        """The builder as it was before the device stages, for a pass that starts over."""
        self.builder = self.prepared.builder = copy.deepcopy(before)
        self._begin_pass()

    def _device_shared(self) -> bool:
        schedule = self.settings.gpu_schedule
        return schedule is not None and schedule.sharers > 1

    def _note_memory(self, failure: UserFailure) -> None:
        if failure.kind == FailureKind.out_of_memory and self._out_of_memory is None:
            self._out_of_memory = failure.message[:500]

    def _run_once(self) -> EvalResult:
        notify(self.on_stage, Stage.reference)
        with self.builder.stage(Stage.reference):
            entry = self._reference()
        if isinstance(entry, EvalResult):
            return entry
        pool = pool_for(self.options.device, self.options.sandbox, self.settings)
        runner: WarmRunner | None = None
        cpu_s: float | None = None
        try:
            # The wait for a warm runner holds nothing on the device: a runner's start is the device's neighbour,
            # paused while a job holds it alone, and a job run again alone waited for one that way until the
            # pool gave up (120 s, "no warm sandbox").
            notify(self.on_stage, Stage.runner_take)
            with self.builder.stage(Stage.runner_take):
                try:
                    runner = pool.take(self.options.limits.run_s)
                    self.builder.extra.runner_start_cpu_s = dict(runner.session.start_cpu_s) or None
                except PoolEmpty as exc:
                    return self.builder.fail(EvalStatus.sandbox_error, ErrorKind.no_sandbox,
                                             f"{exc}: the evaluator is overloaded, submit the job again later")
                except UserFailure as failure:  # a warm runner failed to start: nothing of the candidate ran
                    return self.builder.fail(EvalStatus.sandbox_error, ErrorKind.no_sandbox,
                                             f"a candidate sandbox did not start ({failure.kind}: {failure.message}); "
                                             "this is not a verdict, submit the job again")
            notify(self.on_stage, Stage.candidate)
            result = self._judged(entry, runner)
        finally:
            self.cache.checkin(entry, healthy=self._judge_healthy)
            if runner is not None:
                with self.builder.stage(Stage.cleanup):
                    self._publish_triton_cache(runner)
                    cpu_s = tree_cpu_s(runner.session.process.pid)  # what this job's candidate cost the host
                    # Stopped here, not in the background: its log is complete only once it has exited.
                    runner.session.process.close(grace_s=2.0)
                    self.builder.set_candidate_log(runner.session.logs())
                    pool.retire(runner)
        result.candidate_log = self.builder.candidate_log
        result.extra.candidate_cpu_s = round(cpu_s, 2) if cpu_s is not None else None
        result.stages = dict(self.builder.stages)  # with the cleanup, timed after the result was made
        return result

    def _publish_triton_cache(self, runner: WarmRunner) -> None:
        """What a Triton candidate's runner compiled, kept for later runs of the same source (triton_cache)."""
        folder = self.prepared.ext_dir if self.prepared.backend == Backend.triton else None
        if not self.builder.compiled or not runner.alive or not triton_cache.wanted(folder):
            return
        runner.session.process.max_payload_bytes = max(runner.session.process.max_payload_bytes,
                                                       triton_cache.MAX_PUBLISH_BYTES)
        try:
            reply = runner.session.request(TritonCache(max_bytes=triton_cache.MAX_PUBLISH_BYTES), TritonCacheDone,
                                           time.monotonic() + TRITON_CACHE_REPLY_S)
        except UserFailure as failure:
            log.info("no Triton cache from the runner: %s", failure.message)
            return
        self.builder.extra.triton_cache = "published" if triton_cache.publish(
            self.settings.triton_cache, folder, reply) else "not kept"

    def _judged(self, entry: CachedReference, runner: WarmRunner) -> EvalResult:
        try:
            return self._with_runner(entry, runner)
        except _JudgeLost as lost:
            self._judge_healthy = False
            self._judge_lost = lost.why
            again = " again" if self.builder.extra.judge_lost is not None else ""
            return self.builder.fail(
                EvalStatus.sandbox_error, ErrorKind.judge_failed,
                f"the judge this job shared with other jobs of its problem could not serve it{again} ({lost.why}); "
                "this is not a verdict on the candidate: submit it again")
        except _JudgeFailure as wrapped:
            self._judge_healthy = False
            self._note_memory(wrapped.failure)
            log.warning("judge failed while %s: %s", wrapped.during, wrapped.failure.message)
            # No verdict either way (EvalResult.judged is false): a device-memory failure is run once more
            # alone on a shared device (see run), and says whether it already was.
            memory = wrapped.failure.kind == FailureKind.out_of_memory
            alone = " even alone on the device" if memory and self.builder.extra.retried_alone is not None else ""
            return self.builder.fail(
                EvalStatus.sandbox_error, ErrorKind.judge_out_of_memory if memory else ErrorKind.judge_failed,
                f"the judge (the process that holds the reference's outputs and compares) "
                f"{'ran out of device memory' + alone if memory else 'failed'} while {wrapped.during}: "
                f"{wrapped.failure.message}; this is not a verdict on the candidate: skip it or submit it again")

    # -- the judge ----------------------------------------------------------------------
    def _reference(self) -> CachedReference | EvalResult:
        opts = self.options
        request = self.prepared.request
        self._compile_record: CompileBaselineRecord | None = None
        key = judge_start.key_of(request, self.settings)
        entry, announced = self._shared_judge(key)
        if entry is not None:
            self.builder.extra.reference_cache = "hit"
            if entry.prestarted and self.cache.first_to_report(entry):
                self.builder.extra.reference_judge = "started ahead, while the candidate was prepared"
                self.builder.extra.judge_start = entry.start
        else:
            try:
                started = self._start_judge(key)
            finally:
                if announced:  # the jobs that came meanwhile look again, and share it
                    self.cache.end_warming(key)
            if isinstance(started, EvalResult):
                return started
            entry = started
        generated = entry.judge.generated
        assert generated is not None
        self._record_environment(generated.environment)
        self._physics_reads = physics.problem_reads(generated.physics, opts.device.value,
                                                    generated.environment.get("gpu_name"), self.settings)
        if generated.truth_skipped:
            self.builder.extra.precision_skipped = generated.truth_skipped
        if generated.trials_sized:
            sized = generated.trials_sized
            self.builder.extra.trials_sized = TrialsSizedNote(
                **sized, reason=f"{sized['kept']} of {sized['asked']} trials: one trial's inputs and outputs take "
                                f"{sized['set_bytes']} bytes, the budget is {sized['budget']} "
                                "(KERNELJUDGE_TRIAL_BYTES_BUDGET, or what a candidate's sandbox may write in one "
                                "reply if less)")
        # The problem's persisted baselines: asked for now, measured in the background while this job runs.
        self._baseline_key = BaselineKey.of(request.reference, opts.device.value, generated.environment.get("gpu_name"))
        compile_baseline.request(self._baseline_key, request.reference, opts, self.settings)
        return entry

    def _shared_judge(self, key: ProblemKey) -> tuple[CachedReference | None, bool]:
        """A judge of the problem for this job to share, waiting (holding nothing on the device) for one being
        started, by the warmer or by another job, and for room on one that as many jobs hold as may share it;
        else (None, announced): this job starts one, announced to the jobs that come meanwhile (they wait for it
        and share it) unless its problem's judges are only full (then a private one, unannounced)."""
        entry = self.cache.checkout(key)
        if entry is not None:
            return entry, False
        # Waits for a judge hold nothing on the device (its start needs the device to generate).
        notify(self.on_stage, Stage.reference_wait)
        began = time.monotonic()
        limit = began + self.options.limits.run_s
        being_started = False
        while True:
            warming = self.cache.warming(key)
            if warming is not None:  # being started (the warmer, or another job): rather than start a second
                being_started = True
                warming.wait(max(0.0, limit - time.monotonic()))
            waited = time.monotonic()
            # Its judges all full: waiting for room costs less than starting another.
            entry = self.cache.checkout(key, wait_limit_s=max(0.0, limit - time.monotonic()))
            if entry is not None:
                notify(self.on_stage, Stage.reference)
                spent = time.monotonic() - began
                if spent >= 0.01:
                    why = "being started" if being_started else "held by as many jobs as may share it"
                    self.builder.extra.reference_judge = (f"waited {spent:.2f} s for its problem's judge, {why} "
                                                          "(starting another would have taken longer)")
                return entry, False
            announced = self.cache.begin_warming(key)
            if announced or self.cache.warming(key) is None or time.monotonic() >= limit:
                break
            # Another job announced a start between this job's look and its own: wait for that one.
        self.builder.extra.reference_judge = "started its own judge: " + self._why_own_judge(key,
                                                                                           time.monotonic() - waited)
        return None, announced

    def _start_judge(self, key: ProblemKey) -> CachedReference | EvalResult:
        """This job's own judge, started and kept for the jobs after it; or the job's result when it did not
        start (a harness failure) or the reference failed."""
        opts, request = self.options, self.prepared.request
        # The judge's process start, CUDA set-up and the reference's import are host work: they hold
        # no device lock (holding it shared for those 5-6 s kept every other job's timing waiting);
        # only generating the reference's outputs does.
        try:
            entry = judge_start.start_entry(request, self.settings, key, time.monotonic() + opts.limits.run_s,
                                            self._generate_hold())
        except JudgeStartFailure as failed:
            # Nothing of the reference ran (on two H100s a lane's judges could not see their GPU, and
            # every job of that lane was called the reference's fault): the harness's failure.
            return self.builder.fail(
                EvalStatus.sandbox_error, ErrorKind.judge_start_failed,
                f"the judge's runtime did not start ({failed.failure.kind}: {failed.failure.message}); nothing "
                "of the reference or the candidate ran: this is not a verdict, submit it again",
                log_excerpt=failed.failure.detail[-4000:] or None)
        except UserFailure as failure:
            self._note_memory(failure)
            return self.builder.reference_failure(failure)
        entry = self.cache.add(entry)
        self.builder.extra.reference_cache = "off" if self.settings.reference_cache_entries <= 0 else "miss"
        self.builder.extra.judge_start = entry.start
        return entry

    def _generate_hold(self) -> GenerateHold:
        """The job's own lease holds the device for its judge's generation: shared in `reference`, nothing in
        `reference_wait` (host-only steps, and between steps while a timing goes first)."""
        return GenerateHold(acquire=lambda: notify(self.on_stage, Stage.reference),
                            release=lambda: notify(self.on_stage, Stage.reference_wait),
                            schedule=self.settings.gpu_schedule)

    @contextlib.contextmanager
    def _exchange(self, entry: CachedReference, during: str, deadline: float) -> Iterator[None]:
        """One exchange with the judge, which other jobs of the problem share (their exchanges wait): _JudgeLost
        when it cannot serve; a failure in it breaks the judge for every job holding it."""
        with entry.exchange(deadline) as lost:
            if lost is not None:
                raise _JudgeLost(lost)
            try:
                yield
            except UserFailure as failure:
                entry.broken = f"it failed while {during} for another job ({failure.kind})"
                raise

    def _judge_call(self, entry: CachedReference, during: str, call, deadline: float):
        try:
            with self._exchange(entry, during, deadline):
                return call()
        except UserFailure as failure:
            raise _JudgeFailure(failure, during) from failure

    # -- the candidate ------------------------------------------------------------------
    def _with_runner(self, entry: CachedReference, runner: WarmRunner) -> EvalResult:
        """The device stages after the reference, in order. Each takes and returns typed values; one that ends
        the job (a failure, a rejection) raises _JobEnds with the job's result."""
        try:
            run = self._run_candidate(entry, runner)
            report = self._compare(entry, run)
            tampered = [*run.tampered, *self._trace(runner, run, report)]
            if not self._to_be_timed(report, tampered):
                return self._finish(report, self._observations(report, tampered=tampered))
            compile_missing = self._compile_stage(entry)
            if not self._judge_healthy:
                self.builder.extra.timing_skipped = f"the judge is gone: {compile_missing}"
                return self._finish(report, self._observations(report, tampered=tampered))
            timing, observations = self._timing_stage(entry, runner, report, tampered, compile_missing)
            return self._finish(report, observations, timing)
        except _JobEnds as ended:
            return ended.result

    def _run_candidate(self, entry: CachedReference, runner: WarmRunner) -> CandidateRun:
        """Stage `candidate`: the judge's inputs to the candidate's runner, its module loaded, one call run."""
        opts = self.options
        judge = entry.judge
        generated = judge.generated
        assert generated is not None
        session = runner.session
        deadline = time.monotonic() + opts.limits.run_s
        judge_deadline = time.monotonic() + opts.limits.run_s
        # Timed in three parts (each a stage of its own in the result): the judge's inputs, the module's load
        # in the runner, and the call itself.
        with self.builder.stage(Stage.inputs):
            inputs = self._judge_call(entry, "sending the inputs", lambda: judge.inputs(judge_deadline),
                                      judge_deadline)
        session.process.max_payload_bytes = 2 * generated.reply_bytes + REPLY_SLACK_BYTES
        try:
            with self.builder.stage(Stage.load):
                if self.prepared.ext_dir is not None and runner.ext_dir is not None:
                    build.private_copy(self.prepared.ext_dir, runner.ext_dir)
                session.load(self.prepared.request.candidate, deadline, cpu_s=int(opts.limits.run_s * 4) + 60)
            with self.builder.stage(Stage.candidate):
                done = session.request(Run(init_seed=entry.seeds["init_seed"], poison_bytes=2 * generated.output_bytes,
                                           payload=inputs.payload), RunDone, deadline)
            self.builder.extra.candidate_run_s = reported_parts(done.parts_s) or None
        except UserFailure as failure:
            self._note_memory(failure)
            raise _JobEnds(self.builder.candidate_failure(failure, during="run")) from failure
        finally:
            inputs.release()  # the judge keeps its own
        self.builder.compiled = True
        return CandidateRun(done=done, tampered=list(done.tampered), deadline=deadline, judge_deadline=judge_deadline)

    def _compare(self, entry: CachedReference, run: CandidateRun) -> CorrectnessReport:
        """Stage `compare`: the candidate's outputs judged by the judge, on its device."""
        notify(self.on_stage, Stage.compare)
        with self.builder.stage(Stage.compare):
            if run.done.payload is None:
                raise _JobEnds(self.builder.fail(EvalStatus.incorrect, ErrorKind.invalid_output,
                                                 "the candidate's outputs could not be read: its reply carried no "
                                                 "tensors"))
            try:
                comparison: Comparison = self._judge_call(
                    entry, "comparing",
                    lambda: entry.judge.compare(run.done, run.judge_deadline, probe_check=self.probe_check),
                    run.judge_deadline)
            finally:
                run.done.release()  # the outputs' memory goes back before the timing
            if comparison.report is None:
                raise _JobEnds(self.builder.fail(EvalStatus.incorrect, ErrorKind.invalid_output,
                                                 comparison.invalid or ""))
            report = comparison.report
            if comparison.perturbed_trials:
                self.builder.extra.perturbed_trials = comparison.perturbed_trials
            shape = report.shape_trial
            if shape is not None and shape.ran and shape.passed is False:
                seen = f"inputs {shape.problem_shapes} -> {shape.shapes}: {shape.message}"
                if shape.difference == "precision":  # finite, near the truth: no broken context, judged as precision
                    self._shape_precision = seen
                else:
                    self._shape_failure = seen
        return report

    def _trace(self, runner: WarmRunner, run: CandidateRun, report: CorrectnessReport) -> list[str]:
        """One traced call of a candidate whose outputs passed: which kernels ran (attribution). Returns what
        the traced call tampered with."""
        # Not after a failed doubled-batch trial: that may also have broken the CUDA context.
        if not report.passed or self._shape_failure:
            return []
        with self.builder.stage(Stage.trace):
            self._attribution, tampered = self._traced_call(runner, run.deadline)
        if self._attribution is None:
            log.warning("the kernel trace recorded no GPU activity; attribution skipped (is CUPTI usable?)")
            self.builder.extra.attribution_skipped = "the profiler recorded no GPU activity"
        else:
            self.builder.coverage = self._attribution.report
            if self._attribution.truncated:
                self.builder.extra.trace_truncated = True
        return tampered

    def _why_own_judge(self, key: ProblemKey, waited_s: float) -> str:
        """Why a job starts a judge of its own (a batch's extra judges are its host's largest cost)."""
        if self.settings.reference_cache_entries <= 0:
            return "the judge cache is off (KERNELJUDGE_REFERENCE_CACHE_ENTRIES=0)"
        live = len(self.cache.entries_of(key))
        if live:
            return (f"its problem's {live} judge(s) on this GPU stayed shared by as many other jobs as may share one "
                    f"({self.cache.jobs_per_judge}) for {waited_s:.2f} s, as long as starting one costs")
        return "none of its problem was cached on this GPU (its first job here, or the cache let it go)"

    def _traced_call(self, runner: WarmRunner, deadline: float) -> tuple[Attribution | None, list[str]]:
        """One call of the candidate under the kernel trace: its attribution (None: no GPU activity recorded)
        and what the call tampered with."""
        try:
            traced = runner.session.request(Trace(), Traced, deadline)
        except UserFailure as failure:
            self._note_memory(failure)
            raise _JobEnds(self.builder.candidate_failure(failure, during="kernel trace")) from failure
        return (attribute(traced.events, own_kernel_names(self.prepared.request.candidate), self.options.device.value),
                list(traced.tampered))

    def _trace_alone(self, runner: WarmRunner, deadline: float) -> None:
        """The call traced again while the job holds the device alone (inside its timing window), for KJ-R04:
        the first trace ran beside other jobs' device work, whose contexts' time slices stretch a traced
        kernel (an honest 0.63 ms GEMM read 2.86 ms busy on an H100). A forger's kernels take their time
        on a quiet device too."""
        assert self._attribution is not None
        alone, _ = self._traced_call(runner, deadline)  # tampering shows in the timing check's block that follows
        if alone is None:
            return
        self.builder.extra.trace_busy_beside_others_ms = self._attribution.forward_gpu_ms
        self._attribution = dataclasses.replace(self._attribution, forward_gpu_ms=alone.forward_gpu_ms,
                                                traced_alone=True)

    def _to_be_timed(self, report: CorrectnessReport, tampered: list[str]) -> bool:
        # Tampering rejects (KJ-R01) unless the job switched that rule off: then timing runs, and its own
        # evidence (the supervisor's clock) decides.
        rejected_for_tampering = bool(tampered) and not is_disabled(TAMPER_RULE, self.options.policy.disabled_rules)
        return not rejected_for_tampering and report.passed and not self._shape_failure and self.options.timing

    def _compile_stage(self, entry: CachedReference) -> str | None:
        """Stage `compile_baseline`: why this job has no torch.compile baseline, or None."""
        # Still in the shared "compare" schedule: a compile never holds the GPU exclusively.
        with self.builder.stage(Stage.compile_baseline):
            return self._compile_baseline(entry)

    def _timing_stage(self, entry: CachedReference, runner: WarmRunner, report: CorrectnessReport,
                      tampered: list[str], compile_missing: str | None) -> tuple[TimingReport, Observations]:
        """Stages `timing_setup`, `timing` and `timing_check` (see _timing); a failure in any of them is the
        timing's."""
        try:
            return self._timing(entry, runner, report, tampered, compile_missing)
        except _ReferenceTimingFailure as wrapped:
            # The reference already ran cleanly; dying or hanging now points at the candidate
            # (GPU work it left running), so only its own errors are held against the reference.
            self._judge_healthy = False
            reference_failure = wrapped.failure
            if reference_failure.kind in (FailureKind.timeout, FailureKind.crashed):
                raise _JobEnds(self.builder.candidate_failure(reference_failure, during="timing")) from wrapped
            raise _JobEnds(self.builder.reference_failure(reference_failure)) from wrapped
        except UserFailure as failure:
            raise _JobEnds(self.builder.candidate_failure(failure, during="timing")) from failure

    def _finish(self, report: CorrectnessReport, observations: Observations,
                timing: TimingReport | None = None) -> EvalResult:
        self.builder.add_rules(runtime_rules(observations, self.options.policy))
        if observations.physics is not None:
            self.builder.extra.physics = observations.physics.report()
        notify(self.on_stage, Stage.reward)
        return self.builder.finish(correctness=report, timing=timing)

    def _record_environment(self, env: dict) -> None:
        fields = ("gpu_name", "driver", "cuda", "torch", "triton", "python", "cuda_sync_wait")
        current = self.builder.environment or EnvironmentInfo(device=self.options.device, sandbox=self.options.sandbox)
        gpu_index = self.settings.gpu_index if self.options.device.value == "cuda" else None
        self.builder.environment = current.model_copy(update={**{name: env.get(name) for name in fields},
                                                              "gpu_index": gpu_index})

    def _observations(self, report: CorrectnessReport | None = None, **fields) -> Observations:
        # The physics rule judges a candidate whose outputs passed (the kernel trace ran); its times: the
        # trace's and, when timed, its median.
        assessed = physics.assess(self._physics_reads, self._attribution, fields.get("candidate_device_median_ms"),
                                  self.options.device.value) if report is not None and report.passed else None
        return Observations(
            device=self.options.device.value, attribution=self._attribution, profile=self.profile,
            own_kernels_required=self.options.backend != Backend.pytorch,
            precision=report.precision if report else None, inputs=report.inputs if report else None,
            probes=report.probes if report else [],
            shape_trial_failure=self._shape_failure, shape_trial_precision=self._shape_precision, physics=assessed,
            **fields,
        )

    def _compile_baseline(self, entry: CachedReference) -> str | None:
        """Why this job has no torch.compile baseline, or None (its problem's persisted record is attached).
        Only a job whose reward uses it waits for it; the others say it is pending (compile_baseline). The
        engine alone (no device schedule: `kerneljudge eval`, a library call) always waits: nothing would
        keep the background measurement from overlapping the next job's timing."""
        del entry  # the baseline is measured by a judge of its own (baseline_worker), not the job's
        off = compile_baseline.off_reason(self.options, self.settings)
        if off is not None:
            return off
        wait = self.options.reward_baseline == "compile" or self.settings.gpu_schedule is None
        attached = compile_baseline.attach(
            self._baseline_key, self.prepared.request.reference, self.options, self.settings, wait=wait,
            release_device=lambda: notify(self.on_stage, Stage.compile_baseline_wait))
        self.builder.extra.compile_baseline = attached.extra()
        self._compile_record = attached.record if attached.missing is None else None
        return attached.missing

    # -- timing (see timing_protocol and clock_check) ----------------------------------------
    def _timing_variants(self, entry: CachedReference, session: RunnerSession, deadline: float) -> list[int]:
        """The timed inputs' variants (per input set, how many calls it has, itself included): made by the
        judge with the reference's outputs and handed to the candidate's runner."""
        judge = entry.judge
        variants = self._judge_call(entry, "making the timing variants", lambda: judge.timing_variants(
            deadline, seed=variant_seed(entry.seeds), count=self.settings.timing_variants,
            max_bytes=self.settings.timing_variant_max_bytes), deadline)
        if variants.made and variants.device_bytes:
            held = entry.held
            entry.held = dataclasses.replace(held, device_bytes=held.device_bytes + variants.device_bytes) \
                if self.options.device == Device.cuda else dataclasses.replace(held, host_bytes=held.host_bytes
                                                                               + variants.device_bytes)
        self.builder.extra.timing_variants = TimingVariantsNote(per_input_set=[count - 1 for count in variants.counts],
                                                                skipped=variants.skipped or None)
        if variants.reply.payload is not None:
            try:
                session.request(ApplyTimingVariants(payload=variants.reply.payload), VariantsApplied, deadline)
            finally:
                variants.reply.release()
        return variants.counts

    def _timing(self, entry: CachedReference, runner: WarmRunner, report: CorrectnessReport,
                tampered: list[str], compile_missing: str | None) -> tuple[TimingReport, Observations]:
        """Only the measurement holds the device alone: `timing_setup` (the variants made and handed over)
        and `timing_check` (one more call per input set, the kept outputs re-checked by the judge) share
        it with other jobs' correctness stages, as any untimed device work does; `timing` is the paired
        window, on the lane's reserved cores, with the device held exclusively."""
        opts = self.options
        deadline = time.monotonic() + opts.limits.timing_s
        session = runner.session

        judge = entry.judge
        rng = random.SystemRandom()  # the calls' order and which outputs are kept: the supervisor's secret
        notify(self.on_stage, Stage.timing_setup)
        with self.builder.stage(Stage.timing_setup):
            variant_counts = self._timing_variants(entry, session, deadline)
        reference_order, candidate_order = CallOrder(variant_counts, rng), CallOrder(variant_counts, rng)
        expected: list[tuple[int, int]] = []  # (input set, variant) of each output the candidate keeps
        labels: list[str] = []
        blocks = itertools.count(1)
        pauses: list[str] = []

        def reference_block(runs: int, warmup: int, keep: int, spacer_ms: float) -> TimedBlock:
            order = reference_order.next(warmup + runs)
            chosen = sorted(rng.sample(range(runs), min(keep, runs)))
            try:
                # No process of the candidate runs while the reference is timed (one that slowed it would
                # raise the candidate's speedup): its sandbox is frozen, and thawed before its own block.
                with self._exchange(entry, "timing the reference", deadline), session.process.paused() as how:
                    pauses.append(how)
                    return judge.time(runs, warmup, deadline, order=order, keep=chosen, spacer_ms=spacer_ms)
            except UserFailure as failure:
                failure.message = f"reference timing: {failure.message}"
                raise _ReferenceTimingFailure(failure) from failure

        def candidate_block(runs: int, warmup: int, keep: int, spacer_ms: float | None = None) -> TimedBlock:
            order = candidate_order.next(warmup + runs)
            chosen = sorted(rng.sample(range(runs), min(keep, runs)))
            number = next(blocks)
            command = Time(runs=runs, warmup=warmup, order=order, keep=chosen, spacer_ms=spacer_ms)
            reply, wall_s = session.timed_request(command, Timing, deadline)
            for index in chosen:
                expected.append(candidate_order.decode(order[warmup + index]))
                labels.append(f"candidate block {number}, timed call {index + 1} of {runs}")
            return TimedBlock.from_reply(reply, runs=runs, warmup=warmup, wall_s=wall_s)

        output_bytes = judge.generated.output_bytes if judge.generated else 0
        checks = min(self.settings.timed_checks, self.settings.timing_variant_max_bytes // output_bytes) \
            if output_bytes else self.settings.timed_checks
        notify(self.on_stage, Stage.timing)
        with self.builder.stage(Stage.timing), \
                timing_cores(self.settings.cpu_plan(), [judge.pid, session.process.pid]):
            windows, clock, self.builder.extra.clock_check_retried = clock_check.measure_checked(
                lambda: measure_paired(reference_block, candidate_block, opts, checks=checks, rng=rng),
                opts.device.value)
            stats = windows[-1].candidate_stats
            if self._attribution is not None and trace_disagrees(stats.median_ms, stats.std_ms,
                                                                 self._attribution.forward_gpu_ms):
                self._trace_alone(runner, deadline)
        window = windows[-1]
        self.builder.extra.candidate_paused = sorted(set(pauses))
        notify(self.on_stage, Stage.timing_check)
        with self.builder.stage(Stage.timing_check):
            # Outside the measured window: one call per input set, each output kept for the judge (KJ-R02).
            pool_size = len(variant_counts)
            kept = candidate_block(pool_size, 0, pool_size)
            snapshot = session.request(TimedOutputs(), TimedOutputsDone, deadline)
            if snapshot.payload is not None:
                try:
                    check = self._judge_call(entry, "re-checking timed outputs",
                                             lambda: judge.check_timed(snapshot, deadline, expected), deadline)
                finally:
                    snapshot.release()
                ok, message = check.ok, check.message or _timed_evidence(check, expected, labels)
            else:
                ok, message = False, "timed run: the candidate sent no outputs"
        tampered = [*tampered, *(name for measured in windows for name in measured.candidate_tampered),
                    *kept.tampered, *snapshot.tampered]
        speedup, speedup_ci = window.speedup()
        cand_stats = window.candidate_stats
        timing = TimingReport(
            method="cuda_events+l2_flush+queued_block" if opts.device == Device.cuda else "host_clock",
            device=(self.builder.environment.gpu_name if self.builder.environment else None) or opts.device.value,
            reference=window.reference_stats, candidate=cand_stats, speedup=speedup, speedup_ci95=speedup_ci,
            pairs=len(window.pairs), candidate_host_median_ms=clock.supervisor_ms, clock_check=clock,
            reference_queue_ms=window.queue_ms(0), candidate_queue_ms=window.queue_ms(1),
            reference_age_s=0.0,
        )
        self._add_compile_timing(timing, entry, window, deadline, compile_missing)
        observations = self._observations(
            report, tampered=tampered, timed_outputs_ok=ok, timed_outputs_message=message,
            candidate_device_median_ms=cand_stats.median_ms, candidate_device_std_ms=cand_stats.std_ms,
            speedup=speedup, clock_check=clock,
        )
        self.builder.extra.timing_runs = TimingRunsNote(reference=window.reference_stats.n, candidate=cand_stats.n,
                                                        pairs=len(window.pairs), runs_per_block=window.runs_per_block)
        return timing, observations

    def _add_compile_timing(self, timing: TimingReport, entry: CachedReference, window: PairedWindow,
                            deadline: float, missing: str | None) -> None:
        """The speedup against torch.compile, from this job's eager speedup and the problem's persisted
        record (baselines.compile_speedup); and the reference's timing persisted for later jobs when the
        problem has none yet or only a stale one (it sizes their timing windows)."""
        del entry, window, deadline
        book = self.settings.baseline_book()
        stored = book.get(self._baseline_key, REFERENCE_TIMING)
        if not baselines.fresh(stored, self.settings.baseline_retime_s):
            book.put(self._baseline_key, ReferenceTimingRecord(timing.reference.median_ms, timing.reference.n,
                                                               time.time(), socket.gethostname()))
        if missing is None and self._compile_record is not None:
            compile_baseline.apply(timing, self._compile_record)
        else:
            timing.compile_baseline_missing = missing or "no compile baseline"


def variant_seed(seeds: dict) -> int:
    """The timing variants' seed: derived from the secret trial seeds, so as secret and as fresh as they are."""
    return int.from_bytes(hashlib.sha256(f"timing-variants:{seeds.get('trial_seeds')}".encode()).digest()[:7], "big")


def _timed_evidence(check: TimedCheck, expected: list[tuple[int, int]], labels: list[str]) -> str | None:
    """KJ-R02's evidence: how many kept outputs were wrong, and where the first one came from."""
    if not check.wrong:
        return None
    index, what = check.wrong[0]
    slot, variant = expected[index] if index < len(expected) else (-1, -1)
    label = labels[index] if index < len(labels) else f"kept output {index}"
    inputs = (f"input set {slot}, variant {variant} (its values changed at secret positions before the call)"
              if variant else f"input set {slot} as generated")
    stored = ""
    if check.replayed is not None:
        other = "the set as generated" if check.replayed == 0 else f"variant {check.replayed}"
        stored = (f"; it is the reference's output for {other} of the same set, which an earlier call saw: an "
                  "output stored and returned again")
    return (f"{len(check.wrong)} of {len(expected)} outputs kept from timed calls differ from the reference's for "
            f"the same inputs; first: {label}, {inputs}: {what}{stored}")
