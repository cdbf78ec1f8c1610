"""Python client of the kerneljudge HTTP API: `KernelJudgeClient` (sync) and `AsyncKernelJudgeClient`.

Both share `_protocol` (requests, parsing, retry policy) and `_ClientCore` (decisions after
each attempt); only the I/O loop differs. Every public call takes `timeout`: a deadline for
the whole call, retries and polling included.

Retries: 429 and 503 (honouring Retry-After) and connection errors, with exponential backoff
and jitter, until `RetryPolicy.max_attempts` or the deadline. Submissions always carry an
Idempotency-Key, so a retried POST never creates a second job.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import httpx

from contract.http_objects import BatchEntry, Job, Problem, SubmitItem
from contract.requests import EvalOptions
from contract.results import EvalResult
from contract.statuses import JobStatus
from kerneljudge import _protocol as proto
from kerneljudge.errors import (
    ApiError,
    EvaluationTimeoutError,
    JobFailedError,
    KernelJudgeError,
    ServiceUnavailableError,
)

T = TypeVar("T")
log = logging.getLogger("kerneljudge.client")
DEFAULT_URL = "http://127.0.0.1:8000"
# Longest a submission asks the server to hold the request (`?wait=`); the server may cap it lower.
SUBMIT_WAIT_S = 30.0
ProgressCallback = Callable[[int, int], None]  # (finished, total)
# A read that wait_many makes at its deadline still gets this long to answer (at most the request
# timeout): the latest states are what the caller waits for, and a large answer takes time to send.
FINAL_READ_S = 10.0


def make_item(
    reference: str | None = None,
    candidate: str | None = None,
    *,
    problem_id: str | None = None,
    completion: str | None = None,
    options: EvalOptions | dict[str, Any] | None = None,
    priority: int | None = None,
    callback_url: str | None = None,
) -> SubmitItem:
    opts = EvalOptions.model_validate(options) if isinstance(options, dict) else options
    return SubmitItem(reference=reference, problem_id=problem_id, candidate=candidate, completion=completion,
                      options=opts, priority=priority, callback_url=callback_url)


class _ClientCore:
    """Configuration and the decision taken after each HTTP attempt (shared by both clients)."""

    def __init__(
        self,
        base_url: str | None,
        api_key: str | None,
        *,
        timeout: float,
        request_timeout: float,
        retry: proto.RetryPolicy | None,
        poll: proto.PollSchedule | None,
        batch_size: int,
        clock: Callable[[], float],
    ):
        self.base_url = (base_url or os.environ.get("KERNELJUDGE_URL") or DEFAULT_URL).rstrip("/")
        self.api_key = api_key if api_key is not None else os.environ.get("KERNELJUDGE_API_KEY")
        self.default_timeout = timeout
        self.request_timeout = request_timeout
        self.retry = retry or proto.RetryPolicy()
        self.poll_template = poll or proto.PollSchedule()
        self.batch_size = batch_size
        self.clock = clock

    def headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": "kerneljudge-client"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def deadline(self, timeout: float | None) -> float:
        return self.clock() + (self.default_timeout if timeout is None else timeout)

    def attempt_timeout(self, call: proto.Call, deadline: float) -> float:
        held = float(call.params.get("wait", 0))  # the server holds ?wait= requests on purpose
        return max(0.001, min(deadline - self.clock(), self.request_timeout + held))

    def after_attempt(self, call: proto.Call[T], attempt: int, deadline: float,
                      response: httpx.Response | None, failure: Exception | None) -> tuple[bool, T | None, float]:
        """(True, parsed value, 0) on success; (False, None, delay) to retry; raises when the call is over."""
        retry_after = None
        if response is not None:
            if response.status_code in call.ok_statuses:
                return True, call.parse(response), 0.0
            error = proto.error_from_response(response)
            if response.status_code not in proto.RETRY_STATUSES:
                raise error
            reason, retry_after = str(error), error.retry_after
        else:
            reason = f"cannot reach {self.base_url}: {type(failure).__name__}: {failure}"
        delay = self.retry.delay(attempt, retry_after)
        if attempt >= self.retry.max_attempts:
            raise ServiceUnavailableError(f"{call.method} {call.path} failed {attempt} times; last: {reason}")
        if self.clock() + delay > deadline:
            raise ServiceUnavailableError(
                f"{call.method} {call.path}: the call's deadline passes before the next retry "
                f"(in {delay:.1f}s); last: {reason}. Raise `timeout` or check the server's load"
            )
        return False, None, delay

    def expired(self, call: proto.Call, deadline: float) -> ServiceUnavailableError | None:
        if self.clock() < deadline:
            return None
        return ServiceUnavailableError(f"{call.method} {call.path}: deadline reached before an answer")

    def submit_items(self, items: Sequence[SubmitItem | dict[str, Any]]) -> list[SubmitItem]:
        return [i if isinstance(i, SubmitItem) else SubmitItem.model_validate(i) for i in items]


class _Waiting:
    """What `wait_many` knows (both clients): the latest state read of each job, and when to read again.

    The wait never raises for its own timeout: a read made at the deadline gets a real timeout
    (FINAL_READ_S), and once every job has been read once, a read that fails (the server slow or gone)
    ends the wait with the states already read. Only a failure before any answer, or an error that a
    retry cannot fix (4xx: unknown ids, a bad key), raises.
    """

    def __init__(self, core: _ClientCore, job_ids: Sequence[str], timeout: float | None):
        self.core = core
        self.job_ids = list(job_ids)
        self.deadline = core.deadline(timeout)
        self.poll = core.poll_template.fresh()
        self.latest: dict[str, Job | None] = dict.fromkeys(self.job_ids)
        self.read_failure: KernelJudgeError | None = None

    def pending_chunks(self) -> list[list[str]]:
        pending = [i for i, job in self.latest.items() if job is None or not job.finished]
        return proto.chunks(pending, proto.IDS_PER_READ)

    def read_timeout(self) -> float:
        """A read's own budget: what is left of the wait, and never less than a real read."""
        return max(self.deadline - self.core.clock(), min(self.core.request_timeout, FINAL_READ_S))

    def record(self, jobs: list[Job]) -> None:
        for job in jobs:
            self.latest[job.id] = job

    def read_failed(self, error: KernelJudgeError) -> None:
        """Raise `error` unless every job already has a state to return; then the wait ends with them."""
        fixable = not isinstance(error, ApiError) or error.status_code >= 500
        if not fixable or any(job is None for job in self.latest.values()):
            raise error
        self.read_failure = error
        log.warning("wait_many: returning the latest states of %d job(s); the last read failed: %s",
                    len(self.latest), error)

    def next_delay(self, on_progress: ProgressCallback | None) -> float | None:
        """Seconds until the next read, or None when the wait is over."""
        done = sum(1 for job in self.latest.values() if job is not None and job.finished)
        if on_progress is not None:
            on_progress(done, len(self.latest))
        remaining = self.deadline - self.core.clock()
        if done == len(self.latest) or remaining <= 0 or self.read_failure is not None:
            return None
        return self.poll.next_delay(remaining)

    def jobs(self) -> list[Job]:
        return [self.latest[i] for i in self.job_ids]  # type: ignore[misc]


