"""The two launchers (worker/jobs/launchers/) are the one interface the app holds, and keep its promises: started,
told of a queued job, it gets the job to a worker; it reports its workers and lanes; it stops. The Celery one runs
on kombu's in-memory transport here, so no broker is needed, and its message is read back from that queue."""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from pipeline.fakes import WAIT_S, FakeEngine, add_job
from worker.config.jobs_section import DEFAULT_JOB_TIME_LIMIT_S
from worker.jobs.distributed.celery_app import QUEUE_NAME, TASK_NAME
from worker.jobs.engine_call import EngineCalls, WorkerIdentity
from worker.jobs.launchers.celery_launcher import CeleryLauncher
from worker.jobs.launchers.embedded_launcher import EmbeddedLauncher
from worker.jobs.launchers.launcher import Launcher, LaunchError
from worker.jobs.pipeline import LaneHealth, PipelineConfig
from worker.jobs.store import Job, JobStore

# Each test needs an empty store of its own: tests/conftest.py's `store`, on SQLite only.
pytestmark = pytest.mark.sqlite_store


@dataclass
class Case:
    launcher: Launcher
    taken: Callable[[Job], None]  # returns once the submitted job reached a worker (or its queue)
    alive_after_start: int


def _embedded(store: JobStore) -> Case:
    finished: dict[str, Job] = {}
    done = threading.Condition()

    def on_finished(job: Job) -> None:
        with done:
            finished[job.id] = job
            done.notify_all()

    def taken(job: Job) -> None:
        with done:
            assert done.wait_for(lambda: job.id in finished, WAIT_S), "the embedded lane never ran the job"
        assert finished[job.id].status == "done"

    fake = FakeEngine()
    launcher = EmbeddedLauncher(store, [WorkerIdentity("embedded@launcher-test:cpu0", "cpu")], on_finished,
                                config=PipelineConfig(device_concurrency=1, prepare_ahead=1, prepare_threads=1),
                                engine=EngineCalls(prepare=fake.prepare, execute=fake.execute))
    return Case(launcher, taken, alive_after_start=1)


def _celery() -> Case:
    launcher = CeleryLauncher("memory://", DEFAULT_JOB_TIME_LIMIT_S)

    def taken(job: Job) -> None:
        # What a `kerneljudge worker` would receive: the task named by the wire protocol, for this job.
        with launcher.celery.connection_for_read() as connection:
            queue = connection.SimpleQueue(QUEUE_NAME)
            try:
                message = queue.get(timeout=WAIT_S)
                message.ack()
            finally:
                queue.close()
        assert message.headers["task"] == TASK_NAME and message.payload[0] == [job.id]

    return Case(launcher, taken, alive_after_start=0)  # no Celery worker answers the ping here


@pytest.fixture(params=["embedded", "celery"])
def case(request, store) -> Iterator[Case]:
    made = _embedded(store) if request.param == "embedded" else _celery()
    yield made
    made.launcher.stop()


def test_both_launchers_implement_the_interface(case):
    launcher = case.launcher
    assert isinstance(launcher, Launcher)
    assert launcher.mode in ("embedded", "celery")
    # Every method of the interface takes what the interface passes (runtime_checkable checks only names).
    for name, member in inspect.getmembers(Launcher, inspect.isfunction):
        if not name.startswith("_"):
            arguments = [None] * (len(inspect.signature(member).parameters) - 1)  # all but self
            inspect.signature(getattr(launcher, name)).bind(*arguments)


def test_a_launcher_starts_gets_a_submitted_job_to_a_worker_reports_and_stops(case, store):
    launcher = case.launcher
    launcher.start()
    job = add_job(store, "ok")
    launcher.submitted([job])
    case.taken(job)
    assert launcher.workers_alive() == case.alive_after_start
    lanes = launcher.lane_health()
    assert all(isinstance(lane, LaneHealth) for lane in lanes)
    assert [lane.name for lane in lanes] == [identity.name for identity in launcher.identities]
    launcher.stop()
    assert launcher.workers_alive() == 0


def test_the_celery_launcher_says_when_the_broker_takes_no_job(store, monkeypatch):
    launcher = CeleryLauncher("memory://", DEFAULT_JOB_TIME_LIMIT_S)

    def unreachable(*args, **kwargs):
        raise ConnectionRefusedError("no broker")

    monkeypatch.setattr(launcher.celery, "send_task", unreachable)
    with pytest.raises(LaunchError, match="broker"):
        launcher.submitted([add_job(store, "ok")])


def test_the_task_a_message_names_is_the_one_workers_run():
    """The task and queue names are the wire protocol between the API and `kerneljudge worker`."""
    from worker.jobs.distributed import tasks

    assert (TASK_NAME, QUEUE_NAME) == ("kerneljudge.evaluate", "kerneljudge")
    assert tasks.evaluate_job.name == TASK_NAME


@pytest.mark.parametrize("broker_url, expected", [(None, EmbeddedLauncher), ("memory://", CeleryLauncher)])
def test_the_app_holds_the_launcher_its_settings_choose(tmp_path, broker_url, expected):
    from service.helpers import make_config

    from app.main import create_app

    app = create_app(make_config(tmp_path, broker_url=broker_url))
    try:
        assert type(app.state.launcher) is expected
        assert app.state.submitter.launcher is app.state.launcher
    finally:
        app.state.store.close()
