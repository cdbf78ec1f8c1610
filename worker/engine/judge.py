"""The trusted judge of one problem, seen from the supervisor.

A judge is a sandboxed runner in the reference role (sandbox_runtime/judge_process.py): it runs
the problem's reference, keeps the input sets and the reference's outputs in its own memory (on
the GPU when there is one) and compares a candidate's outputs there. It never runs candidate code.
Tensors move between the judge, the supervisor and a candidate only over the runners' pipes, as
copies: nothing goes through a file, and a candidate's runner only ever receives inputs.

The reference is user code too (the problem's registrant's), so the judge is sandboxed like a
candidate, serves one problem only, and is retired on the reference cache's schedule.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..models import CorrectnessReport, Device, EvalOptions
from . import physics
from .launch import RunnerConfig, RunnerPaths, RunnerSession, UserFailure
from .sandbox import ResourceLimits
from .sandbox.process import DEFAULT_MAX_PAYLOAD_BYTES, PAYLOAD_KEY
from .settings import EngineSettings
from .timing_protocol import TimedBlock

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

    environment: dict
    shape_info: dict
    perturbed_trials: list[int]
    truth_skipped: str | None
    output_bytes: int  # one trial's outputs
    reply_bytes: int  # an honest candidate's run reply
    input_bytes: int
    tampered: list[str] = field(default_factory=list)
    device_bytes: int = 0  # what the judge says it holds on its device (its allocator's reserve)
    # Set when a trial's inputs and outputs were too large for all the trials asked for: kept, asked,
    # set_bytes, budget (judge_process.sized_trials).
    trials_sized: dict | None = None
    # What it measured for the physics rule (sandbox_runtime/physics.py, worker/engine/physics.py).
    physics: dict = field(default_factory=dict)


@dataclass
class Comparison:
    """The judge's verdict on one candidate run: a report, or why the outputs were unreadable."""

    report: CorrectnessReport | None
    invalid: str | None
    perturbed_trials: list[int]


@dataclass
class CompileBaseline:
    """What the judge reports about its torch.compile baseline (see sandbox_runtime/compile_baseline)."""

    available: bool
    reason: str | None  # why there is none
    compile_s: float
    compiles: int  # how many times this judge has compiled its reference (0 or 1)


