"""Request and response bodies of the HTTP API (the engine's own models are reused as they are)."""

from __future__ import annotations

from typing import Any

from pydantic import AnyHttpUrl, BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from contract.http_objects import Job as JobView
from contract.requests import MAX_SOURCE_BYTES, EvalOptions, PolicyProfile

PROBLEM_ID_PATTERN = r"^[0-9a-f]{64}$"
# A completion carries reasoning and prose around the code: allow more than one source's worth.
MAX_COMPLETION_BYTES = 4 * MAX_SOURCE_BYTES


def check_source(value: str | None, what: str, limit: int = MAX_SOURCE_BYTES) -> str | None:
    if value is None:
        return value
    if len(value.encode("utf-8", "surrogatepass")) > limit:
        raise ValueError(f"{what} is larger than {limit} bytes")
    if "\x00" in value:
        raise ValueError(f"{what} contains a NUL character; send plain source text")
    return value


class EvaluationCreate(BaseModel):
    """One evaluation: give `reference` or `problem_id`, and `candidate` or `completion`."""

    model_config = ConfigDict(extra="forbid")

    reference: str | None = Field(default=None, description="KernelBench reference source (Model, get_inputs, ...).")
    problem_id: str | None = Field(default=None, validate_default=True, pattern=PROBLEM_ID_PATTERN,
                                   description="Id of a reference registered with POST /v1/problems.")
    candidate: str | None = Field(default=None, description="Candidate source defining ModelNew.")
    completion: str | None = Field(default=None, validate_default=True,
                                   description="Raw model output; the code block defining ModelNew is extracted.")
    options: EvalOptions = Field(default_factory=EvalOptions)
    priority: int = Field(default=0, ge=-100, le=100, description="Higher runs first (embedded workers).")
    callback_url: AnyHttpUrl | None = Field(default=None, description="Receives the finished job by signed POST.")

    @field_validator("reference")
    @classmethod
    def _reference_text(cls, value: str | None) -> str | None:
        return check_source(value, "reference")

    @field_validator("candidate")
    @classmethod
    def _candidate_text(cls, value: str | None) -> str | None:
        return check_source(value, "candidate")

    @field_validator("problem_id")
    @classmethod
    def _one_reference(cls, value: str | None, info: ValidationInfo) -> str | None:
        if "reference" not in info.data:
            return value  # `reference` itself was invalid and is reported on its own
        if (info.data["reference"] is None) == (value is None):
            raise ValueError("give exactly one of `reference` or `problem_id`")
        return value

    @field_validator("completion")
    @classmethod
    def _one_candidate(cls, value: str | None, info: ValidationInfo) -> str | None:
        check_source(value, "completion", MAX_COMPLETION_BYTES)
        if "candidate" not in info.data:
            return value
        if (info.data["candidate"] is None) == (value is None):
            raise ValueError("give exactly one of `candidate` or `completion`")
        return value

    @field_validator("options")
    @classmethod
    def _known_reward_preset(cls, value: EvalOptions) -> EvalOptions:
        from worker.engine.verdict.reward import validate_preset

        validate_preset(value.reward_preset, value.reward_weights)
        return value

    @field_validator("callback_url")
    @classmethod
    def _bounded_url(cls, value: AnyHttpUrl | None) -> AnyHttpUrl | None:
        if value is not None and len(str(value)) > 2000:
            raise ValueError("callback_url is longer than 2000 characters")
        return value


class JobList(BaseModel):
    items: list[JobView]
    missing: list[str] = Field(default_factory=list, description="Requested ids that do not exist (or are not yours).")


class BatchCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    items: list[dict[str, Any]] = Field(
        min_length=1,
        description="Evaluation bodies as for POST /v1/evaluations; each is validated on its own.",
    )


class ItemError(BaseModel):
    status: int = Field(description="The HTTP status this item alone would have got.")
    detail: Any


class BatchItem(BaseModel):
    index: int
    job: JobView | None = None
    error: ItemError | None = None


class BatchResponse(BaseModel):
    accepted: int
    rejected: int
    items: list[BatchItem]


class ProblemCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reference: str
    name: str | None = Field(default=None, max_length=200)
    profile: PolicyProfile | None = Field(
        default=None, description="Policy profile of your key's jobs on this problem unless a job names one: "
                                  "partial or full. Never changes another key's jobs.")

    @field_validator("reference")
    @classmethod
    def _reference_text(cls, value: str) -> str:
        return check_source(value, "reference")  # type: ignore[return-value]

    @field_validator("name")
    @classmethod
    def _name_text(cls, value: str | None) -> str | None:
        return check_source(value, "name", 800)


class ProblemView(BaseModel):
    id: str = Field(description="sha256 of the reference source.")
    name: str | None = None
    created_at: str
    reference: str
    profile: PolicyProfile = Field(default="partial", description=(
        "Profile your key's jobs get unless they name one: the one your key registered it with, else the "
        "owner's for the owner (and for everyone on a problem the operator registered), else partial."))
    registered_by_you: bool = Field(default=False, description="Your key registered it first (it owns it).")
    note: str | None = Field(default=None, description=(
        "Set when this registration left settings of another key's problem unchanged, saying which."))
    degenerate_reference: bool | None = Field(
        default=None, description="The reference's outputs barely depend on its inputs, as its last finished "
                                  "evaluation measured (null: not measured yet).")


class ProblemBatchCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    items: list[dict[str, Any]] = Field(
        min_length=1,
        description="Problem bodies as for POST /v1/problems; each is validated on its own.",
    )


class ProblemBatchItem(BaseModel):
    index: int
    problem: ProblemView | None = None
    created: bool | None = Field(default=None, description="True when this call registered it, false when known.")
    error: ItemError | None = None


class ProblemBatchResponse(BaseModel):
    registered: int = Field(description="Items now registered (new or already known).")
    created: int = Field(description="Items this call registered for the first time.")
    rejected: int
    items: list[ProblemBatchItem]


class RewardRequest(BaseModel):
    """OpenRLHF remote reward body (read by kerneljudge/adapters/openrlhf.py, the contract shared with the
    client's file mode). `query` holds the completions (prompt + response, or the response)."""

    model_config = ConfigDict(extra="ignore")

    query: list[str] = Field(max_length=4096)
    prompts: list[str] | None = Field(default=None, max_length=4096)
    labels: list[Any] | None = Field(
        default=None, max_length=4096,
        description="Per item: a problem_id (64 hex), the reference source itself, or "
                    '{"reference": ...} / {"problem_id": ...} (also as a JSON string). An unusable label '
                    "gives its item the fallback reward and a reason.")


class Health(BaseModel):
    status: str


class LaneReadiness(BaseModel):
    """One device lane of this process's embedded workers, as its watchdog sees it (worker/jobs/watchdog.py)."""

    name: str
    busy: bool = Field(description="It holds jobs (claimed, not finished).")
    stalled: bool = Field(description=(
        "It had jobs and made no progress for KERNELJUDGE_WATCHDOG_STALL_S, and is being restarted (its jobs go "
        "back to the queue): not ready meanwhile."))
    restarts: int = Field(description="Times the watchdog restarted it since the process started.")
    last_progress_s_ago: float = Field(description="Seconds since its jobs' last stage transition.")


class Readiness(BaseModel):
    ready: bool
    store: str
    workers: int
    mode: str
    selfcheck: str | None = Field(default=None, description=(
        "The start-up check (one tiny evaluation through the judge and a candidate sandbox): running, ok, or "
        "failed: the reason and what to fix. Null where this process runs no workers of its own."))
    precompiled_header: str | None = Field(default=None, description=(
        "The precompiled torch header CUDA builds compile against, built at start-up: warming (not ready "
        "until it exists), ok, or failed: why (ready anyway; CUDA builds then take the slower full build "
        "path where no header fits). Null where this process builds no CUDA."))
    lanes: list[LaneReadiness] = Field(default_factory=list, description=(
        "The device lanes of this process's embedded workers (empty with --broker: Celery workers' lanes live "
        "in their own processes). Not ready while one is stalled."))