def _reindex(entries: list[BatchEntry], offset: int) -> list[BatchEntry]:
    return [e.model_copy(update={"index": e.index + offset}) for e in entries]


def _ordered(ids: Sequence[str], jobs: list[Job]) -> list[Job]:
    by_id = {job.id: job for job in jobs}
    missing = [i for i in ids if i not in by_id]
    if missing:
        raise ApiError(404, f"the server does not know job(s) {', '.join(missing[:5])}; check the ids")
    return [by_id[i] for i in ids]


def _result_of(job: Job, timeout: float) -> EvalResult:
    if not job.finished:
        raise EvaluationTimeoutError(job.id, job.status.value, timeout)
    if job.status is not JobStatus.done or job.result is None:
        raise JobFailedError(job.id, job.status.value, job.error_message)
    return job.result


class KernelJudgeClient:
    """Blocking client. Use as a context manager, or call `close()`."""

    def __init__(self, base_url: str | None = None, api_key: str | None = None, *, timeout: float = 600.0,
                 request_timeout: float = 30.0, retry: proto.RetryPolicy | None = None,
                 poll: proto.PollSchedule | None = None, batch_size: int = 64,
                 transport: httpx.BaseTransport | None = None,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep):
        self._core = _ClientCore(base_url, api_key, timeout=timeout, request_timeout=request_timeout, retry=retry,
                                 poll=poll, batch_size=batch_size, clock=clock)
        self._sleep = sleep
        self._http = httpx.Client(base_url=self._core.base_url, headers=self._core.headers(), transport=transport)

    def __enter__(self) -> KernelJudgeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    @property
    def clock(self) -> Callable[[], float]:
        """The monotonic clock deadlines are measured on."""
        return self._core.clock

    @property
    def base_url(self) -> str:
        return self._core.base_url

    def _send(self, call: proto.Call[T], deadline: float) -> T:
        attempt = 0
        while True:
            if (expired := self._core.expired(call, deadline)) is not None:
                raise expired
            attempt += 1
            response, failure = None, None
            try:
                response = self._http.request(call.method, call.path, params=call.params, json=call.json,
                                              headers=call.headers, timeout=self._core.attempt_timeout(call, deadline))
            except httpx.TransportError as exc:
                failure = exc
            done, value, delay = self._core.after_attempt(call, attempt, deadline, response, failure)
            if done:
                return value  # type: ignore[return-value]
            self._sleep(delay)

    def submit(self, reference: str | None = None, candidate: str | None = None, *, problem_id: str | None = None,
               completion: str | None = None, options: EvalOptions | dict[str, Any] | None = None,
               priority: int | None = None, callback_url: str | None = None, idempotency_key: str | None = None,
               wait_s: float | None = None, timeout: float | None = None) -> Job:
        item = make_item(reference, candidate, problem_id=problem_id, completion=completion, options=options,
                         priority=priority, callback_url=callback_url)
        call = proto.submit_call(item, wait_s=wait_s, idempotency_key=idempotency_key)
        return self._send(call, self._core.deadline(timeout))

    def submit_many(self, items: Sequence[SubmitItem | dict[str, Any]], *, timeout: float | None = None
                    ) -> list[BatchEntry]:
        deadline = self._core.deadline(timeout)
        entries: list[BatchEntry] = []
        for offset, chunk in enumerate(proto.chunks(self._core.submit_items(items), self._core.batch_size)):
            got = self._send(proto.submit_batch_call(chunk), deadline)
            entries += _reindex(got, offset * self._core.batch_size)
        return entries

    def get(self, job_id: str, *, timeout: float | None = None) -> Job:
        return self._send(proto.get_call(job_id), self._core.deadline(timeout))

    def get_many(self, job_ids: Sequence[str], *, timeout: float | None = None) -> list[Job]:
        deadline = self._core.deadline(timeout)
        jobs: list[Job] = []
        for chunk in proto.chunks(list(job_ids), proto.IDS_PER_READ):
            jobs += self._send(proto.get_many_call(chunk), deadline)
        return _ordered(job_ids, jobs)

    def wait(self, job_id: str, *, timeout: float | None = None) -> Job:
        """The job once finished, or in its latest state when `timeout` passes (check `job.finished`)."""
        return self.wait_many([job_id], timeout=timeout)[0]

    def wait_many(self, job_ids: Sequence[str], *, timeout: float | None = None,
                  on_progress: ProgressCallback | None = None) -> list[Job]:
        """Poll until every job is finished or `timeout` passes; jobs in the order of `job_ids`, each in its
        latest state (check `job.finished`). The timeout itself never raises: a read at the deadline gets up
        to FINAL_READ_S more, and once every job was read, a failed read returns the states already read.
        Raises only when a job was never read (the server unreachable from the start) or for a 4xx."""
        waiting = _Waiting(self._core, job_ids, timeout)
        while True:
            for chunk in waiting.pending_chunks():
                try:
                    waiting.record(self.get_many(chunk, timeout=waiting.read_timeout()))
                except (ServiceUnavailableError, ApiError) as error:
                    waiting.read_failed(error)
                    break
            delay = waiting.next_delay(on_progress)
            if delay is None:
                return waiting.jobs()
            self._sleep(delay)

    def submit_and_wait(self, reference: str | None = None, candidate: str | None = None, *,
                        problem_id: str | None = None, completion: str | None = None,
                        options: EvalOptions | dict[str, Any] | None = None, timeout: float | None = None) -> Job:
        """Submit, then wait within one `timeout`; the job once finished, or in its latest state (check `job.finished`)."""
        budget = self._core.default_timeout if timeout is None else timeout
        deadline = self._core.deadline(budget)
        job = self.submit(reference, candidate, problem_id=problem_id, completion=completion, options=options,
                          wait_s=min(SUBMIT_WAIT_S, budget), timeout=budget)
        if not job.finished:
            job = self.wait(job.id, timeout=max(0.001, deadline - self._core.clock()))
        return job

    def evaluate(self, reference: str | None = None, candidate: str | None = None, *, problem_id: str | None = None,
                 completion: str | None = None, options: EvalOptions | dict[str, Any] | None = None,
                 timeout: float | None = None) -> EvalResult:
        """Submit and wait; the verdict, or EvaluationTimeoutError / JobFailedError."""
        budget = self._core.default_timeout if timeout is None else timeout
        job = self.submit_and_wait(reference, candidate, problem_id=problem_id, completion=completion,
                                   options=options, timeout=budget)
        return _result_of(job, budget)

    def cancel(self, job_id: str, *, timeout: float | None = None) -> Job:
        return self._send(proto.cancel_call(job_id), self._core.deadline(timeout))

    def register_problem(self, reference: str, *, profile: str | None = None,
                         timeout: float | None = None) -> Problem:
        """Register a reference; `profile` ("partial"/"full") is its jobs' default policy profile."""
        return self._send(proto.register_problem_call(reference, profile), self._core.deadline(timeout))

    def get_problem(self, problem_id: str, *, timeout: float | None = None) -> Problem:
        return self._send(proto.get_problem_call(problem_id), self._core.deadline(timeout))


