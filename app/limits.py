"""Per-key rate limiting (token bucket) and the request body size limit (ASGI middleware)."""

from __future__ import annotations

import json
import threading
import time
from typing import Any


class RateLimiter:
    """Token bucket per API key: `rate` requests/s sustained, bursts up to `burst`. In-process."""

    def __init__(self, rate: float, burst: int):
        self.rate = rate
        self.burst = max(1, burst)
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, last refill)
        self._lock = threading.Lock()

    def acquire(self, key: str, cost: float = 1.0) -> float | None:
        """Take `cost` tokens; None if allowed, else seconds to wait before retrying."""
        if self.rate <= 0:
            return None
        now = time.monotonic()
        with self._lock:
            tokens, last = self._buckets.get(key, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - last) * self.rate)
            if tokens >= cost:
                self._buckets[key] = (tokens - cost, now)
                return None
            self._buckets[key] = (tokens, now)
            return (cost - tokens) / self.rate


class BodySizeLimit:
    """Answer 413 when a request body is larger than `max_bytes` (declared or actually sent)."""

    def __init__(self, app, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    return await reply_json(send, 400, "Content-Length is not a number")
                if declared > self.max_bytes:
                    return await reply_json(send, 413, self._message())
        received = 0
        too_large = False
        response_started = False

        async def limited_receive():
            nonlocal received, too_large
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    too_large = True
                    raise _BodyTooLarge()
            return message

        async def tracking_send(message):
            nonlocal response_started
            if too_large:
                # The app turned the aborted read into its own error (FastAPI: 400); answer 413 instead.
                if message["type"] == "http.response.start" and not response_started:
                    response_started = True
                    await reply_json(send, 413, self._message())
                return
            if message["type"] == "http.response.start":
                response_started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except _BodyTooLarge:
            if not response_started:
                await reply_json(send, 413, self._message())
        except Exception:
            if too_large and not response_started:
                await reply_json(send, 413, self._message())
            else:
                raise

    def _message(self) -> str:
        return f"request body is larger than the limit of {self.max_bytes} bytes; send fewer or smaller items"


class _BodyTooLarge(Exception):
    pass


async def reply_json(send, status: int, detail: Any) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
