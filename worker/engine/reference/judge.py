"""The trusted judge of one problem, seen from the supervisor.

A judge is a sandboxed runner in the reference role (sandbox_side/judging/judge_process.py): it runs
the problem's reference, keeps the input sets and the reference's outputs in its own memory (on
the GPU when there is one) and compares a candidate's outputs there. It never runs candidate code.
Tensors move between the judge and a candidate in sealed memory files (sandbox_side/runtime/sealed_payload.py)
whose descriptors the supervisor passes on: neither can change what the other reads, each copies out what it
takes, and a candidate's runner only ever receives inputs. The judge's input sets are sealed once and the
same file goes to every candidate.

The reference is user code too (the problem's registrant's), so the judge is sandboxed like a
candidate, serves one problem only, and is retired on the reference cache's schedule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from contract.requests import EvalOptions
from contract.results import CorrectnessReport
from contract.statuses import Device
from sandbox_side.runtime.failure_kind import FailureKind
from sandbox_side.runtime.messages import (
    CheckTimed,
    Compare,
    Compared,
    Compile,
    Compiled,
    Generate,
    Generated,
    Inputs,
    InputsDone,
    MakeTimingVariants,
    RunDone,
    Time,
    TimedChecked,
    TimedOutputsDone,
    Timing,
    VariantsMade,
)
from worker.engine.engine_settings import EngineSettings
from worker.engine.gpu_schedule import as_neighbour
from worker.engine.launch import RunnerConfig, RunnerPaths, RunnerSession, UserFailure
from worker.engine.reference.generate_hold import GenerateHold
from worker.engine.sandbox import ResourceLimits
from worker.engine.sandbox.process import DEFAULT_MAX_PAYLOAD_BYTES
from worker.engine.timing.timing_protocol import TimedBlock
from worker.engine.verdict import physics

# Input sets and outputs the judge sends or accepts: bounded so a broken reference cannot make
# the supervisor buffer without limit.
MAX_JUDGE_PAYLOAD_BYTES = 16 * 1024**3


class JudgeStartFailure(Exception):
    """The judge's runtime failed before the reference's code ran: not a verdict on anyone's code."""

    def __init__(self, failure: UserFailure) -> None:
        super().__init__(failure.message)
        self.failure = failure


@dataclass
class GeneratedReference:
    """What the judge reports after running the reference (no tensors: they stay in the judge)."""

    environment: dict[str, Any]
    shape_info: dict[str, Any]
    perturbed_trials: list[int]
    truth_skipped: str | None
    output_bytes: int  # one trial's outputs
    reply_bytes: int  # an honest candidate's run reply
    input_bytes: int
    tampered: list[str] = field(default_factory=list)
    device_bytes: int = 0  # what the judge says it holds on its device (its allocator's reserve)
    # Set when a trial's inputs and outputs were too large for all the trials asked for: kept, asked,
    # set_bytes, budget (judge_process.sized_trials).
    trials_sized: dict[str, Any] | None = None
    # What it measured for the physics rule (sandbox_side/judging/physics_measure.py, worker/engine/verdict/physics.py).
    physics: dict[str, Any] = field(default_factory=dict)


@dataclass
class Comparison:
    """The judge's verdict on one candidate run: a report, or why the outputs were unreadable."""

    report: CorrectnessReport | None
    invalid: str | None
    perturbed_trials: list[int]


@dataclass
class CompileBaseline:
    """What the judge reports about its torch.compile baseline (see sandbox_side/judging/compiled_reference)."""

    available: bool
    reason: str | None  # why there is none
    compile_s: float
    compiles: int  # how many times this judge has compiled its reference (0 or 1)


@dataclass
class TimingVariants:
    """The judge's variants of the timing pool (sandbox_side/timing/timing_variants.py): the reply that carries
    their changes to a candidate's runner, and how many variants each input set has (1: only itself)."""

    reply: VariantsMade  # without a payload where no input set has a variant (nothing for the runner)
    counts: list[int]
    device_bytes: int  # the reference's outputs for them, held by the judge
    skipped: str | None  # why there are none, where the judge made none
    made: bool  # made for this request (the first of this judge's life)