class AsyncKernelJudgeClient:
    """asyncio client with the same methods as `KernelJudgeClient` (awaitable)."""

    def __init__(self, base_url: str | None = None, api_key: str | None = None, *, timeout: float = 600.0,
                 request_timeout: float = 30.0, retry: proto.RetryPolicy | None = None,
                 poll: proto.PollSchedule | None = None, batch_size: int = 64,
                 transport: httpx.AsyncBaseTransport | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep):
        self._core = _ClientCore(base_url, api_key, timeout=timeout, request_timeout=request_timeout, retry=retry,
                                 poll=poll, batch_size=batch_size, clock=clock)
        self._sleep = sleep
        self._http = httpx.AsyncClient(base_url=self._core.base_url, headers=self._core.headers(),
                                       transport=transport)

    async def __aenter__(self) -> AsyncKernelJudgeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    @property
    def clock(self) -> Callable[[], float]:
        """The monotonic clock deadlines are measured on."""
        return self._core.clock

    @property
    def base_url(self) -> str:
        return self._core.base_url

    async def _send(self, call: proto.Call[T], deadline: float) -> T:
        attempt = 0
        while True:
            if (expired := self._core.expired(call, deadline)) is not None:
                raise expired
            attempt += 1
            response, failure = None, None
            try:
                response = await self._http.request(call.method, call.path, params=call.params, json=call.json,
                                                    headers=call.headers,
                                                    timeout=self._core.attempt_timeout(call, deadline))
            except httpx.TransportError as exc:
                failure = exc
            done, value, delay = self._core.after_attempt(call, attempt, deadline, response, failure)
            if done:
                return value  # type: ignore[return-value]
            await self._sleep(delay)

    async def submit(self, reference: str | None = None, candidate: str | None = None, *,
                     problem_id: str | None = None, completion: str | None = None,
                     options: EvalOptions | dict[str, Any] | None = None, priority: int | None = None,
                     callback_url: str | None = None, idempotency_key: str | None = None,
                     wait_s: float | None = None, timeout: float | None = None) -> Job:
        item = make_item(reference, candidate, problem_id=problem_id, completion=completion, options=options,
                         priority=priority, callback_url=callback_url)
        call = proto.submit_call(item, wait_s=wait_s, idempotency_key=idempotency_key)
        return await self._send(call, self._core.deadline(timeout))

    async def submit_many(self, items: Sequence[SubmitItem | dict[str, Any]], *, timeout: float | None = None
                          ) -> list[BatchEntry]:
        deadline = self._core.deadline(timeout)
        entries: list[BatchEntry] = []
        for offset, chunk in enumerate(proto.chunks(self._core.submit_items(items), self._core.batch_size)):
            got = await self._send(proto.submit_batch_call(chunk), deadline)
            entries += _reindex(got, offset * self._core.batch_size)
        return entries

    async def get(self, job_id: str, *, timeout: float | None = None) -> Job:
        return await self._send(proto.get_call(job_id), self._core.deadline(timeout))

    async def get_many(self, job_ids: Sequence[str], *, timeout: float | None = None) -> list[Job]:
        deadline = self._core.deadline(timeout)
        jobs: list[Job] = []
        for chunk in proto.chunks(list(job_ids), proto.IDS_PER_READ):
            jobs += await self._send(proto.get_many_call(chunk), deadline)
        return _ordered(job_ids, jobs)

    async def wait(self, job_id: str, *, timeout: float | None = None) -> Job:
        """The job once finished, or in its latest state when `timeout` passes (check `job.finished`)."""
        return (await self.wait_many([job_id], timeout=timeout))[0]

    async def wait_many(self, job_ids: Sequence[str], *, timeout: float | None = None,
                        on_progress: ProgressCallback | None = None) -> list[Job]:
        """As `KernelJudgeClient.wait_many`: the latest states at `timeout`, never an exception for it."""
        waiting = _Waiting(self._core, job_ids, timeout)
        while True:
            for chunk in waiting.pending_chunks():
                try:
                    waiting.record(await self.get_many(chunk, timeout=waiting.read_timeout()))
                except (ServiceUnavailableError, ApiError) as error:
                    waiting.read_failed(error)
                    break
            delay = waiting.next_delay(on_progress)
            if delay is None:
                return waiting.jobs()
            await self._sleep(delay)

    async def submit_and_wait(self, reference: str | None = None, candidate: str | None = None, *,
                              problem_id: str | None = None, completion: str | None = None,
                              options: EvalOptions | dict[str, Any] | None = None, timeout: float | None = None
                              ) -> Job:
        budget = self._core.default_timeout if timeout is None else timeout
        deadline = self._core.deadline(budget)
        job = await self.submit(reference, candidate, problem_id=problem_id, completion=completion, options=options,
                                wait_s=min(SUBMIT_WAIT_S, budget), timeout=budget)
        if not job.finished:
            job = await self.wait(job.id, timeout=max(0.001, deadline - self._core.clock()))
        return job

    async def evaluate(self, reference: str | None = None, candidate: str | None = None, *,
                       problem_id: str | None = None, completion: str | None = None,
                       options: EvalOptions | dict[str, Any] | None = None, timeout: float | None = None
                       ) -> EvalResult:
        budget = self._core.default_timeout if timeout is None else timeout
        job = await self.submit_and_wait(reference, candidate, problem_id=problem_id, completion=completion,
                                         options=options, timeout=budget)
        return _result_of(job, budget)

    async def cancel(self, job_id: str, *, timeout: float | None = None) -> Job:
        return await self._send(proto.cancel_call(job_id), self._core.deadline(timeout))

    async def register_problem(self, reference: str, *, profile: str | None = None,
                               timeout: float | None = None) -> Problem:
        return await self._send(proto.register_problem_call(reference, profile), self._core.deadline(timeout))

    async def get_problem(self, problem_id: str, *, timeout: float | None = None) -> Problem:
        return await self._send(proto.get_problem_call(problem_id), self._core.deadline(timeout))
