"""What a client asks for: one evaluation's request and its options (pydantic only, no torch)."""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator

from contract.statuses import Backend, Device, SandboxKind

MAX_SOURCE_BYTES = 512 * 1024



# Which speedup the reward's `speedup` component is (worker/engine/verdict/reward.py reward_speedup): against the eager
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

    def wants_compile_baseline(self) -> bool:
        """Whether this job times torch.compile of the reference: as asked, else on for cuda, off for cpu."""
        return self.compile_baseline if self.compile_baseline is not None else self.device == Device.cuda


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