@dataclass
class TimedCheck:
    """The judge's verdict on the outputs a candidate kept while timed."""

    ok: bool
    message: str | None  # why they could not be read
    wrong: list[tuple[int, str]]  # (index among the kept outputs, what differs)
    replayed: int | None  # the first wrong one is the reference's output for this other variant of its set


class JudgeSession:
    """A started judge for one problem (one reference source and its options)."""

    def __init__(self, reference: str, options: EvalOptions, settings: EngineSettings) -> None:
        self.reference = reference
        self.options = options
        cuda = options.device == Device.cuda
        limits = ResourceLimits(cpu_s=int(options.limits.run_s * 4) + 600,
                                address_space_bytes=None if cuda else 16 * 1024**3,
                                memory_bytes=settings.sandbox_memory_bytes)
        config = RunnerConfig(role="reference", mode="run", device=options.device.value, paths=RunnerPaths(),
                              sandbox=options.sandbox)
        self.session = RunnerSession(config, settings, limits)
        self.session.process.max_payload_bytes = DEFAULT_MAX_PAYLOAD_BYTES
        self.probe_max_bytes = settings.probe_trial_max_bytes
        self.settings = settings
        self.generated: GeneratedReference | None = None

    @property
    def alive(self) -> bool:
        return self.session.process.running

    @property
    def pid(self) -> int | None:
        return self.session.process.pid

    def start(self, seeds: dict[str, Any], deadline: float, *, shape_max_bytes: int) -> GeneratedReference:
        """Start, import the reference and run it on every input set (UserFailure: the reference's fault)."""
        self.launch(deadline)
        return self.generate(seeds, deadline, shape_max_bytes=shape_max_bytes)

    def launch(self, deadline: float) -> None:
        """Start the sandbox and import the reference (host work: nothing runs on the device yet).

        JudgeStartFailure when the judge's runtime did not come up (nothing of the reference had run: the
        harness's failure, e.g. a GPU the sandbox cannot use); UserFailure when the reference's import fails."""
        self.session.process.start()
        # Its CUDA set-up touches the device outside any job's stage: paused while a job is timed.
        with as_neighbour(self.settings.gpu_schedule, self.session.process):
            try:
                self.session.wait_ready(deadline)
            except UserFailure as failure:
                raise JudgeStartFailure(failure) from failure
            self.session.load(self.reference, deadline)

    def generate(self, seeds: dict[str, Any], deadline: float, *, shape_max_bytes: int,
                 hold: GenerateHold | None = None) -> GeneratedReference:
        """Run the reference on every input set (`seeds`: reference_cache.new_seeds's) and keep the outputs,
        holding the device step by step with `hold` (generate_hold; it is let go at the end)."""
        hold = hold if hold is not None else GenerateHold()
        measures = physics.measures_wanted(self.options.device.value, self.session.environment.get("gpu_name"),
                                           self.settings)
        command = Generate(init_seed=seeds["init_seed"], trial_seeds=seeds["trial_seeds"],
                           pool_seeds=seeds["pool_seeds"], shape_seeds=seeds.get("shape_seeds") or [],
                           shape_max_bytes=shape_max_bytes, probe_max_bytes=self.probe_max_bytes,
                           atol=self.options.atol, rtol=self.options.rtol, physics_measures=measures,
                           trial_bytes_budget=self.settings.trial_bytes_budget,
                           # Candidates' sandboxes (sandbox_pool, launch) keep ResourceLimits' file-size cap.
                           reply_max_bytes=ResourceLimits().file_size_bytes)
        try:
            reply = self.session.stepped_request(command, Generated, deadline, hold.step)
        finally:
            hold.end()
        self.generated = GeneratedReference(
            environment=self.session.environment, shape_info=reply.shape_trial,
            perturbed_trials=reply.perturbed_trials,
            truth_skipped=reply.truth_skipped[:500] if reply.truth_skipped else None,
            output_bytes=reply.output_bytes, reply_bytes=reply.reply_bytes, input_bytes=reply.input_bytes,
            tampered=reply.tampered, trials_sized=reply.trials_sized, device_bytes=reply.device_bytes,
            physics=reply.physics,
        )
        self.session.process.max_payload_bytes = min(MAX_JUDGE_PAYLOAD_BYTES,
                                                     max(DEFAULT_MAX_PAYLOAD_BYTES, 2 * self.generated.input_bytes))
        return self.generated

    def inputs(self, deadline: float) -> InputsDone:
        """The input sets for one candidate, as a reply to forward (its sealed memory file as it came)."""
        reply = self.session.request(Inputs(), InputsDone, deadline)
        if reply.payload is None:
            raise UserFailure(FailureKind.protocol, "the judge sent no inputs")
        return reply

    def compare(self, run_reply: RunDone, deadline: float, *, probe_check: bool = True) -> Comparison:
        """Compare a candidate's run reply (forwarded as it came: the judge checks shapes and dtypes
        against the reference's before it reads a byte of it). `probe_check`: the job's own switch
        (a cached judge serves jobs with other policies)."""
        opts = self.options
        from worker.engine.policy.registry import is_disabled
        from worker.engine.verdict.verification import SHAPE_RULE

        command = Compare(atol=opts.atol, rtol=opts.rtol,
                          shape_check=not is_disabled(SHAPE_RULE, opts.policy.disabled_rules), shape_rule=SHAPE_RULE,
                          probe_check=probe_check, payload=run_reply.payload)
        reply = self.session.request(command, Compared, deadline)
        if reply.invalid:
            return Comparison(None, reply.invalid[:2000], [])
        if reply.report is None:
            raise UserFailure(FailureKind.protocol, "the judge's comparison holds neither a report nor why not")
        return Comparison(CorrectnessReport.model_validate(reply.report), None, reply.perturbed_trials)

    def timing_variants(self, deadline: float, *, seed: int, count: int, max_bytes: int) -> TimingVariants:
        """The timing pool's variants (made by the judge on the first request, the same afterwards)."""
        command = MakeTimingVariants(seed=seed, count=count, max_bytes=max_bytes, atol=self.options.atol,
                                     rtol=self.options.rtol)
        reply = self.session.request(command, VariantsMade, deadline)
        counts = reply.counts
        if not all(c >= 1 for c in counts) or (reply.payload is None and any(c > 1 for c in counts)):
            raise UserFailure(FailureKind.protocol, "the judge sent no timing variants")
        return TimingVariants(reply, counts, reply.variant_bytes, reply.skipped[:500] if reply.skipped else None,
                              reply.made)

    def check_timed(self, kept_reply: TimedOutputsDone, deadline: float, expected: list[tuple[int, int]]
                    ) -> TimedCheck:
        """The outputs a candidate kept while timed, each against the reference's for the input set and
        variant `expected` says its call had."""
        command = CheckTimed(expected=list(expected), atol=self.options.atol, rtol=self.options.rtol,
                             payload=kept_reply.payload)
        reply = self.session.request(command, TimedChecked, deadline)
        wrong = [(index, message[:1000]) for index, message in reply.wrong]
        return TimedCheck(reply.ok, reply.message, wrong, reply.replayed)

    def compile(self, deadline: float) -> CompileBaseline:
        """Compile the reference with torch.compile, once per judge (a later call reports the first)."""
        reply = self.session.request(Compile(atol=self.options.atol, rtol=self.options.rtol), Compiled, deadline)
        return CompileBaseline(available=reply.ok, reason=reply.reason[:1000] if reply.reason else None,
                               compile_s=reply.compile_s, compiles=reply.compiles)

    def time(self, runs: int, warmup: int, deadline: float, *, compiled: bool = False, order: list[int] | None = None,
             keep: list[int] | None = None, spacer_ms: float | None = None) -> TimedBlock:
        """One block of timed calls of the reference (or its compiled form), clocked by the supervisor;
        `order`, `keep` and `spacer_ms` as for a candidate's block (sandbox_side/timing/timer.time_model)."""
        command = Time(runs=runs, warmup=warmup, order=order, keep=keep if order is not None else None,
                       compiled=compiled, spacer_ms=spacer_ms)
        reply, wall_s = self.session.timed_request(command, Timing, deadline)
        return TimedBlock.from_reply(reply, runs=runs, warmup=warmup, wall_s=wall_s)

    def close(self) -> None:
        self.session.process.close(grace_s=2.0)

    def kill(self) -> None:
        """Kill it now (no goodbye): a thread waiting for its reply wakes with SandboxExited."""
        self.session.process.kill()
