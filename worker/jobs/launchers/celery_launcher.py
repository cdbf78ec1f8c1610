"""The Celery launcher: each queued job is sent as one message over the Redis broker to `kerneljudge worker`.

The workers are other processes, on this host or others (worker/jobs/celery_cli.py starts them, one per GPU;
worker/jobs/distributed/tasks.py is what a message makes them do). The message's task and queue names
(worker/jobs/distributed/celery_app.py: TASK_NAME, QUEUE_NAME) are the wire protocol between API and workers.
Celery is imported only when this launcher is built, so that embedded mode never imports it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from worker.jobs.launchers.launcher import LaunchError

if TYPE_CHECKING:
    from worker.jobs.engine_call import WorkerIdentity
    from worker.jobs.pipeline import LaneHealth
    from worker.jobs.store import Job

log = logging.getLogger(__name__)


class CeleryLauncher:
    """The Celery launcher (a Launcher, launcher.py). Nothing of it runs in this process but the sending."""

    mode = "celery"
    identities: tuple[WorkerIdentity, ...] = ()  # the workers are other processes: the dashboard knows them from the jobs they take

    def __init__(self, broker_url: str, job_time_limit_s: float):
        from worker.jobs.distributed.celery_app import make_celery

        self.celery = make_celery(broker_url, job_time_limit_s)

    def start(self) -> None:
        pass  # the workers are started by `kerneljudge worker`, not by the API

    def stop(self) -> None:
        pass  # nor stopped by it: they finish their jobs and take the next messages

    def submitted(self, jobs: list[Job]) -> None:
        from worker.jobs.distributed.celery_app import TASK_NAME

        for job in jobs:
            try:
                self.celery.send_task(TASK_NAME, args=[job.id])
            except Exception as exc:
                log.exception("could not send job %s to the broker", job.id)
                raise LaunchError(f"the job queue (broker) is unreachable: {type(exc).__name__}") from exc

    def workers_alive(self) -> int:
        try:
            replies = self.celery.control.ping(timeout=1.0)
        except Exception:
            log.warning("celery ping failed", exc_info=True)
            return 0
        return len(replies or [])

    def lane_health(self) -> list[LaneHealth]:
        return []  # the lanes, and their watchdogs, live in the worker processes
