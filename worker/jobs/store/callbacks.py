"""POST a finished job to its `callback_url`, signed with HMAC-SHA256, with bounded retries.

Headers: `X-KernelJudge-Timestamp: <unix seconds>` and
`X-KernelJudge-Signature: sha256=<hex HMAC of "<timestamp>.<raw body>">` keyed by
KERNELJUDGE_CALLBACK_SECRET. Receivers recompute the HMAC over the raw body and compare.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import httpx

from .records import Job, public_job

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-KernelJudge-Signature"
TIMESTAMP_HEADER = "X-KernelJudge-Timestamp"
DEFAULT_ATTEMPTS = 4
DEFAULT_TIMEOUT_S = 5.0


def callback_secret() -> str:
    return os.environ.get("KERNELJUDGE_CALLBACK_SECRET", "")


def sign(secret: str, timestamp: str, body: bytes) -> str:
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def deliver(url: str, payload: dict[str, Any], *, secret: str | None = None, attempts: int = DEFAULT_ATTEMPTS,
            timeout_s: float = DEFAULT_TIMEOUT_S, backoff_s: float = 0.5) -> bool:
    """Try up to `attempts` times (exponential backoff); True once the receiver answers 2xx."""
    secret = callback_secret() if secret is None else secret
    body = json.dumps(payload).encode()
    for attempt in range(1, attempts + 1):
        timestamp = str(int(time.time()))
        headers = {"Content-Type": "application/json", TIMESTAMP_HEADER: timestamp,
                   SIGNATURE_HEADER: sign(secret, timestamp, body)}
        try:
            response = httpx.post(url, content=body, headers=headers, timeout=timeout_s)
            if 200 <= response.status_code < 300:
                return True
            reason = f"HTTP {response.status_code}"
        except httpx.HTTPError as exc:
            reason = f"{type(exc).__name__}: {exc}"
        log.warning("callback to %s failed (attempt %d/%d): %s", url, attempt, attempts, reason)
        if attempt < attempts:
            time.sleep(backoff_s * 2 ** (attempt - 1))
    log.error("callback to %s abandoned after %d attempts", url, attempts)
    return False


def job_callback(job: Job) -> tuple[str, dict[str, Any]] | None:
    """(callback_url, payload) to POST for a finished job that asked for a callback, else None."""
    callback_url = job.submission.get("callback_url")
    if callback_url and job.terminal:
        return callback_url, public_job(job)
    return None


class CallbackSender:
    """Delivers callbacks on a few background threads: a slow or dead receiver (up to about
    20 s of retries) must not hold the worker, and with it a GPU. Best effort: the job itself
    is already stored and can be polled; a delivery still in flight when the process exits is lost."""

    def __init__(self, threads: int = 4) -> None:
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="callback")

    def job_finished(self, job: Job) -> Future[bool] | None:
        callback = job_callback(job)
        return self._pool.submit(deliver, *callback) if callback is not None else None

    def stop(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
