"""What the engine returns: `EvalResult` and its reports, as the HTTP API, the client and the judge see them
(pydantic only, no torch)."""

from __future__ import annotations

from enum import Enum
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    computed_field,
    model_serializer,
)

from contract.requests import RewardBaseline, _reward_baseline_field
from contract.statuses import NON_VERDICT_STATUSES, Backend, Device, EvalStatus, SandboxKind


class ErrorKind(str, Enum):
    """What failed (`ErrorInfo.kind`), machine-readable. Listed with their meaning in docs/verdicts-and-rules.md."""

    # A source the engine cannot use (status invalid_input).
    empty_source = "empty_source"
    syntax_error = "syntax_error"
    missing_name = "missing_name"
    wrong_type = "wrong_type"
    gpu_required = "gpu_required"
    no_candidate = "no_candidate"  # a completion without a code block (/get_reward, `completion`)
    # The candidate's own failure (sandbox_side/runtime/failure_kind.py FailureKind).
    compile_error = "compile_error"
    runtime_error = "runtime_error"
    invalid_output = "invalid_output"
    out_of_memory = "out_of_memory"
    timeout = "timeout"
    crashed = "crashed"
    protocol = "protocol"
    # The reference's failure (status invalid_input): `reference_` and its FailureKind.
    reference_compile_error = "reference_compile_error"
    reference_runtime_error = "reference_runtime_error"
    reference_invalid_output = "reference_invalid_output"
    reference_out_of_memory = "reference_out_of_memory"
    reference_timeout = "reference_timeout"
    reference_crashed = "reference_crashed"
    reference_protocol = "reference_protocol"
    # A reward-hacking rule with severity reject (status rejected).
    rejected = "rejected"
    # The harness's failure, no verdict (status sandbox_error).
    sandbox_unavailable = "sandbox_unavailable"
    no_sandbox = "no_sandbox"
    judge_start_failed = "judge_start_failed"
    judge_failed = "judge_failed"
    judge_out_of_memory = "judge_out_of_memory"
    internal_error = "internal_error"

    def __str__(self) -> str:  # the kind's name as stored and shown (format() too, on every Python version)
        return self.value


class ErrorInfo(BaseModel):
    # A server only sends ErrorKind's values; a client keeps a kind it does not know (a newer server's) as text.
    kind: ErrorKind | str = Field(union_mode="left_to_right", description=(
        "Machine-readable error kind (ErrorKind), e.g. syntax_error, missing_name, compile_error, "
        "reference_runtime_error, judge_failed."))
    message: str = Field(description="What went wrong and what to do.")
    line: int | None = None
    log_excerpt: str | None = Field(default=None, description="Trimmed compiler or runtime output.")


class TrialResult(BaseModel):
    trial: int
    passed: bool
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    mismatch_fraction: float | None = None
    message: str | None = None


class ShapeTrialReport(BaseModel):
    """One extra trial on a doubled leading dimension: a kernel that hard-codes the problem's
    shape fails it (rule KJ-R09). Skipped when the reference does not accept such inputs."""

    ran: bool
    passed: bool | None = None
    problem_shapes: list[list[int] | None] = Field(default_factory=list)
    shapes: list[list[int] | None] = Field(default_factory=list, description="Input shapes of this trial.")
    result: TrialResult | None = None
    message: str | None = Field(default=None, description="Why it failed, or why it was skipped.")
    difference: Literal["shape", "precision"] | None = Field(default=None, description=(
        "When it failed: `shape` (a wrong output shape or dtype, a failure, NaN or Inf where the float64 truth has "
        "none, or an error at the scale of the output: KJ-R09, shape-specialised) or `precision` (every value within "
        "1% of the output's scale of the float64 truth, some beyond the tolerance: KJ-R12, a precision loss at "
        "that shape)."))


