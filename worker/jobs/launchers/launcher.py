"""The launcher interface: what the API process holds to get its queued jobs run, whichever way they run.

An API process holds exactly one launcher, chosen at start-up (app/main.py, by whether a broker is configured):

  embedded_launcher.py  `EmbeddedLauncher`: the device lanes live in this process, each fed by a thread that
                        claims the next queued job from the store (`kerneljudge serve` without a broker);
  celery_launcher.py    `CeleryLauncher`: one message per job over a Redis broker to the Celery workers of
                        `kerneljudge worker`, each running one lane in its own process
                        (worker/jobs/distributed/: the Celery app, its task and the worker processes).

Either way a job is stored `queued` before its launcher hears of it, a worker claims it from the store and
records the outcome there, so the API reads results the same way for both. A launcher says only that there
are jobs to claim, and reports what it can see of its workers for /v1/ready, /metrics and the dashboard.
There is no cancel here: a queued job is cancelled in the store, and a claimed one cannot be.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from worker.jobs.engine_call import WorkerIdentity
    from worker.jobs.pipeline import LaneHealth
    from worker.jobs.store import Job


class LaunchError(Exception):
    """The jobs could not be handed to a worker (e.g. the broker is down); the caller fails them."""


@runtime_checkable
class Launcher(Protocol):
    """How queued jobs reach workers. Implemented by EmbeddedLauncher and CeleryLauncher."""

    @property
    def mode(self) -> str:
        """Which launcher this is, "embedded" or "celery", as /v1/ready and the dashboard show it."""
        ...

    @property
    def identities(self) -> Sequence[WorkerIdentity]:
        """The workers this process runs, known before they take a job (none in Celery mode: its workers are
        other processes, known to the API only through the jobs they take)."""
        ...

    def start(self) -> None:
        """Start what runs in this process (called once, before the first request is served)."""
        ...

    def stop(self) -> None:
        """Stop what runs in this process (at shutdown)."""
        ...

    def submitted(self, jobs: list[Job]) -> None:
        """These jobs were stored `queued`: have them claimed. Raises LaunchError when they cannot be."""
        ...

    def workers_alive(self) -> int:
        """Workers that can take a job now (0: none; the API is then not ready)."""
        ...

    def lane_health(self) -> list[LaneHealth]:
        """The watchdog's view of the device lanes in this process (worker/jobs/watchdog.py), for /v1/ready and
        /metrics; none in Celery mode, whose lanes live in the worker processes."""
        ...
