"""Small helpers shared by the route modules."""

from __future__ import annotations

from fastapi import HTTPException
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from worker.jobs.store import Job, public_job

from .schemas import JobView
from .service import SubmissionError


def job_view(job: Job) -> JobView:
    return JobView.model_validate(public_job(job))


def http_error(error: SubmissionError) -> HTTPException:
    return HTTPException(error.status, error.detail, headers=error.headers)


def clean_errors(error: ValidationError | RequestValidationError, loc_prefix: tuple = ()) -> list[dict]:
    """Pydantic errors as JSON-safe dicts naming the field (no echo of the input)."""
    return [{"type": e["type"], "loc": [*loc_prefix, *e["loc"]], "msg": e["msg"]} for e in error.errors()]


def not_found(what: str, ident: str) -> HTTPException:
    return HTTPException(404, f"no {what} with id {ident!r} (or it belongs to another API key)")
