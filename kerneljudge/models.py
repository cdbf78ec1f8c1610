"""Typed objects of the HTTP API as the client sees them (pydantic only, no torch).

`Job` mirrors the API's job JSON; its `result` is the engine's `worker.models.EvalResult`.
Unknown fields the server adds are kept (extra="allow") so that a newer server does not
break an older client.
"""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from worker.models import ErrorInfo, EvalOptions, EvalResult


class JobStatus(str, Enum):
    queued = "queued"
    building = "building"
    running = "running"
    done = "done"  # an evaluation was produced, whatever its verdict
    failed = "failed"  # the service could not produce one
    cancelled = "cancelled"


TERMINAL_STATUSES = frozenset({JobStatus.done, JobStatus.failed, JobStatus.cancelled})


class Job(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: str
    status: JobStatus
    created_at: datetime | None = None
    updated_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    worker: str | None = None
    gpu: str | int | None = None
    problem_id: str | None = None
    result: EvalResult | None = None
    error: ErrorInfo | str | None = None

    @property
    def finished(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @property
    def error_message(self) -> str | None:
        if self.error is None:
            return None
        return self.error if isinstance(self.error, str) else f"{self.error.kind}: {self.error.message}"


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