class DiscriminationReport(BaseModel):
    """For a degenerate reference (outputs that move less than the tolerance between trials):
    the candidate's error must stay small against the reference's own trial-to-trial spread,
    which no constant output can do (see sandbox_side/judging/discrimination.py)."""

    spread: float = Field(description="Largest max-abs difference between two trials' outputs: the float64 "
                                      "truth's where there is one, else the reference's.")
    max_error: float = Field(description="Largest max-abs error of the candidate against the same (truth or "
                                         "reference).")
    limit: float = Field(description="The error allowed: a quarter of the spread.")
    passed: bool
    perturbed_inputs: bool = Field(default=False, description="Trial inputs were scaled/shifted to move outputs.")
    message: str | None = None


class PrecisionReport(BaseModel):
    """Errors against a float64 run of the reference on the same inputs (see sandbox_side/judging/precision.py)."""

    checked: bool
    reference_error: float | None = Field(default=None, description="RMS error of the reference vs float64.")
    candidate_error: float | None = Field(default=None, description="RMS error of the candidate vs float64.")
    ratio: float | None = None
    ulps: float | None = Field(default=None, description="candidate error in ulps of the outputs' RMS.")
    reduction_length: int | None = Field(default=None, description=(
        "For a reduced output (a loss, a mean, a norm: at least 64 floating input values per output value), the "
        "floating input values of one input set: the error is also held to what an honest float32 reduction of "
        "that length stays within. None: the output is no reduction."))
    passed: bool | None = None
    message: str | None = None


class ProbeTrialReport(BaseModel):
    """One probe trial: a fresh input set of the problem's own, changed to expose reduced precision or
    skipped elements (sandbox_side/judging/probe_inputs.py), judged against its float64 truth
    with the reference's own error on the same inputs as the yardstick (sandbox_side/judging/probes.py)."""

    kind: Literal["scaled", "rounding", "spikes", "structured"]
    inputs: str = Field(description="What was done to the inputs (never where the spikes are, nor the phases).")
    ran: bool = Field(description="False: the probe was left out (the message says why).")
    outcome: Literal["ok", "flag", "fail"] | None = Field(default=None, description=(
        "fail: far beyond the tolerance on the spikes or structured probe (elements skipped), the trial fails "
        "correctness; "
        "flag: far beyond the reference's own error (KJ-R12, lower precision); ok: neither."))
    reference_error: float | None = Field(default=None, description="RMS error of the reference vs float64.")
    candidate_error: float | None = Field(default=None, description="RMS error of the candidate vs float64.")
    ratio: float | None = Field(default=None, description="candidate error / max(reference error, one ulp).")
    ulps: float | None = Field(default=None, description="candidate error in ulps of the output's RMS.")
    relative_error: float | None = Field(default=None, description="candidate error / the output's RMS.")
    non_finite: int = Field(default=0, description=(
        "Candidate values NaN or Inf where the truth is finite: left out of the errors, not held against it."))
    index_mismatches: int = Field(default=0, description="Integer output values that differ (spikes probe).")
    honest_ulps: float | None = Field(default=None, description=(
        "For a reduced output: the error, in ulps of the output's RMS, beyond which it is flagged (8 times what "
        "an honest float32 reduction of that length stays within); None otherwise."))
    message: str | None = None


class InputCheckReport(BaseModel):
    """What the candidate did to its inputs: compared with copies it never held."""

    mutated: list[str] = Field(default_factory=list, description="Inputs changed by forward, with evidence.")
    aliased: list[str] = Field(default_factory=list, description="Outputs sharing memory with an input.")


class CorrectnessReport(BaseModel):
    """`passed` is about the problem's own shapes; the doubled-batch trial is reported apart."""

    passed: bool
    atol: float
    rtol: float
    trials: list[TrialResult]
    # The reference output barely depends on its inputs: a property of the problem, reported here;
    # correctness then also needs `discrimination` to pass.
    degenerate_reference: bool = False
    discrimination: DiscriminationReport | None = None
    precision: PrecisionReport | None = None
    inputs: InputCheckReport | None = None
    shape_trial: ShapeTrialReport | None = None
    probes: list[ProbeTrialReport] = Field(default_factory=list, description=(
        "Probe trials (scaled, rounding, spikes, structured inputs) judged against float64; empty when switched off "
        "(KJ-R15) "
        "or when the problem's own trials failed."))


