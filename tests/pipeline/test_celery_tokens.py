"""A Celery message is a token for one claim by the lane's policy: every job runs once, none is left
queued, and a message for a job another message is running never claims that job again."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import update

from pipeline.fakes import FakeEngine, add_job
from worker.jobs.distributed.tasks import claim_for_message
from worker.jobs.engine_call import EngineCalls, WorkerIdentity
from worker.jobs.pipeline import JobPipeline, PipelineConfig
from worker.jobs.store import JobStore
from worker.jobs.store.schema import JobRow

LANE = WorkerIdentity(name="celery@test:1", device="cpu")


@pytest.fixture
def lane(tmp_path):
    store = JobStore(f"sqlite:///{tmp_path / 'jobs.db'}")
    engine = FakeEngine()
    pipeline = JobPipeline(store, [LANE], PipelineConfig(device_concurrency=1, prepare_ahead=1, prepare_threads=1),
                           engine=EngineCalls(prepare=engine.prepare, execute=engine.execute))
    yield pipeline.lanes[0]
    pipeline.stop(timeout_s=1)
    store.close()


def test_each_message_claims_one_job_and_every_job_is_claimed_once(lane):
    store = lane.pipeline.store
    jobs = [add_job(store, f"c{i}", problem=f"P{i % 2}") for i in range(6)]
    claimed = [claim_for_message(lane, job.id)[0] for job in reversed(jobs)]  # messages in any order
    assert sorted(job.id for job in claimed) == sorted(job.id for job in jobs)
    assert all(store.get(job.id).attempts == 1 for job in jobs)
    extra, why = claim_for_message(lane, jobs[0].id)  # a message delivered twice finds nothing left
    assert extra is None and "no queued job" in why


def test_a_message_for_a_job_another_message_runs_claims_another_job(lane):
    store = lane.pipeline.store
    first, second = add_job(store, "a", problem="P"), add_job(store, "b", problem="P")
    running, _ = store.claim(first.id, "celery@other:2", None)
    job, _ = claim_for_message(lane, first.id)
    assert job.id == second.id
    assert store.get(first.id).attempts == running.attempts == 1, "not taken from the worker running it"


def test_a_job_left_in_flight_past_the_time_limit_is_run_again(lane):
    store = lane.pipeline.store
    job = add_job(store, "a")
    store.claim(job.id, "celery@lost-host:3", None)
    with store._session() as s, s.begin():  # its worker started it longer ago than any job may run
        s.execute(update(JobRow).where(JobRow.id == job.id).values(building_at=time.time() - 10 * 24 * 3600))
    again, why = claim_for_message(lane, job.id)
    assert again.id == job.id and again.attempts == 2, why
