"""The Celery task: claim a stored job into this process's pipeline and wait for its outcome.

A Celery worker process serves one device (CUDA_VISIBLE_DEVICES pinned by `kerneljudge worker`)
and runs the same pipeline as the embedded workers (worker/jobs/pipeline.py): its thread pool has one
thread per job the device's lane holds, so the broker hands it just enough messages to build
ahead while the GPU evaluates. A task returns (and its message is acknowledged) only when its job
finished. The engine (and torch) is imported lazily, only in the process that runs jobs.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from concurrent.futures import TimeoutError as FutureTimeout

from worker.jobs.pipeline import DeviceLane, JobPipeline, PipelineConfig
from worker.jobs.store import JobStore
from worker.jobs.store.callbacks import CallbackSender
from worker.jobs.store.runner import WorkerIdentity

from .celery_app import TASK_NAME, celery_app, time_limits

log = logging.getLogger(__name__)

_lock = threading.Lock()
_lane: DeviceLane | None = None


def worker_identity() -> WorkerIdentity:
    device = os.environ.get("KERNELJUDGE_WORKER_DEVICE", "cpu")
    gpu = os.environ.get("CUDA_VISIBLE_DEVICES") if device == "cuda" else None
    # The pid names this process: `kerneljudge worker` requeues its jobs when it dies.
    name = f"celery@{socket.gethostname()}:{os.getpid()}"
    return WorkerIdentity(name=name, device=device, gpu=gpu)


def process_lane() -> DeviceLane:
    """This process's device lane, started on first use (after Celery forked, if it did)."""
    global _lane
    with _lock:
        if _lane is None:
            store = JobStore()
            pipeline = JobPipeline(store, [worker_identity()], PipelineConfig.from_env(),
                                   on_finished=CallbackSender().job_finished)
            pipeline.start()
            _lane = pipeline.lanes[0]
        return _lane


# acks_late and reject_on_worker_lost come from make_celery's config (task_acks_late, ...).
@celery_app.task(name=TASK_NAME)
def evaluate_job(job_id: str) -> str:
    lane = process_lane()
    store = lane.pipeline.store
    identity = lane.identity
    why = "not claimed: the worker is stopping"
    claimed = None

    def claim():
        nonlocal why, claimed
        claimed, why = store.claim(job_id, identity.name, identity.gpu)
        return claimed

    started = lane.admit(claim)
    if started is None:
        log.info("job %s not run: %s", job_id, why)
        return why
    # Celery's time limits need the prefork pool; this thread pool enforces the soft limit here.
    soft_limit, _, _ = time_limits()
    try:
        final = started.result(timeout=soft_limit)
    except FutureTimeout:
        assert claimed is not None
        if store.fail(job_id, "the job exceeded the worker's time limit (KERNELJUDGE_JOB_TIME_LIMIT_S)",
                      attempt=claimed.attempts):
            final = store.get(job_id)
            if final is not None:
                lane.pipeline.finished(final)
        else:
            final = store.get(job_id)
    return final.status if final else "superseded"