class TimingStats(BaseModel):
    n: int
    mean_ms: float
    median_ms: float
    std_ms: float
    min_ms: float
    max_ms: float
    rse: float = Field(description="Relative standard error of the mean.")


class ClockCheckReport(BaseModel):
    """The candidate's reported samples against the supervisor's own clock (worker/engine/timing/clock_check.py).

    Per call, the time outside the reported samples (the L2 flush, the synchronisation, the loop) is
    the same for any honest model; the reference's, measured in the same window, is the yardstick. A
    candidate that reports less than it ran shows the difference as extra time outside its samples."""

    pairs: int = Field(description="Block pairs compared.")
    claimed_ms: float = Field(description="The candidate's reported mean per call.")
    supervisor_ms: float = Field(description="Per-call time the supervisor's clock allows the candidate: "
                                             "reported mean plus its unexplained time beyond the reference's.")
    reference_outside_ms: float = Field(description="Reference: time per call outside its samples.")
    candidate_outside_ms: float = Field(description="Candidate: time per call outside its samples.")
    noise_ms: float = Field(description="Spread of that difference over the pairs (robust sigma).")
    limit_ms: float = Field(description="Largest unexplained time per call accepted.")
    every_pair_over: bool = Field(False, description="The unexplained time was positive in every pair and beyond "
                                                    "the reference's own noise: a hidden time, however much it "
                                                    "varied from block to block (rejects from 6 pairs on).")
    pair_calls: list[int] = Field(default_factory=list, description="Calls per block of each pair, calibration "
                                                                     "first (both sides ran the same number).")
    pair_differences_ms: list[float] = Field(default_factory=list, description=(
        "Per pair, in the same order: the candidate's time outside its samples minus the reference's, per call. "
        "Times a pair's calls, it is what the candidate's block took beyond the reference's: the same figure "
        "in ms per block over blocks of different sizes points at a per-request cost, not a per-call one."))
    passed: bool


class TimingReport(BaseModel):
    method: str = Field(description="How samples were taken, e.g. cuda_events+l2_flush or host_clock.")
    device: str
    reference: TimingStats
    candidate: TimingStats
    speedup: float = Field(description="Median over interleaved block pairs of median(reference) / "
                                       "median(candidate), both timed in this job's exclusive window.")
    speedup_ci95: tuple[float, float]
    pairs: int | None = Field(default=None, description="Interleaved (reference, candidate) block pairs timed.")
    candidate_host_median_ms: float | None = Field(default=None, description=(
        "Candidate time per call seen from outside its process: the supervisor's clock around its timing "
        "blocks, less the per-call time the reference spends outside its samples (see clock_check)."))
    clock_check: ClockCheckReport | None = None
    reference_queue_ms: float | None = Field(default=None, description=(
        "The reference's host time per call to queue its timed blocks (its launches and the timer's loop; median "
        "over the blocks, as its process reported it). Where it exceeds the device time per call (the median "
        "plus the L2 flush), the calls were launch-bound and their samples count launch gaps. Diagnostic only."))
    candidate_queue_ms: float | None = Field(default=None, description=(
        "The same for the candidate. Reported by the candidate's own process: never evidence for a verdict."))
    reference_age_s: float | None = Field(default=None, description=(
        "Age of the reference timing used, in seconds: 0, the reference is timed in every job, interleaved "
        "with the candidate."))
    compile_reference: TimingStats | None = Field(default=None, description=(
        "torch.compile (default mode) of the reference, timed the same way on the same device."))
    compile_reference_median_ms: float | None = None
    compile_speedup: float | None = Field(default=None, description="compiled reference median / candidate median.")
    compile_speedup_ci95: tuple[float, float] | None = None
    compile_reference_age_s: float | None = None
    compile_baseline_missing: str | None = Field(default=None, description=(
        "Why there is no compile baseline (switched off, torch.compile failed, outputs differ, ...)."))