@dataclass
class TimingVariants:
    """The judge's variants of the timing pool (sandbox_runtime/timing_variants.py): the reply that carries
    their changes to a candidate's runner, and how many variants each input set has (1: only itself)."""

    reply: dict  # without tensors where no input set has a variant (nothing for the runner)
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

    def start(self, seeds: dict, deadline: float, *, shape_max_bytes: int) -> GeneratedReference:
        """Start, import the reference and run it on every input set (UserFailure: the reference's fault)."""
        self.launch(deadline)
        return self.generate(seeds, deadline, shape_max_bytes=shape_max_bytes)

    def launch(self, deadline: float) -> None:
        """Start the sandbox and import the reference (host work: nothing runs on the device yet).

        JudgeStartFailure when the judge's runtime did not come up (nothing of the reference had run: the
        harness's failure, e.g. a GPU the sandbox cannot use); UserFailure when the reference's import fails."""
        self.session.process.start()
        try:
            self.session.wait_ready(deadline)
        except UserFailure as failure:
            raise JudgeStartFailure(failure) from failure
        self.session.load(self.reference, deadline)

    def generate(self, seeds: dict, deadline: float, *, shape_max_bytes: int) -> GeneratedReference:
        """Run the reference on every input set and keep the outputs (device work)."""
        measures = physics.measures_wanted(self.options.device.value, self.session.environment.get("gpu_name"),
                                           self.settings)
        reply = self.session.request("generate", deadline, shape_max_bytes=shape_max_bytes,
                                     probe_max_bytes=self.probe_max_bytes, atol=self.options.atol,
                                     rtol=self.options.rtol, physics_measures=measures,
                                     trial_bytes_budget=self.settings.trial_bytes_budget, **seeds)
        self.generated = GeneratedReference(
            environment=self.session.environment, shape_info=dict(reply.get("shape_trial") or {}),
            perturbed_trials=[int(i) for i in reply.get("perturbed_trials") or []],
            truth_skipped=str(reply["truth_skipped"])[:500] if reply.get("truth_skipped") else None,
            output_bytes=int(reply.get("output_bytes") or 0), reply_bytes=int(reply.get("reply_bytes") or 0),
            input_bytes=int(reply.get("input_bytes") or 0), tampered=list(reply.get("tampered") or []),
            trials_sized=dict(reply["trials_sized"]) if isinstance(reply.get("trials_sized"), dict) else None,
            device_bytes=int(reply.get("device_bytes") or 0),
            physics=reply["physics"] if isinstance(reply.get("physics"), dict) else {},
        )
        self.session.process.max_payload_bytes = min(MAX_JUDGE_PAYLOAD_BYTES,
                                                     max(DEFAULT_MAX_PAYLOAD_BYTES, 2 * self.generated.input_bytes))
        return self.generated

    def inputs(self, deadline: float) -> dict:
        """The input sets for one candidate, as a reply to forward (the bytes stay as they came)."""
        reply = self.session.request("inputs", deadline)
        if PAYLOAD_KEY not in reply:
            raise UserFailure("protocol", "the judge sent no inputs")
        return reply

    def compare(self, run_reply: dict, deadline: float, *, probe_check: bool = True) -> Comparison:
        """Compare a candidate's run reply (forwarded as it came: the judge checks shapes and dtypes
        against the reference's before it reads a byte of it). `probe_check`: the job's own switch
        (a cached judge serves jobs with other policies)."""
        opts = self.options
        from .policy.registry import is_disabled
        from .verification import SHAPE_RULE

        reply = self.session.request("compare", deadline, forward=run_reply, atol=opts.atol, rtol=opts.rtol,
                                     shape_check=not is_disabled(SHAPE_RULE, opts.policy.disabled_rules),
                                     shape_rule=SHAPE_RULE, probe_check=probe_check)
        if reply.get("invalid"):
            return Comparison(None, str(reply["invalid"])[:2000], [])
        return Comparison(CorrectnessReport.model_validate(reply["report"]), None,
                          [int(i) for i in reply.get("perturbed_trials") or []])

    def timing_variants(self, deadline: float, *, seed: int, count: int, max_bytes: int) -> TimingVariants:
        """The timing pool's variants (made by the judge on the first request, the same afterwards)."""
        reply = self.session.request("timing_variants", deadline, seed=seed, count=count, max_bytes=max_bytes,
                                     atol=self.options.atol, rtol=self.options.rtol)
        counts = reply.get("counts")
        if not isinstance(counts, list) or not all(type(c) is int and c >= 1 for c in counts) or (
                PAYLOAD_KEY not in reply and any(c > 1 for c in counts)):
            raise UserFailure("protocol", "the judge sent no timing variants")
        skipped = reply.get("skipped")
        return TimingVariants(reply, counts, int(reply.get("variant_bytes") or 0),
                              str(skipped)[:500] if skipped else None, bool(reply.get("made")))

    def check_timed(self, kept_reply: dict, deadline: float, expected: list[tuple[int, int]]) -> TimedCheck:
        """The outputs a candidate kept while timed, each against the reference's for the input set and
        variant `expected` says its call had."""
        reply = self.session.request("check_timed", deadline, forward=kept_reply, atol=self.options.atol,
                                     rtol=self.options.rtol, expected=[list(pair) for pair in expected])
        wrong = [(int(index), str(message)[:1000]) for index, message in reply.get("wrong") or []]
        replayed = reply.get("replayed")
        return TimedCheck(bool(reply.get("ok")), reply.get("message"), wrong,
                          int(replayed) if type(replayed) is int else None)

    def compile(self, deadline: float) -> CompileBaseline:
        """Compile the reference with torch.compile, once per judge (a later call reports the first)."""
        reply = self.session.request("compile", deadline, atol=self.options.atol, rtol=self.options.rtol)
        reason = reply.get("reason")
        return CompileBaseline(available=bool(reply.get("ok")), reason=str(reason)[:1000] if reason else None,
                               compile_s=float(reply.get("compile_s") or 0.0), compiles=int(reply.get("compiles") or 0))

    def time(self, runs: int, warmup: int, deadline: float, *, compiled: bool = False, order: list[int] | None = None,
             keep: list[int] | None = None) -> TimedBlock:
        """One block of timed calls of the reference (or its compiled form), clocked by the supervisor;
        `order` and `keep` as for a candidate's block (sandbox_runtime/timer.time_model)."""
        fields: dict = {"order": order, "keep": keep} if order is not None else {}
        reply, wall_s = self.session.timed_request("time", deadline, expect="timing", runs=runs, warmup=warmup,
                                                   compiled=compiled, **fields)
        return TimedBlock.from_reply(reply, runs=runs, warmup=warmup, wall_s=wall_s)

    def close(self) -> None:
        self.session.process.close(grace_s=2.0)

    def kill(self) -> None:
        """Kill it now (no goodbye): a thread waiting for its reply wakes with SandboxExited."""
        self.session.process.kill()
