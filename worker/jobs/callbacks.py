"""POST a finished job to its `callback_url`, signed with HMAC-SHA256, with bounded retries.

Headers: `X-KernelJudge-Timestamp: <unix seconds>` and
`X-KernelJudge-Signature: sha256=<hex HMAC of "<timestamp>.<raw body>">` keyed by
KERNELJUDGE_CALLBACK_SECRET (CallbackConfig, from the configuration's jobs section). Receivers recompute
the HMAC over the raw body and compare.

Callbacks need a secret: without one nothing is sent (and the API refuses `callback_url`). Each
attempt checks the destination again after resolving it and connects to the address it checked
(callback_target.py); redirects are not followed, and proxy variables are ignored.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import httpx

from worker.config.jobs_section import CallbackConfig
from worker.jobs.callback_target import (
    CallbackRefused,
    Resolver,
    check_destination,
    system_resolver,
)
from worker.jobs.store.json_text import to_json_text
from worker.jobs.store.records import Job, public_job

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-KernelJudge-Signature"
TIMESTAMP_HEADER = "X-KernelJudge-Timestamp"
DEFAULT_ATTEMPTS = 4
DEFAULT_TIMEOUT_S = 5.0


def sign(secret: str, timestamp: str, body: bytes) -> str:
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def deliver(url: str, payload: dict[str, Any], config: CallbackConfig, *, attempts: int = DEFAULT_ATTEMPTS,
            timeout_s: float = DEFAULT_TIMEOUT_S, backoff_s: float = 0.5,
            resolve: Resolver = system_resolver) -> bool:
    """Try up to `attempts` times (exponential backoff); True once the receiver answers 2xx."""
    if not config.enabled:
        log.error("callback to %s not sent: no KERNELJUDGE_CALLBACK_SECRET is configured to sign it", url)
        return False
    body = to_json_text(payload).encode()
    for attempt in range(1, attempts + 1):
        try:
            outcome = _post_once(url, body, config, timeout_s, resolve)
        except CallbackRefused as refused:
            if refused.final:
                log.error("callback to %s not sent: %s", url, refused)
                return False
            outcome = str(refused)
        if outcome is None:
            return True
        log.warning("callback to %s failed (attempt %d/%d): %s", url, attempt, attempts, outcome)
        if attempt < attempts:
            time.sleep(backoff_s * 2 ** (attempt - 1))
    log.error("callback to %s abandoned after %d attempts", url, attempts)
    return False


def _post_once(url: str, body: bytes, config: CallbackConfig, timeout_s: float, resolve: Resolver) -> str | None:
    """One POST to the address checked just now; None when the receiver took it, else why not.
    Raises CallbackRefused (final) for a destination or an answer that retrying cannot change."""
    destination = check_destination(url, config.allow, resolve)
    timestamp = str(int(time.time()))
    headers = {"Host": destination.host, "Content-Type": "application/json", TIMESTAMP_HEADER: timestamp,
               SIGNATURE_HEADER: sign(config.secret, timestamp, body)}
    extensions = {"sni_hostname": destination.sni_hostname} if destination.sni_hostname else {}
    try:
        with httpx.Client(timeout=timeout_s, follow_redirects=False, trust_env=False) as client:
            response = client.post(destination.url, content=body, headers=headers, extensions=extensions)
    except httpx.HTTPError as exc:
        return f"{type(exc).__name__}: {exc}"
    if 200 <= response.status_code < 300:
        return None
    if response.is_redirect:
        raise CallbackRefused(f"the receiver answered HTTP {response.status_code} (a redirect); callbacks do "
                              "not follow redirects")
    return f"HTTP {response.status_code}"


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

    def __init__(self, config: CallbackConfig, threads: int = 4, resolve: Resolver = system_resolver) -> None:
        self.config = config
        self._resolve = resolve
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="callback")

    def job_finished(self, job: Job) -> Future[bool] | None:
        callback = job_callback(job)
        if callback is None:
            return None
        return self._pool.submit(deliver, *callback, self.config, resolve=self._resolve)

    def stop(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
