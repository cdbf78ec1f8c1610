"""Public data models of the evaluation engine.

These are the contract: the HTTP API returns `EvalResult` as it is, the client parses it,
and the engine produces it. This module imports pydantic only (no torch), so that the
trainer-side client can use it without the worker's dependencies.
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, computed_field, field_validator

MAX_SOURCE_BYTES = 512 * 1024


class EvalStatus(str, Enum):
    """Verdict of one evaluation. Only `ok` means correct and timed. `sandbox_error` is no verdict:
    the harness failed (the judge ran out of device memory even alone, no sandbox, an engine fault),
    so the result says nothing about the candidate (`EvalResult.judged` is false): skip the sample
    or submit it again."""

    ok = "ok"
    incorrect = "incorrect"
    compile_error = "compile_error"
    runtime_error = "runtime_error"
    timeout = "timeout"
    invalid_input = "invalid_input"
    rejected = "rejected"
    sandbox_error = "sandbox_error"


class JobStatus(str, Enum):
    """A job's state in the service (the API's `status`); its verdict is `result.status`."""

    queued = "queued"
    building = "building"  # claimed, being validated and built; `built_at` set once it waits for its GPU
    running = "running"
    done = "done"  # an evaluation was produced, whatever its verdict
    failed = "failed"  # the service could not produce one
    cancelled = "cancelled"


# Statuses that are no judgement of the candidate (see EvalResult.judged).
NON_VERDICT_STATUSES = frozenset({EvalStatus.sandbox_error})


class Device(str, Enum):
    cpu = "cpu"
    cuda = "cuda"


class Backend(str, Enum):
    """The kind of kernel the candidate launches; `pytorch` means none of its own."""

    cuda = "cuda"
    triton = "triton"
    numba = "numba"  # Numba's @cuda.jit kernels
    pytorch = "pytorch"


class SandboxKind(str, Enum):
    bwrap = "bwrap"
    # No isolation at all: for debugging the engine only. Results say so.
    none = "none"


# Which speedup the reward's `speedup` component is (worker/engine/reward.py reward_speedup): against the eager
# reference or against torch.compile of it. Declared here only; everything else refers to these.
RewardBaseline = Literal["eager", "compile"]
REWARD_BASELINES: tuple[RewardBaseline, ...] = get_args(RewardBaseline)
DEFAULT_REWARD_BASELINE: RewardBaseline = "eager"


def _reward_baseline_field() -> Any:
    return Field(default=DEFAULT_REWARD_BASELINE, description=(
        "Which speedup the reward's `speedup` component is: against the eager reference or against "
        "torch.compile of it (falls back to eager, saying so in extra.reward_baseline, when there is none)."))


# Request models refuse NaN and infinities (the API also refuses them in any JSON body).
REQUEST_CONFIG = ConfigDict(extra="forbid", allow_inf_nan=False)
# Custom reward weights: bounded so that weight * component stays a finite float.
MAX_REWARD_WEIGHT = 1000.0


class StageLimits(BaseModel):
    """Wall-clock limits in seconds for each stage of one evaluation."""

    model_config = REQUEST_CONFIG

    build_s: float = Field(default=300.0, gt=0, le=3600)
    run_s: float = Field(default=120.0, gt=0, le=3600)
    timing_s: float = Field(default=120.0, gt=0, le=3600)


PolicyProfile = Literal["partial", "full"]


class PolicyConfig(BaseModel):
    """Reward-hacking policy for one job."""

    model_config = REQUEST_CONFIG

    # partial (KernelBench's contract): PyTorch may keep some operators, but at least one kernel of
    # the candidate's own must run and do part of the work; library compute lowers `coverage`.
    # full: every compute kernel must be the candidate's own (PyTorch only allocates, views, copies).
    # None: the registered problem's profile, else partial.
    profile: PolicyProfile | None = Field(default=None, description="partial (default) or full.")

    # Rule ids to switch off for this job (e.g. to allow cuBLAS calls).
    disabled_rules: list[str] = Field(default_factory=list)
    # Reward given to a `flagged` evaluation (suspicious but not proven cheating).
    flagged_reward: float = Field(default=0.0, ge=-MAX_REWARD_WEIGHT, le=MAX_REWARD_WEIGHT)
    # A speedup above this is flagged as implausible.
    max_speedup: float = Field(default=100.0, gt=1.0)


class EvalOptions(BaseModel):
    model_config = REQUEST_CONFIG

    trials: int = Field(default=5, ge=1, le=100, description="Correctness trials, each with fresh inputs.")
    atol: float | None = Field(default=None, ge=0, description="Absolute tolerance; default by dtype.")
    rtol: float | None = Field(default=None, ge=0, description="Relative tolerance; default by dtype.")
    timing: bool = Field(default=True, description="Time reference and candidate when correct.")
    timing_budget_s: float = Field(default=3.0, gt=0, le=120, description="Timing budget per model.")
    timing_target_rse: float = Field(default=0.005, gt=0, le=1, description="Stop once std error/mean < this.")
    timing_min_runs: int = Field(default=10, ge=3, le=10_000)
    timing_max_runs: int = Field(default=2000, ge=3, le=100_000)
    seed: int | None = Field(default=None, ge=0, le=2**63 - 1, description="Master seed; secret and random by default.")
    device: Device = Device.cpu
    backend: Backend | None = Field(default=None, description="Override backend detection.")
    sandbox: SandboxKind = SandboxKind.bwrap
    limits: StageLimits = Field(default_factory=StageLimits)
    compile_baseline: bool | None = Field(default=None, description=(
        "Also time torch.compile (default mode) of the reference, compiled once per problem and GPU, and report "
        "timing.compile_speedup. Default: on for cuda, off for cpu (Inductor's CPU compile is slow)."))
    reward_preset: str = "default"
    reward_baseline: RewardBaseline = _reward_baseline_field()
    reward_weights: dict[str, Annotated[float, Field(ge=-MAX_REWARD_WEIGHT, le=MAX_REWARD_WEIGHT)]] | None = Field(
        default=None, description="Custom weights over reward components (preset 'custom')."
    )
    policy: PolicyConfig = Field(default_factory=PolicyConfig)


class EvalRequest(BaseModel):
    model_config = REQUEST_CONFIG

    reference: str = Field(description="KernelBench reference source: Model, get_inputs, get_init_inputs.")
    candidate: str = Field(description="Candidate source defining ModelNew.")
    options: EvalOptions = Field(default_factory=EvalOptions)

    @field_validator("reference", "candidate")
    @classmethod
    def _bounded_source(cls, value: str) -> str:
        if len(value.encode("utf-8", "replace")) > MAX_SOURCE_BYTES:
            raise ValueError(f"source is larger than {MAX_SOURCE_BYTES} bytes")
        return value


class ErrorKind(str, Enum):
    """What failed (`ErrorInfo.kind`), machine-readable. Listed with their meaning in docs/verdicts-and-rules.md."""

    # A source the engine cannot use (status invalid_input).
    empty_source = "empty_source"
    syntax_error = "syntax_error"
    missing_name = "missing_name"
    wrong_type = "wrong_type"
    gpu_required = "gpu_required"
    no_candidate = "no_candidate"  # a completion without a code block (/get_reward, `completion`)
    # The candidate's own failure (worker/engine/sandbox_runtime/failure_kind.py FailureKind).
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
    which no constant output can do (see worker/engine/discrimination.py)."""

    spread: float = Field(description="Largest max-abs difference between two trials' outputs: the float64 "
                                      "truth's where there is one, else the reference's.")
    max_error: float = Field(description="Largest max-abs error of the candidate against the same (truth or "
                                         "reference).")
    limit: float = Field(description="The error allowed: a quarter of the spread.")
    passed: bool
    perturbed_inputs: bool = Field(default=False, description="Trial inputs were scaled/shifted to move outputs.")
    message: str | None = None


