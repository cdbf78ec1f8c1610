"""Exceptions raised by the client. Every message says what went wrong and what to do."""

from __future__ import annotations


class KernelJudgeError(Exception):
    """Base class of the client's errors."""


class ApiError(KernelJudgeError):
    """The server answered with an error status that retrying will not fix (4xx, or 5xx after retries)."""

    def __init__(self, status_code: int, message: str, *, kind: str | None = None, retry_after: float | None = None):
        super().__init__(f"HTTP {status_code}: {message}")
        self.status_code = status_code
        self.message = message
        self.kind = kind
        self.retry_after = retry_after


class ServiceUnavailableError(KernelJudgeError):
    """The server could not be reached, or stayed overloaded (429/503), until the call's deadline."""


class EvaluationTimeoutError(KernelJudgeError):
    """`evaluate` waited until its deadline and the job had not finished."""

    def __init__(self, job_id: str, status: str, timeout: float):
        super().__init__(
            f"job {job_id} is still {status} after {timeout:.0f}s; wait longer with client.wait({job_id!r}) "
            "or raise the timeout"
        )
        self.job_id = job_id


class JobFailedError(KernelJudgeError):
    """The service could not produce an evaluation (job `failed` or `cancelled`)."""

    def __init__(self, job_id: str, status: str, reason: str | None):
        super().__init__(f"job {job_id} {status}: {reason or 'no reason given by the server'}")
        self.job_id = job_id
        self.reason = reason
