"""The Celery task: claim a stored job, run it through the engine, record the outcome.

The engine (and torch) is imported lazily inside the task, i.e. only in the pool child that
runs jobs, never in the Celery parent.
"""

from __future__ import annotations

import logging
import os
import socket

from celery.exceptions import SoftTimeLimitExceeded

from worker.store import JobStore
from worker.store.callbacks import CallbackSender
from worker.store.runner import WorkerIdentity, run_claimed_job

from .celery_app import TASK_NAME, celery_app

log = logging.getLogger(__name__)

_store: JobStore | None = None
_callbacks: CallbackSender | None = None


def _job_store() -> JobStore:
    # One engine per pool process, created after the fork (connections must not cross a fork).
    global _store
    if _store is None:
        _store = JobStore()
    return _store


def _callback_sender() -> CallbackSender:
    # Threads are started in the pool process that runs jobs, after the fork.
    global _callbacks
    if _callbacks is None:
        _callbacks = CallbackSender()
    return _callbacks


def worker_identity() -> WorkerIdentity:
    device = os.environ.get("KERNELJUDGE_WORKER_DEVICE", "cpu")
    gpu = os.environ.get("CUDA_VISIBLE_DEVICES") if device == "cuda" else None
    name = f"celery@{socket.gethostname()}:{os.getpid()}"
    return WorkerIdentity(name=name, device=device, gpu=gpu)


# acks_late and reject_on_worker_lost come from make_celery's config (task_acks_late, ...).
@celery_app.task(name=TASK_NAME)
def evaluate_job(job_id: str) -> str:
    store = _job_store()
    identity = worker_identity()
    job, why = store.claim(job_id, identity.name, identity.gpu)
    if job is None:
        log.info("job %s not run: %s", job_id, why)
        return why
    try:
        final = run_claimed_job(store, job, identity)
    except SoftTimeLimitExceeded:
        store.fail(job_id, "the job exceeded the worker's time limit (KERNELJUDGE_JOB_TIME_LIMIT_S)",
                   attempt=job.attempts)
        final = store.get(job_id)
    if final is not None:
        _callback_sender().job_finished(final)
    return final.status if final else "missing"
