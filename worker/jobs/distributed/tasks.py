"""The Celery task: claim a stored job into this process's pipeline and wait for its outcome.

A Celery worker process serves one device (CUDA_VISIBLE_DEVICES pinned by `kerneljudge worker`)
and runs the same pipeline as the embedded workers (worker/jobs/pipeline.py): its thread pool has one
thread per job the device's lane holds, so the broker hands it just enough messages to build
ahead while the GPU evaluates. A task returns (and its message is acknowledged) only when its job
finished; when the lane's watchdog (worker/jobs/watchdog.py) gives the job back, the task claims again. The engine (and torch) is imported lazily, only in the process that runs jobs.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from concurrent.futures import TimeoutError as FutureTimeout

from worker.config.tree import KernelJudgeConfig, load_config
from worker.jobs.callbacks import CallbackSender
from worker.jobs.distributed.celery_app import TASK_NAME, celery_app, time_limits
from worker.jobs.engine_call import WorkerIdentity
from worker.jobs.pipeline import DeviceLane, JobPipeline, LaneRestarted, PipelineConfig
from worker.jobs.store import JobStore, store_url

log = logging.getLogger(__name__)

_lock = threading.Lock()
_lane: DeviceLane | None = None
_config: KernelJudgeConfig | None = None  # the configuration worker_main loaded (use_config)


def use_config(config: KernelJudgeConfig) -> None:
    """The configuration this process's lane is made from (worker_main loads it once, before Celery starts)."""
    global _config
    _config = config


def worker_identity(config: KernelJudgeConfig) -> WorkerIdentity:
    device = config.pipeline.worker_device  # set by `kerneljudge worker` for each process it starts
    gpu = os.environ.get("CUDA_VISIBLE_DEVICES") if device == "cuda" else None
    # The pid names this process: `kerneljudge worker` requeues its jobs when it dies.
    name = f"celery@{socket.gethostname()}:{os.getpid()}"
    return WorkerIdentity(name=name, device=device, gpu=gpu)


def process_lane() -> DeviceLane:
    """This process's device lane, started on first use (after Celery forked, if it did)."""
    global _lane
    with _lock:
        if _lane is None:
            config = _config if _config is not None else load_config()
            store = JobStore(store_url(config.jobs))
            pipeline = JobPipeline(store, [worker_identity(config)], PipelineConfig.from_config(config),
                                   on_finished=CallbackSender(config.jobs.callbacks).job_finished,
                                   process_config=config)
            pipeline.start()
            _lane = pipeline.lanes[0]
        return _lane


def claim_for_message(lane: DeviceLane, job_id: str):
    """What one message makes this lane run: (job or None, why).

    A message is a token for one claim, not an order for its job: the lane claims by its claim policy
    (worker/jobs/claim_policy.py), grouping a problem's jobs on its judge like the embedded workers, so
    the job the message names may be run by another message's claim, and this one claims another.
    Every job has its message, and each message claims at most one job, so none is left behind. A named
    job in flight is normally another message's claim, running; only one in flight for longer than any
    job may run was left by a worker that died without its host's supervisor to requeue it (the broker
    delivers such a message again after its visibility timeout): it is run again or failed (JobStore.claim).
    """
    store = lane.pipeline.store
    named = store.get(job_id)
    if named is not None and named.status != "queued" and not named.terminal and named.building_at is not None \
            and time.time() - named.building_at > lane.pipeline.process_config.jobs.job_time_limit_s:
        return store.claim(job_id, lane.identity.name, lane.identity.gpu)
    job = lane.claim_next()
    if job is None:
        return None, "no queued job left: other messages' claims ran them"
    return job, "claimed" if job.id == job_id else f"claimed {job.id} by the lane's claim policy"


# acks_late and reject_on_worker_lost come from make_celery's config (task_acks_late, ...).
@celery_app.task(name=TASK_NAME)
def evaluate_job(job_id: str) -> str:
    lane = process_lane()
    why = "not claimed: the worker is stopping"
    claimed = None

    def claim():
        nonlocal why, claimed
        claimed, why = claim_for_message(lane, job_id)
        return claimed

    while True:
        started = lane.admit(claim)
        if started is None:
            log.info("job %s not run: %s", job_id, why)
            return why
        try:
            return _outcome(lane, started, claimed)
        except LaneRestarted:
            # The lane's watchdog gave the claimed job back to the queue: this message claims again (by the
            # lane's policy), so that every queued job still has a message's claim coming for it.
            log.warning("job %s went back to the queue when its lane restarted; claiming again",
                        claimed.id if claimed is not None else job_id)


def _outcome(lane: DeviceLane, started, claimed) -> str:
    """Wait for a claimed job's final record; LaneRestarted when its lane gave it back."""
    store = lane.pipeline.store
    # Celery's time limits need the prefork pool; this thread pool enforces the soft limit here.
    soft_limit, _, _ = time_limits(lane.pipeline.process_config.jobs.job_time_limit_s)
    try:
        final = started.result(timeout=soft_limit)
    except FutureTimeout:
        assert claimed is not None
        if store.fail(claimed.id, "the job exceeded the worker's time limit (KERNELJUDGE_JOB_TIME_LIMIT_S)",
                      attempt=claimed.attempts):
            final = store.get(claimed.id)
            if final is not None:
                lane.pipeline.finished(final)
        else:
            final = store.get(claimed.id)
    return final.status if final else "superseded"