class RuleHit(BaseModel):
    """One reward-hacking rule that fired, with its evidence."""

    rule: str
    severity: Literal["reject", "flag"]
    message: str
    line: int | None = None
    evidence: str | None = None


class EnvironmentInfo(BaseModel):
    device: Device
    gpu_name: str | None = None
    driver: str | None = None
    cuda: str | None = None
    torch: str | None = None
    triton: str | None = None
    python: str | None = None
    cuda_sync_wait: str | None = Field(default=None, description="How the judge's CUDA waited for the device: "
                                       "spin, blocking, auto (CUDA's default: spinning on a host of more cores "
                                       "than CUDA contexts), or why the configured wait was not set; None on CPU.")
    sandbox: SandboxKind
    hostname: str | None = None
    gpu_index: int | None = Field(default=None, description="The host's GPU (its index on the host) that ran and "
                                  "timed this job; None on CPU or where the worker was not given one.")


class KernelSummary(BaseModel):
    """Every launch of one kernel (or, on CPU, one ATen operator) in the traced forward call."""

    name: str
    launches: int
    ms: float = Field(description="GPU time summed over launches (host time on CPU).")
    share: float = Field(description="Share of the forward's compute time (own + library).")
    op: str | None = Field(default=None, description="The ATen operator that launched it, if any.")
    streams: list[int] = Field(default_factory=list)


class CoverageReport(BaseModel):
    """Kernel attribution of one forward call, from what ran (see worker/engine/verdict/attribution.py)."""

    share: float = Field(description="Own-kernel time / (own + library compute time): the candidate's share.")
    own_ms: float
    library_ms: float
    plumbing_ms: float = Field(description="Allocation, fills and copies: neither side's compute.")
    own_kernels: list[KernelSummary] = Field(default_factory=list)
    library_kernels: list[KernelSummary] = Field(default_factory=list, description="Slowest first.")
    own_kernels_not_launched: list[str] = Field(default_factory=list,
                                                description="Kernels the source defines that never ran.")
    off_stream_kernels: list[str] = Field(default_factory=list,
                                          description="Kernels on a stream other than the timed one.")
    escaped_kernels: list[str] = Field(default_factory=list,
                                       description="Off-stream kernels still running when forward returned.")
    unordered_kernels: list[str] = Field(default_factory=list, description=(
        "Off-stream kernels that started before the work queued on the timed stream ahead of forward had "
        "finished: they did not wait for the current stream."))
    current_stream_switched: bool = Field(default=False, description=(
        "forward returned with another stream made current than the one it was called on."))
    stream_hold_covered_forward: bool | None = Field(default=None, description=(
        "GPU: whether the timed stream was still held ahead of the start marker when forward returned, so that "
        "every side-stream kernel that did not wait for the timed stream shows in unordered_kernels. False: "
        "forward had not returned when the hold ended, even on a retry with a longer hold (a slow host path, or a "
        "synchronisation inside forward, which orders the work after it anyway)."))
    method: str = Field(description="cupti_kernel_trace (GPU) or interpreter_and_aten_trace (CPU).")


class BuildNote(BaseModel):
    """How the candidate was built (CUDA candidates)."""

    path: str | None = Field(default=None, description="fast (kernels through nvcc, host code against a precompiled "
                                                         "header) or full (torch's own load_inline build)")
    reason: str | None = Field(default=None, description="Why the full build was taken, when it was.")
    seconds: float | None = None


class TrialsSizedNote(BaseModel):
    """Fewer trials than asked, sized to the trial byte budget, or to what a candidate's sandbox may write in one
    reply where that is less (one huge problem)."""

    kept: int
    asked: int
    set_bytes: int
    budget: int
    reason: str


class TimingVariantsNote(BaseModel):
    """The timed inputs' variants (changed at secret positions between timed calls)."""

    per_input_set: list[int]
    skipped: str | None = None


