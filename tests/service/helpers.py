"""The real app served by uvicorn on loopback (embedded backend, CPU), reached with httpx."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import uvicorn

from app.main import create_app
from worker.config.api_keys import parse_keys
from worker.config.api_section import ApiSection
from worker.config.jobs_section import CallbackConfig, JobsSection
from worker.config.pipeline_section import PipelineSection
from worker.config.tree import KernelJudgeConfig

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


def start_server(config: KernelJudgeConfig) -> LiveServer:
    app = create_app(config)
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


def make_config(data_dir: Path, *, callbacks: CallbackConfig | None = None, **overrides) -> KernelJudgeConfig:
    """A test server's configuration, read from no environment: the test keys, a CPU server; `overrides` are
    fields of the API, the jobs (data_dir, database_url, broker_url) or the pipeline section (stall_s),
    `callbacks` the callbacks'."""
    jobs_fields, pipeline_fields = set(JobsSection.model_fields), set(PipelineSection.model_fields)
    jobs = {"data_dir": data_dir, **{k: v for k, v in overrides.items() if k in jobs_fields}}
    if callbacks is not None:
        jobs.update(callback_secret=callbacks.secret, callback_allow=callbacks.allow)
    pipeline = {k: v for k, v in overrides.items() if k in pipeline_fields}
    api = {"api_keys": parse_keys(KEYS), "device": "cpu", "local_workers": 0, "max_wait_s": 120.0,
           "reward_wait_s": 120.0,
           **{k: v for k, v in overrides.items() if k not in jobs_fields | pipeline_fields}}
    return KernelJudgeConfig(api=ApiSection.from_values(**api), jobs=JobsSection.from_values(**jobs),
                             pipeline=PipelineSection.from_values(**pipeline))


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
