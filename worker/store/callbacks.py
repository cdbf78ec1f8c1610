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


def deliver_job(job: Job) -> bool:
    """Deliver a finished job's callback now (blocking); False when it has none or delivery failed."""
    callback = job_callback(job)
    return deliver(*callback) if callback else False
