"""The embedded launcher: one device lane per visible GPU (or CPU worker) in the API process itself.

Each lane is fed by a thread that claims the next queued job whenever the lane has room, by the
lane's claim policy (worker/jobs/claim_policy.py: a problem's jobs together while its judge is
loaded, fair to other problems and keys, priorities first); the pipeline (worker/jobs/pipeline.py)
builds ahead on CPU threads and runs the device stages, timing alone on its GPU. The engine runs user code in sandboxed subprocesses; this process never
imports CUDA. Jobs left in flight by a previous run of this node, in any pipeline stage, are
requeued once at start (then failed), see JobStore.recover_orphans. What a finished job means to the
API (metrics, waiters, callbacks) is the `on_finished` hook it passes in.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable

from worker.config.tree import KernelJudgeConfig
from worker.jobs.engine_call import EngineCalls, WorkerIdentity
from worker.jobs.pipeline import DeviceLane, JobPipeline, LaneHealth, PipelineConfig
from worker.jobs.store import Job, JobStore

log = logging.getLogger(__name__)

IDLE_RECHECK_S = 1.0  # also picks up jobs queued by another API process sharing the store


def embedded_prefix() -> str:
    return f"embedded@{socket.gethostname()}:"


def plan_identities(device: str, count: int | None) -> list[WorkerIdentity]:
    """One worker per visible GPU (device auto/cuda), else `count` (default 1) CPU workers."""
    from worker.jobs.distributed.devices import visible_gpus

    gpus = visible_gpus() if device in ("auto", "cuda") else []
    if device == "cuda" and not gpus:
        raise RuntimeError("--device cuda was asked for but no GPU is visible (nvidia-smi -L lists none)")
    prefix = embedded_prefix()
    if gpus:
        chosen = gpus if count is None else gpus[:count]
        return [WorkerIdentity(f"{prefix}gpu{g}", "cuda", g) for g in chosen]
    return [WorkerIdentity(f"{prefix}cpu{i}", "cpu", None) for i in range(1 if count is None else count)]


class EmbeddedLauncher:
    """The embedded launcher (a Launcher, launcher.py): one feeder thread per device lane, claiming queued jobs
    into the pipeline."""

    mode = "embedded"

    def __init__(self, store: JobStore, identities: list[WorkerIdentity], on_finished: Callable[[Job], None],
                 config: PipelineConfig | None = None, engine: EngineCalls | None = None,
                 process_config: KernelJudgeConfig | None = None):
        self.store = store
        self.identities = identities
        self.pipeline = JobPipeline(store, identities, config, engine=engine, on_finished=on_finished,
                                    process_config=process_config)
        self._stop = threading.Event()
        self._wakeups = [threading.Event() for _ in identities]
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        self.store.recover_orphans(embedded_prefix())
        self.pipeline.start()
        for lane, wakeup in zip(self.pipeline.lanes, self._wakeups, strict=True):
            thread = threading.Thread(target=self._feed, args=(lane, wakeup), name=f"{lane.identity.name}/feed",
                                      daemon=True)
            thread.start()
            self._threads.append(thread)

    def submitted(self, jobs: list[Job]) -> None:
        """The feeders claim from the store, in their lanes' order, not these jobs in particular: wake them."""
        self.wake()

    def wake(self) -> None:
        for wakeup in self._wakeups:
            wakeup.set()

    def workers_alive(self) -> int:
        return sum(t.is_alive() for t in self._threads)

    def lane_health(self) -> list[LaneHealth]:
        """Each lane's progress as the watchdog sees it (worker/jobs/watchdog.py): /v1/ready and /metrics."""
        return self.pipeline.health()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self.wake()
        self.pipeline.stop(timeout_s)
        for thread in self._threads:
            thread.join(timeout_s)

    def _feed(self, lane: DeviceLane, wakeup: threading.Event) -> None:
        identity = lane.identity
        while not self._stop.is_set():
            wakeup.clear()
            try:
                started = lane.admit(lane.claim_next)
            except Exception:
                log.exception("%s could not read the job store; retrying", identity.name)
                self._stop.wait(IDLE_RECHECK_S)
                continue
            if started is None and not self._stop.is_set():
                wakeup.wait(IDLE_RECHECK_S)
