"""How queued jobs reach a worker: embedded threads (default) or Celery over Redis."""

from __future__ import annotations

import logging

from app.executors import LocalWorkerPool, plan_identities
from app.metrics import ServiceMetrics
from app.waiting import JobEvents
from worker.config.tree import KernelJudgeConfig
from worker.jobs.callbacks import CallbackSender
from worker.jobs.store import Job, JobStore

log = logging.getLogger(__name__)


class DispatchError(Exception):
    """The job could not be handed to a worker (e.g. the broker is down)."""


class EmbeddedDispatcher:
    mode = "embedded"

    def __init__(self, store: JobStore, events: JobEvents, metrics: ServiceMetrics, callbacks: CallbackSender,
                 config: KernelJudgeConfig):
        self.identities = plan_identities(config.api.device, config.api.local_workers)
        self.events = events
        self.metrics = metrics
        self.callbacks = callbacks
        self.pool = LocalWorkerPool(store, self.identities, self._finished, process_config=config)

    @property
    def uses_gpus(self) -> bool:
        return any(identity.device == "cuda" for identity in self.identities)

    def start(self) -> None:
        self.pool.start()

    def stop(self) -> None:
        self.pool.stop()

    def submitted(self, jobs: list[Job]) -> None:
        self.pool.wake()

    def workers_alive(self) -> int:
        return self.pool.alive()

    def _finished(self, job: Job) -> None:
        self.metrics.observe_finished(job)
        self.events.notify()
        self.callbacks.job_finished(job)


class CeleryDispatcher:
    mode = "celery"

    def __init__(self, broker_url: str, job_time_limit_s: float):
        from worker.jobs.distributed.celery_app import make_celery

        self.celery = make_celery(broker_url, job_time_limit_s)

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def submitted(self, jobs: list[Job]) -> None:
        from worker.jobs.distributed.celery_app import TASK_NAME

        for job in jobs:
            try:
                self.celery.send_task(TASK_NAME, args=[job.id])
            except Exception as exc:
                log.exception("could not send job %s to the broker", job.id)
                raise DispatchError(f"the job queue (broker) is unreachable: {type(exc).__name__}") from exc

    def workers_alive(self) -> int:
        try:
            replies = self.celery.control.ping(timeout=1.0)
        except Exception:
            log.warning("celery ping failed", exc_info=True)
            return 0
        return len(replies or [])