class PrecisionReport(BaseModel):
    """Errors against a float64 run of the reference on the same inputs (see worker/engine/precision.py)."""

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
    skipped elements (worker/engine/sandbox_runtime/probe_inputs.py), judged against its float64 truth
    with the reference's own error on the same inputs as the yardstick (worker/engine/probes.py)."""

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
    """The candidate's reported samples against the supervisor's own clock (worker/engine/clock_check.py).

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
    sandbox: SandboxKind
    hostname: str | None = None


class KernelSummary(BaseModel):
    """Every launch of one kernel (or, on CPU, one ATen operator) in the traced forward call."""

    name: str
    launches: int
    ms: float = Field(description="GPU time summed over launches (host time on CPU).")
    share: float = Field(description="Share of the forward's compute time (own + library).")
    op: str | None = Field(default=None, description="The ATen operator that launched it, if any.")
    streams: list[int] = Field(default_factory=list)


class CoverageReport(BaseModel):
    """Kernel attribution of one forward call, from what ran (see worker/engine/attribution.py)."""

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
    method: str = Field(description="cupti_kernel_trace (GPU) or interpreter_and_aten_trace (CPU).")


class EvalResult(BaseModel):
    """The engine's verdict for one (reference, candidate) pair; also the API's `result`."""

    status: EvalStatus
    compiled: bool = False
    correct: bool = False
    flagged: bool = False
    speedup: float | None = None
    reward: float = 0.0
    compile_baseline: bool | None = Field(default=None, description=(
        "Also time torch.compile (default mode) of the reference, compiled once per problem and GPU, and report "
        "timing.compile_speedup. Default: on for cuda, off for cpu (Inductor's CPU compile is slow)."))
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
    extra: dict[str, Any] = Field(default_factory=dict)

    @computed_field(description=(  # type: ignore[prop-decorator]
        "False when the harness failed (status sandbox_error): nothing was judged, `reward` is no score. A trainer "
        "skips the sample or submits it again; the adapters give it their fallback reward and count it as such."))
    @property
    def judged(self) -> bool:
        return self.status not in NON_VERDICT_STATUSES