class JudgeStartNote(BaseModel):
    """Where a judge's start went, in seconds (the job that started it, or the first one it served)."""

    launch_s: float = Field(description="Its sandbox's start and the reference's import (host work).")
    device_wait_s: float = Field(description="Waiting for its shared hold on the device (behind timings).")
    generate_s: float = Field(description="The reference run on every input set, its waits for the device excluded.")
    steps_s: dict[str, float] = Field(default_factory=dict, description=(
        "Each step of the generation, on the supervisor's clock, its waits excluded: `inputs` and `seal` are host "
        "work that holds no device; `trials`, `truths`, `pool`, `shape`, `probe_inputs` (the probes' input sets), "
        "`probes` (their calls), `probe_truths` (their float64 truths and checks) and `physics` hold it shared."))
    yields: int = Field(0, description="Steps at which it let a waiting timing have the device first.")
    cpu_s: float | None = Field(default=None, description=(
        "CPU seconds its sandbox's processes used through the start (the host's cost of a judge: on two H100s the "
        "judges' processes were the host's largest consumer), from /proc; None where it could not be read."))
    launch_cpu_s: float | None = Field(default=None, description=(
        "Of `cpu_s`, those used by the end of `launch_s` (the sandbox's start and the reference's import)."))
    start_cpu_s: dict[str, float] = Field(default_factory=dict, description=(
        "The judge process's own CPU seconds by part of its start, before the reference's import, as it reported "
        "them: `imports` (the interpreter, torch and the harness), `device` (CUDA's set-up), `triton_import`, "
        "`warm`."))


class TimingRunsNote(BaseModel):
    """How many timed calls each side ran, in how many pairs of blocks."""

    reference: int
    candidate: int
    pairs: int
    runs_per_block: int


class RewardBaselineNote(BaseModel):
    """The reward asked for the torch.compile baseline and used the eager one, and why."""

    requested: RewardBaseline
    used: RewardBaseline
    why: str


