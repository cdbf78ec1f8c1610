"""Scheduling through the real store and pipeline (fake engine): interleaved submissions served one
problem at a time, fairness for a lone job behind 500 of another problem, and no job lost or recorded
twice when a lane restarts mid-batch."""

from __future__ import annotations

import random
import threading
from collections import Counter

import pytest

from pipeline.fakes import WAIT_S, FakeEngine, JudgeModel, add_job
from worker.jobs.engine_call import EngineCalls, WorkerIdentity
from worker.jobs.launchers.embedded_launcher import EmbeddedLauncher, embedded_prefix
from worker.jobs.pipeline import JobPipeline, PipelineConfig
from worker.jobs.store import Job, JobStore

# Each test needs an empty store of its own: tests/conftest.py's `store`, on SQLite only.
pytestmark = pytest.mark.sqlite_store

LANE = WorkerIdentity(name=f"{embedded_prefix()}cpu0", device="cpu")


class Finished:
    """Every finish the pipeline reported, counted per job."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.count: Counter[str] = Counter()

    def __call__(self, job: Job) -> None:
        with self.cond:
            self.count[job.id] += 1
            self.cond.notify_all()

    def wait_for(self, predicate) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: predicate(self.count), WAIT_S), f"only {len(self.count)} finished"


def _calls(engine: FakeEngine) -> EngineCalls:
    warm = engine.judges.warm if engine.judges is not None else None
    return EngineCalls(prepare=engine.prepare, execute=engine.execute, warm_problems=warm)


def _interleaved(store: JobStore, problems: int, per_problem: int) -> list[Job]:
    names = [f"P{p}" for p in range(problems) for _ in range(per_problem)]
    random.Random(16).shuffle(names)
    return [add_job(store, f"cand-{i}", problem=name) for i, name in enumerate(names)]


def test_interleaved_submissions_hit_one_judge_per_problem(store):
    # The CPU shape at a GPU's cache size: 8 problems interleaved, 4 judges kept per device.
    # One prepare thread, so that jobs become ready in the order they were claimed: with two, a prepare
    # held up on the store's lock lets the device run later problems' jobs past it (by design: the device
    # never idles behind a slow prepare), and by then that straggler's judge may have been evicted.
    engine = FakeEngine(JudgeModel(capacity=4))
    jobs = _interleaved(store, problems=8, per_problem=4)
    finished = Finished()
    pool = EmbeddedLauncher(store, [LANE], finished, config=PipelineConfig(device_concurrency=2, prepare_ahead=4,
                                                                           prepare_threads=1), engine=_calls(engine))
    pool.start()
    try:
        finished.wait_for(lambda count: len(count) == len(jobs))
    finally:
        pool.stop(timeout_s=WAIT_S)
    order: dict[str, int] = {}
    assert engine.judges.misses == 8, " ".join(str(order.setdefault(p, len(order))) for p in engine.problems_run)
    assert engine.judges.hits == 24


def test_claiming_in_submission_order_would_cycle_the_judges(store):
    """The same batch claimed oldest-first (the claim before problem-aware scheduling) misses far more."""
    engine = FakeEngine(JudgeModel(capacity=4))
    jobs = _interleaved(store, problems=8, per_problem=4)
    pipeline = JobPipeline(store, [LANE], PipelineConfig(device_concurrency=2, prepare_ahead=4, prepare_threads=2),
                           engine=_calls(engine))
    pipeline.start()
    lane = pipeline.lanes[0]
    try:
        futures = [lane.admit(lambda: store.claim_next(LANE.name, None)) for _ in jobs]
        assert all(f.result(WAIT_S).status == "done" for f in futures)
    finally:
        pipeline.stop(timeout_s=WAIT_S)
    assert engine.judges.misses > 16


def test_500_queued_jobs_of_one_problem_do_not_starve_a_single_job_of_another(store):
    engine = FakeEngine()
    for i in range(500):
        add_job(store, f"a-{i}", problem="A")
    lone = add_job(store, "lone", problem="X")
    finished = Finished()
    config = PipelineConfig(device_concurrency=1, prepare_ahead=1, prepare_threads=1, claim_burst=8)
    pool = EmbeddedLauncher(store, [LANE], finished, config=config, engine=_calls(engine))
    pool.start()
    try:
        finished.wait_for(lambda count: lone.id in count)
    finally:
        pool.stop(timeout_s=WAIT_S)
    before = engine.seen.executed.index("lone")
    assert before <= config.claim_burst + config.capacity, engine.seen.executed[:before + 1]


def test_no_job_is_lost_or_recorded_twice_when_a_lane_restarts_mid_batch(store):
    engine = FakeEngine()
    held = engine.hold("cand-3", "compare")  # on the device when its lane stops
    jobs = [add_job(store, f"cand-{i}", problem=f"P{i % 4}") for i in range(20)]
    finished = Finished()
    config = PipelineConfig(device_concurrency=2, prepare_ahead=2, prepare_threads=2)
    first = EmbeddedLauncher(store, [LANE], finished, config=config, engine=_calls(engine))
    first.start()
    engine.wait_for(lambda seen: seen.at_stage.get("cand-3") == "compare")
    first.stop(timeout_s=0)  # its device thread is abandoned mid-job, as when the process dies

    second = EmbeddedLauncher(store, [LANE], finished, config=config, engine=_calls(engine))
    second.start()  # recovers the first lane's jobs (the held one is in flight under its name)
    held.set()  # the abandoned attempt finishes now: its result must not be recorded
    try:
        finished.wait_for(lambda count: len(count) == len(jobs) and all(
            store.get(job.id).status == "done" for job in jobs))
        engine.wait_for(lambda seen: seen.executed.count("cand-3") == 2)
    finally:
        held.set()
        second.stop(timeout_s=WAIT_S)
    final = {job.id: store.get(job.id) for job in jobs}
    assert {job.status for job in final.values()} == {"done"}
    assert all(count == 1 for count in finished.count.values()) and len(finished.count) == len(jobs)
    assert final[jobs[3].id].attempts == 2, "run again after its lane stopped"
    assert all(job.attempts <= 2 for job in final.values())
