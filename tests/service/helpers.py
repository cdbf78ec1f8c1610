"""The real app served by uvicorn on loopback (embedded backend, CPU), reached with httpx."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import httpx
import uvicorn

from app.main import create_app
from app.settings import Settings, parse_keys

USER_KEY = "user-key-1"
OTHER_KEY = "user-key-2"
ADMIN_KEY = "admin-key"
KEYS = f"{USER_KEY},{OTHER_KEY},{ADMIN_KEY}:admin"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class LiveServer:
    server: uvicorn.Server
    thread: threading.Thread
    base_url: str

    def client(self, key: str | None = USER_KEY, timeout: float = 120.0) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)
        assert not self.thread.is_alive(), "uvicorn did not stop within 30 s"


def start_server(settings: Settings) -> LiveServer:
    app = create_app(settings)
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("test server did not start")
        time.sleep(0.02)
    return LiveServer(server, thread, f"http://127.0.0.1:{port}")


def make_settings(data_dir: Path, **overrides) -> Settings:
    base = Settings(api_keys=parse_keys(KEYS), data_dir=data_dir, device="cpu", local_workers=0,
                    max_wait_s=120.0, reward_wait_s=120.0)
    return replace(base, **overrides)



def poll_until(read: Callable[[], object], done: Callable[[object], bool], timeout_s: float = 180.0,
               interval_s: float = 0.1):
    """Call `read` until `done(value)` holds; fail after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = read()
        if done(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not reached within {timeout_s}s; last value: {value!r}")
        time.sleep(interval_s)
