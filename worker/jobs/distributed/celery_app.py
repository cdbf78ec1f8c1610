"""Celery application for distributed workers (Redis broker).

Reliability settings, and why:
  acks_late                          a message is acknowledged only after the job finished.
  prefetch 1                         a worker process takes no more messages than its pipeline
                                     lane holds (its thread pool's size, see worker_main.py).
  visibility_timeout > hard limit    Redis re-delivers an unacknowledged message only after a
                                     job could not possibly still be running (a whole host lost).
  soft/hard time limits              the soft limit fails a stuck job (enforced by the task
                                     itself: the thread pool has no time limits).
When a worker process dies, `kerneljudge worker` requeues its jobs in the store (every pipeline
stage) and sends them again at once; the job store's attempt counter turns "delivered again"
into "retried once, then failed".
Celery's own result backend is unused: results live in the job store.
"""

from __future__ import annotations

from celery import Celery

TASK_NAME = "kerneljudge.evaluate"
QUEUE_NAME = "kerneljudge"
DEFAULT_BROKER_URL = "redis://127.0.0.1:6379/0"


def time_limits(job_time_limit_s: float) -> tuple[float, float, float]:
    """(soft limit, hard limit, broker visibility timeout) in seconds.

    The hard limit is KERNELJUDGE_JOB_TIME_LIMIT_S (the configuration's jobs section); the visibility
    timeout is longer than it.
    """
    hard = job_time_limit_s
    soft = max(hard - 60.0, hard * 0.9)
    visibility = hard * 2 + 300.0
    return soft, hard, visibility


def make_celery(broker_url: str, job_time_limit_s: float, app: Celery | None = None) -> Celery:
    """A Celery app for this broker and time limit (`app`, when given, is configured in place)."""
    soft, hard, visibility = time_limits(job_time_limit_s)
    app = app if app is not None else Celery("kerneljudge")
    app.conf.update(
        broker_url=broker_url,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        worker_concurrency=1,
        task_soft_time_limit=soft,
        task_time_limit=hard,
        broker_transport_options={"visibility_timeout": visibility},
        task_default_queue=QUEUE_NAME,
        task_serializer="json",
        accept_content=["json"],
        task_ignore_result=True,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
    )
    app.conf.include = ["worker.jobs.distributed.tasks"]
    return app


# The worker processes' instance, which the task registers on (tasks.py); worker_main.py configures it
# with make_celery from the configuration its process loaded.
celery_app = Celery("kerneljudge")
