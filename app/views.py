"""Small helpers shared by the route modules."""

from __future__ import annotations

import logging

from fastapi import HTTPException
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from app.schemas import JobView
from app.service import SubmissionError
from worker.jobs.store import Job, public_job

log = logging.getLogger(__name__)


def job_view(job: Job) -> JobView:
    """The job as the API shows it. A stored result that is no EvalResult (another version wrote it,
    or someone edited the store) is shown as none, with `error` saying why: never a 500."""
    record = public_job(job)
    try:
        return JobView.model_validate(record)
    except ValidationError as exc:
        first = exc.errors()[0]
        log.warning("job %s: stored result is not an evaluation result: %s", job.id, exc)
        record["result"] = None
        record["error"] = ("the stored result of this job cannot be read as an evaluation result (written by "
                           f"another version, or edited): {'.'.join(map(str, first['loc']))}: {first['msg']}")
        return JobView.model_validate(record)


def http_error(error: SubmissionError) -> HTTPException:
    return HTTPException(error.status, error.detail, headers=error.headers)


def clean_errors(error: ValidationError | RequestValidationError, loc_prefix: tuple = ()) -> list[dict]:
    """Pydantic errors as JSON-safe dicts naming the field (no echo of the input)."""
    return [{"type": e["type"], "loc": [*loc_prefix, *e["loc"]], "msg": e["msg"]} for e in error.errors()]


def not_found(what: str, ident: str) -> HTTPException:
    return HTTPException(404, f"no {what} with id {ident!r} (or it belongs to another API key)")
