"""What the sync and async clients share: requests, response parsing and the retry policy.

Nothing here does I/O, so each client is a thin loop around these functions and both
behave the same way.
"""

from __future__ import annotations

import dataclasses
import email.utils
import random
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import httpx
from pydantic import ValidationError

from contract.http_objects import BatchEntry, Job, Problem, SubmitItem
from contract.results import ErrorInfo
from kerneljudge.errors import ApiError

T = TypeVar("T")
# What a call's answer parses into: a call that answers a list of jobs is a call that answers jobs.
Parsed = TypeVar("Parsed", covariant=True)

RETRY_STATUSES = frozenset({429, 503})
# Terminal statuses reached by a GET over ?ids= in chunks of this many ids.
IDS_PER_READ = 100


@dataclass(frozen=True)
class Call(Generic[Parsed]):
    """One API call: the request to send and how to read a successful answer."""

    method: str
    path: str
    parse: Callable[[httpx.Response], Parsed]
    json: Any = None
    params: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    ok_statuses: frozenset[int] = frozenset({200, 201, 202})


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with full jitter; a server's Retry-After is honoured (never undercut)."""

    max_attempts: int = 8
    base_delay_s: float = 0.25
    max_delay_s: float = 20.0
    rng: random.Random = field(default_factory=random.Random, compare=False)

    def delay(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait before attempt `attempt + 1` (attempt counts from 1)."""
        backoff = min(self.max_delay_s, self.base_delay_s * 2 ** (attempt - 1))
        jittered = self.rng.uniform(backoff / 2, backoff)
        return max(jittered, retry_after) if retry_after is not None else jittered


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Retry-After as seconds: either delta-seconds or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def error_from_response(response: httpx.Response) -> ApiError:
    """An ApiError carrying the server's own explanation (FastAPI `detail` or our `error` object)."""
    kind, message = None, response.reason_phrase or "error"
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        if isinstance(body.get("error"), dict):
            kind = body["error"].get("kind")
            message = str(body["error"].get("message", message))
        elif "detail" in body:
            detail = body["detail"]
            if isinstance(detail, list):  # FastAPI validation errors: name the fields
                message = "; ".join(
                    f"{'.'.join(str(p) for p in d.get('loc', []))}: {d.get('msg')}" for d in detail if isinstance(d, dict)
                ) or str(detail)
                kind = "validation_error"
            else:
                message = str(detail)
    elif response.text:
        message = response.text[:500]
    hint = {
        401: " (set an API key: --api-key or KERNELJUDGE_API_KEY)",
        403: " (this API key lacks the right for this call)",
        413: " (the request body is too large; send fewer items per batch or smaller sources)",
    }.get(response.status_code, "")
    return ApiError(
        response.status_code,
        message + hint,
        kind=kind,
        retry_after=parse_retry_after(response.headers.get("retry-after")),
    )


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError as exc:
        raise ApiError(response.status_code, f"the server answered with invalid JSON: {response.text[:200]!r}") from exc


def _validated(model: type[T], data: Any, what: str, status: int) -> T:
    try:
        return model.model_validate(data)  # type: ignore[attr-defined]
    except ValidationError as exc:
        raise ApiError(status, f"the server's {what} does not match the client's model: {exc}") from exc


def parse_job(response: httpx.Response) -> Job:
    return _validated(Job, _json(response), "job", response.status_code)


def parse_jobs(response: httpx.Response) -> list[Job]:
    body = _json(response)
    items = body if isinstance(body, list) else (body.get("items") or body.get("jobs") or [])
    return [_validated(Job, item, "job", response.status_code) for item in items]


def parse_batch(response: httpx.Response) -> list[BatchEntry]:
    """Batch answer: a list (or {"items": [...]}) of jobs, {"job": ...} or {"error": ...} entries, in order."""
    body = _json(response)
    items = body if isinstance(body, list) else (body.get("items") or body.get("jobs") or [])
    entries = []
    for position, item in enumerate(items):
        index = item.get("index", position) if isinstance(item, dict) else position
        if isinstance(item, dict) and item.get("error") is not None and "status" not in item:
            error = item["error"]
            info = error if isinstance(error, dict) else {"kind": "rejected", "message": str(error)}
            entries.append(BatchEntry(index=index, error=_validated(ErrorInfo, info, "batch error", 200)))
        else:
            job = item.get("job", item) if isinstance(item, dict) else item
            entries.append(BatchEntry(index=index, job=_validated(Job, job, "job", response.status_code)))
    return entries


def parse_problem(response: httpx.Response) -> Problem:
    return _validated(Problem, _json(response), "problem", response.status_code)


def _auto_key(idempotency_key: str | None) -> dict[str, str]:
    # Every submission carries a key so that retrying after a lost answer cannot create a second job.
    return {"Idempotency-Key": idempotency_key or uuid.uuid4().hex}


def submit_call(item: SubmitItem, *, wait_s: float | None = None, idempotency_key: str | None = None) -> Call[Job]:
    params = {"wait": f"{wait_s:g}"} if wait_s else {}
    return Call("POST", "/v1/evaluations", parse_job, json=item.to_body(), params=params,
                headers=_auto_key(idempotency_key))


def submit_batch_call(items: list[SubmitItem]) -> Call[list[BatchEntry]]:
    return Call("POST", "/v1/evaluations:batch", parse_batch, json={"items": [i.to_body() for i in items]},
                headers=_auto_key(None))


def get_call(job_id: str) -> Call[Job]:
    return Call("GET", f"/v1/evaluations/{job_id}", parse_job)


def get_many_call(job_ids: Iterable[str]) -> Call[list[Job]]:
    return Call("GET", "/v1/evaluations", parse_jobs, params={"ids": ",".join(job_ids)})


def cancel_call(job_id: str) -> Call[Job]:
    return Call("DELETE", f"/v1/evaluations/{job_id}", parse_job)


def register_problem_call(reference: str, profile: str | None = None) -> Call[Problem]:
    body = {"reference": reference} if profile is None else {"reference": reference, "profile": profile}
    return Call("POST", "/v1/problems", parse_problem, json=body)


def get_problem_call(problem_id: str) -> Call[Problem]:
    return Call("GET", f"/v1/problems/{problem_id}", parse_problem)


def chunks(values: list[T], size: int) -> list[list[T]]:
    return [values[i : i + size] for i in range(0, len(values), size)]


@dataclass
class PollSchedule:
    """Polling interval for wait(): starts short (fast evaluations), grows to a ceiling."""

    first_s: float = 0.2
    factor: float = 1.5
    max_s: float = 2.0
    _next: float | None = None

    def fresh(self) -> PollSchedule:
        return dataclasses.replace(self, _next=None)

    def next_delay(self, remaining_s: float) -> float:
        delay = self.first_s if self._next is None else self._next
        self._next = min(self.max_s, delay * self.factor)
        return max(0.0, min(delay, remaining_s))
