"""Embedded local workers: one thread per visible GPU (or one CPU worker), jobs claimed from the store.

Each thread runs one job at a time, so a GPU never has two jobs. The engine runs user code in
sandboxed subprocesses; this process never imports CUDA. Jobs left in flight by a previous run
of this node are requeued once at start (then failed), see JobStore.recover_orphans.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable

from worker.store import Job, JobStore
from worker.store.runner import WorkerIdentity, run_claimed_job

log = logging.getLogger(__name__)

IDLE_RECHECK_S = 1.0  # also picks up jobs queued by another API process sharing the store


def embedded_prefix() -> str:
    return f"embedded@{socket.gethostname()}:"


def plan_identities(device: str, count: int | None) -> list[WorkerIdentity]:
    """One worker per visible GPU (device auto/cuda), else `count` (default 1) CPU workers."""
    from worker.distributed.devices import visible_gpus

    gpus = visible_gpus() if device in ("auto", "cuda") else []
    if device == "cuda" and not gpus:
        raise RuntimeError("--device cuda was asked for but no GPU is visible (nvidia-smi -L lists none)")
    prefix = embedded_prefix()
    if gpus:
        chosen = gpus if count is None else gpus[:count]
        return [WorkerIdentity(f"{prefix}gpu{g}", "cuda", g) for g in chosen]
    return [WorkerIdentity(f"{prefix}cpu{i}", "cpu", None) for i in range(1 if count is None else count)]


class LocalWorkerPool:
    def __init__(self, store: JobStore, identities: list[WorkerIdentity], on_finished: Callable[[Job], None]):
        self.store = store
        self.identities = identities
        self.on_finished = on_finished
        self._stop = threading.Event()
        self._wakeups = [threading.Event() for _ in identities]
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        self.store.recover_orphans(embedded_prefix())
        for identity, wakeup in zip(self.identities, self._wakeups, strict=True):
            thread = threading.Thread(target=self._loop, args=(identity, wakeup), name=identity.name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def wake(self) -> None:
        for wakeup in self._wakeups:
            wakeup.set()

    def alive(self) -> int:
        return sum(t.is_alive() for t in self._threads)

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self.wake()
        for thread in self._threads:
            thread.join(timeout_s)  # a thread mid-job is abandoned; its job is requeued next start

    def _loop(self, identity: WorkerIdentity, wakeup: threading.Event) -> None:
        while not self._stop.is_set():
            wakeup.clear()
            try:
                job = self.store.claim_next(identity.name, identity.gpu)
            except Exception:
                log.exception("%s could not read the job store; retrying", identity.name)
                self._stop.wait(IDLE_RECHECK_S)
                continue
            if job is None:
                wakeup.wait(IDLE_RECHECK_S)
                continue
            try:
                final = run_claimed_job(self.store, job, identity)
            except Exception:
                log.exception("%s failed to record job %s", identity.name, job.id)
                self._safe_fail(job, "the worker failed to record this job's outcome; see the server log")
                final = self.store.get(job.id)
            if final is not None:
                try:
                    self.on_finished(final)
                except Exception:
                    log.exception("finish hook failed for job %s", job.id)

    def _safe_fail(self, job: Job, reason: str) -> None:
        try:
            self.store.fail(job.id, reason, attempt=job.attempts)
        except Exception:
            log.exception("could not mark job %s failed", job.id)