class ResultNotes(BaseModel):
    """How an evaluation went beyond its verdict, one typed section each; a section is present only where it
    applies (the JSON holds the sections that were written, as `extra`). A newer server's sections are kept."""

    # Assigned section by section by the engine: each assignment is validated against its type.
    model_config = ConfigDict(extra="allow", validate_assignment=True)

    build: BuildNote | None = None
    build_cached: bool | None = Field(default=None, description="The build came from the build cache.")
    extraction: str | None = Field(
        default=None, description="How the candidate source was taken out of a raw completion (/get_reward).")
    reference_cache: Literal["hit", "miss", "off"] | None = None
    reference_judge: str | None = Field(default=None, description=(
        "How the job got its judge: started ahead of it, waited for one busy with another job, or why it started "
        "its own."))
    judge_start: JudgeStartNote | None = Field(
        default=None, description="Where the start of the judge this job started, or was the first to use, went.")
    candidate_cpu_s: float | None = Field(default=None, description=(
        "CPU seconds the candidate's sandbox used on the host, its warm start and this job (its load, Triton "
        "compiles, calls and timed blocks), from /proc before it was stopped."))
    runner_start_cpu_s: dict[str, float] | None = Field(default=None, description=(
        "Of those, the runner process's own CPU seconds by part of its warm start, before any candidate code, as "
        "it reported them: `imports` (the interpreter, torch and the harness), `device` (CUDA's set-up), "
        "`triton_import`, `warm` (the profiler's set-up)."))
    candidate_run_s: dict[str, float] | None = Field(default=None, description=(
        "The `candidate` stage's wall seconds by part, as the candidate's runner reported them (diagnostic only): "
        "`read` (the judge's inputs from their sealed file), `construct` (ModelNew), `inputs` (the trials' inputs "
        "onto the device), `first_call` (trial 0: Triton's compiles and first launches are in it), `calls` (the "
        "other trials), `outputs` (copies to the host), `pool` (the timing inputs onto the device), `shape` (the "
        "doubled batch). The rest of the stage is the outputs' way back to the judge."))
    precision_skipped: str | None = Field(default=None, description="Why the float64 truth was not computed.")
    trials_sized: TrialsSizedNote | None = None
    perturbed_trials: list[int] | None = Field(
        default=None, description="Trials whose reference outputs did not change under perturbed inputs.")
    attribution_skipped: str | None = None
    trace_truncated: bool | None = None
    timing_skipped: str | None = None
    timing_variants: TimingVariantsNote | None = None
    candidate_paused: list[str] | None = Field(
        default=None, description="How the candidate's sandbox was paused while the reference was timed.")
    timing_runs: TimingRunsNote | None = None
    clock_check_retried: ClockCheckReport | None = Field(
        default=None, description="The first timing window's clock check, which failed: the window was measured "
                                  "again, and the result's figures and verdict are the second's (a forger's fails "
                                  "both; a batch's host noise seldom does twice).")
    trace_busy_beside_others_ms: float | None = Field(
        default=None, description="The forward's kernels' busy time in the kernel trace taken beside other jobs' "
                                  "device work, when it was far over the timed median: the call was traced again "
                                  "with the device held alone, and KJ-R04 judged by that trace (other contexts' "
                                  "work on the GPU stretches a traced kernel: 2.86 ms for an honest 0.63 ms GEMM).")
    compile_baseline: dict[str, Any] | None = Field(
        default=None, description="The problem's torch.compile baseline: its state (attached, waited, pending, "
                                  "off) and record.")
    reward_baseline: RewardBaselineNote | None = None
    physics: dict[str, Any] | None = Field(
        default=None, description="The physics rule's (KJ-R06) numbers: bytes counted, bandwidth, floor.")
    triton_cache: Literal["published", "not kept"] | None = None
    retried_alone: str | None = Field(
        default=None, description="Why the job ran a second pass alone on the device.")
    judge_lost: str | None = Field(
        default=None, description="Why the judge this job shared with other jobs of its problem could not serve "
                                  "it (another job's exchange broke it, or its process was gone): the job's device "
                                  "stages ran again with another judge, and the verdict is that pass's.")
    device_wait_s: float | None = Field(
        default=None, description="Seconds the job's device stages waited for their hold on the device (behind "
                                  "other jobs' timing, or held back by the card's memory); not in `stages`.")
    timing_wait_s: float | None = Field(
        default=None, description="The part of `device_wait_s` spent waiting to time alone: for the other jobs' "
                                  "current stages on the device to end.")

    @model_serializer(mode="wrap")
    def _written_sections(self, handler: SerializerFunctionWrapHandler):  # no return type: the schema stays the fields'
        return {name: value for name, value in handler(self).items() if value is not None}


class EvalResult(BaseModel):
    """The engine's verdict for one (reference, candidate) pair; also the API's `result`."""

    status: EvalStatus
    compiled: bool = False
    correct: bool = False
    flagged: bool = False
    speedup: float | None = None
    reward: float = 0.0
    compile_baseline: bool | None = Field(default=None, description=(
        "Whether the job asked for torch.compile of the reference to be timed (options.compile_baseline, or its "
        "default: on for cuda, off for cpu); timing.compile_speedup or timing.compile_baseline_missing says what "
        "came of it."))
    reward_preset: str = "default"
    reward_baseline: RewardBaseline = _reward_baseline_field()
    reward_components: dict[str, float] = Field(default_factory=dict)
    backend: Backend | None = None
    error: ErrorInfo | None = None
    correctness: CorrectnessReport | None = None
    timing: TimingReport | None = None
    rules: list[RuleHit] = Field(default_factory=list)
    coverage: CoverageReport | None = None
    stages: dict[str, float] = Field(default_factory=dict, description="Seconds spent in each stage.")
    environment: EnvironmentInfo | None = None
    candidate_log: str | None = Field(default=None, description="Candidate's own output (logs, never a verdict).")
    extra: ResultNotes = Field(default_factory=ResultNotes)

    @computed_field(description=(  # type: ignore[prop-decorator]
        "False when the harness failed (status sandbox_error): nothing was judged, `reward` is no score. A trainer "
        "skips the sample or submits it again; the adapters give it their fallback reward and count it as such."))
    @property
    def judged(self) -> bool:
        return self.status not in NON_VERDICT_STATUSES
