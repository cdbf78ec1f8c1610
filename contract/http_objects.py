"""Typed objects of the HTTP API as the client sees them (pydantic only, no torch).

`Job` is the job JSON itself: the server answers with this very model (app/schemas.py imports it
as its response model), so client and server cannot drift apart. Its `result` is the engine's
`contract.results.EvalResult`. Fields a newer server adds are kept (extra="allow") so that an older
client does not break.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from contract.requests import EvalOptions
from contract.results import ErrorInfo, EvalResult
from contract.statuses import TERMINAL_STATUSES, JobStatus

__all__ = ["BatchEntry", "Job", "Problem", "SubmitItem"]


class Job(BaseModel):
    """A job: `status` is the service's state; `result.status` is the evaluation's verdict."""

    model_config = ConfigDict(extra="allow")

    id: str
    status: JobStatus
    created_at: datetime
    building_at: datetime | None = Field(default=None, description="When a worker claimed the job.")
    built_at: datetime | None = Field(default=None, description=(
        "When the job was validated and built; while `status` is still `building` it waits for its GPU."))
    running_at: datetime | None = Field(default=None, description="When its first device stage started.")
    finished_at: datetime | None = None
    priority: int = 0
    problem_id: str
    worker: str | None = None
    gpu: str | None = None
    attempts: int = 0
    error: str | None = Field(default=None, description="Why the job failed or was requeued/cancelled.")
    idempotency_key: str | None = None
    result: EvalResult | None = None

    @property
    def finished(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @property
    def error_message(self) -> str | None:
        return self.error


class SubmitItem(BaseModel):
    """One evaluation to submit: a reference (or registered problem id) and a candidate (or completion)."""

    model_config = ConfigDict(extra="forbid")

    reference: str | None = None
    problem_id: str | None = None
    candidate: str | None = None
    completion: str | None = Field(default=None, description="Raw model output; the server extracts the code.")
    options: EvalOptions | None = None
    priority: int | None = None
    callback_url: str | None = None

    @model_validator(mode="after")
    def _one_of_each(self) -> SubmitItem:
        if (self.reference is None) == (self.problem_id is None):
            raise ValueError("give exactly one of `reference` (source) or `problem_id` (registered problem)")
        if (self.candidate is None) == (self.completion is None):
            raise ValueError("give exactly one of `candidate` (source) or `completion` (raw model output)")
        return self

    def to_body(self) -> dict[str, Any]:
        body = self.model_dump(exclude_none=True, exclude={"options"})
        if self.options is not None:
            # Only what the caller set: the server's defaults apply to the rest.
            body["options"] = self.options.model_dump(mode="json", exclude_unset=True)
        return body


class BatchEntry(BaseModel):
    """One item of a batch submission: its job, or why the server refused it."""

    index: int
    job: Job | None = None
    error: ErrorInfo | None = None

    @property
    def accepted(self) -> bool:
        return self.job is not None


class Problem(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: str
    created_at: datetime | None = None
