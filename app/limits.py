"""Rate limits (token buckets: per API key, and failed authentications per address) and the request
body size limit (ASGI middleware)."""

from __future__ import annotations

import ipaddress
import json
import threading
import time
from collections import OrderedDict
from typing import Any


class RateLimiter:
    """Token bucket per key: `rate` requests/s sustained, bursts up to `burst`. In-process.

    At most `max_keys` buckets are kept: past that, full buckets (the same as no bucket) are
    dropped, then the oldest, so keys an attacker invents cannot fill the memory."""

    def __init__(self, rate: float, burst: int, max_keys: int = 100_000):
        self.rate = rate
        self.burst = max(1, burst)
        self.max_keys = max_keys
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, last refill)
        self._lock = threading.Lock()

    def _tokens(self, key: str, now: float) -> float:
        tokens, last = self._buckets.get(key, (float(self.burst), now))
        return min(float(self.burst), tokens + (now - last) * self.rate)

    def acquire(self, key: str, cost: float = 1.0) -> float | None:
        """Take `cost` tokens; None if allowed, else seconds to wait before retrying."""
        if self.rate <= 0:
            return None
        now = time.monotonic()
        with self._lock:
            tokens = self._tokens(key, now)
            if tokens >= cost:
                self._buckets[key] = (tokens - cost, now)
                if len(self._buckets) > self.max_keys:
                    self._prune(now)
                return None
            self._buckets[key] = (tokens, now)
            return (cost - tokens) / self.rate

    def peek(self, key: str, cost: float = 1.0) -> float | None:
        """Like `acquire` without taking anything: None if `cost` tokens are there, else the wait."""
        if self.rate <= 0:
            return None
        with self._lock:
            tokens = self._tokens(key, time.monotonic())
        return None if tokens >= cost else (cost - tokens) / self.rate

    def _prune(self, now: float) -> None:
        for key in [k for k in self._buckets if self._tokens(k, now) >= self.burst]:
            del self._buckets[key]
        for key in list(self._buckets)[: max(0, len(self._buckets) - self.max_keys)]:
            del self._buckets[key]


class FailedAuthLimiter:
    """Failed authentications (missing or unknown key) per client address, with a global backstop.

    An address that used up its failures is refused (429) whatever key it sends, so guessing keys
    from one address is slow and a right guess looks like a wrong one; the exception is a key that
    already authenticated from that address before, so a flood from behind a shared address (one
    NAT) does not lock out the people already working there. Other addresses are not affected.
    The global bucket bounds the failures of all addresses together: past it a failure is answered
    429 instead of 401, but a valid key still gets in, so a flood from many addresses locks no one
    out. IPv6 clients count per /64 (one host usually holds a whole /64).
    """

    def __init__(self, rate: float, burst: int, global_rate: float, max_known: int = 100_000):
        self.per_address = RateLimiter(rate, burst)
        self.overall = RateLimiter(global_rate, max(10, int(global_rate * 10)))  # ten seconds' worth
        self.max_known = max_known
        self._known: OrderedDict[tuple[str, str], None] = OrderedDict()  # (address, key id), oldest first
        self._lock = threading.Lock()

    @staticmethod
    def address_key(host: str | None) -> str:
        try:
            address = ipaddress.ip_address(host or "")
        except ValueError:
            return host or "unknown"
        if isinstance(address, ipaddress.IPv6Address):
            if address.ipv4_mapped is not None:
                return str(address.ipv4_mapped)
            return str(ipaddress.IPv6Network((address, 64), strict=False))
        return str(address)

    def refusal(self, address: str, key_id: str | None) -> float | None:
        """Seconds until `address` may try keys again, None when this request may go on: the address
        has failures left, or `key_id` (the valid key it sent) authenticated from it before."""
        wait = self.per_address.peek(address)
        if wait is None or key_id is None:
            return wait
        with self._lock:
            return None if (address, key_id) in self._known else wait

    def succeeded(self, address: str, key_id: str) -> None:
        with self._lock:
            self._known[(address, key_id)] = None
            self._known.move_to_end((address, key_id))
            while len(self._known) > self.max_known:
                self._known.popitem(last=False)

    def failed(self, address: str) -> float | None:
        """Count one failure; seconds to wait when the service-wide budget is spent, else None."""
        self.per_address.acquire(address)
        return self.overall.acquire("all")


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
