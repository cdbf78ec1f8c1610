"""The job pipeline with a fake engine: bounded prepare-ahead, exclusive timing, failures kept apart,
priority among prepared jobs, and prepared jobs returned to the queue at stop."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from pipeline.fakes import WAIT_S, FakeEngine, add_job
from worker.jobs.engine_call import EngineCalls, WorkerIdentity
from worker.jobs.launchers.embedded_launcher import EmbeddedLauncher
from worker.jobs.pipeline import JobPipeline, PipelineConfig
from worker.jobs.store import Job, JobStore

# Each test needs an empty store of its own: tests/conftest.py's `store`, on SQLite only.
pytestmark = pytest.mark.sqlite_store

CPU_LANE = WorkerIdentity(name="embedded@pipeline-test:cpu0", device="cpu")


class Finished:
    """Jobs the pipeline reported finished (its on_finished hook)."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.jobs: dict[str, Job] = {}

    def __call__(self, job: Job) -> None:
        with self.cond:
            self.jobs[job.id] = job
            self.cond.notify_all()

    def wait_for(self, count: int) -> dict[str, Job]:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.jobs) >= count, WAIT_S), f"only {len(self.jobs)} finished"
            return dict(self.jobs)


@pytest.fixture
def engine() -> Iterator[FakeEngine]:
    fake = FakeEngine()
    yield fake
    for gate in fake.holds.values():  # never leave a pipeline thread blocked after a test
        gate.set()


def _calls(engine: FakeEngine) -> EngineCalls:
    return EngineCalls(prepare=engine.prepare, execute=engine.execute)


@pytest.fixture
def embedded(store, engine):
    """Start an embedded worker pool (the real feeder) on one CPU lane with a given config."""
    pools: list[EmbeddedLauncher] = []
    finished = Finished()

    def start(config: PipelineConfig, *, before_start=None) -> tuple[EmbeddedLauncher, Finished]:
        pool = EmbeddedLauncher(store, [CPU_LANE], finished, config=config, engine=_calls(engine))
        if before_start is not None:
            before_start(pool)
        pool.start()
        pools.append(pool)
        return pool, finished

    yield start
    for gate in engine.holds.values():
        gate.set()
    for pool in pools:
        pool.stop(timeout_s=WAIT_S)


def test_prepare_ahead_is_bounded(store, engine, embedded):
    gate = engine.hold("job-0", "reference")
    # Two prepare threads may finish job-1 before job-0, and a free device thread takes whichever is ready
    # first. Holding job-1's build until job-0 is on the device makes the order the test reads fixed.
    job1_build = engine.hold("job-1", "build")
    jobs = [add_job(store, f"job-{i}") for i in range(5)]
    pool, finished = embedded(PipelineConfig(device_concurrency=1, prepare_ahead=1, prepare_threads=2))
    lane = pool.pipeline.lanes[0]
    engine.wait_for(lambda seen: seen.at_stage.get("job-0") == "reference")
    job1_build.set()
    # One job on the device, one prepared behind it, and the feeder waiting for room: no third claim.
    assert lane.wait_until(lambda s: s.executing == 1 and s.ready == 1 and s.waiting_for_room == 1, WAIT_S)
    records = [store.get(job.id) for job in jobs]
    assert records[0].status == "running"
    assert records[1].status == "building" and records[1].built_at is not None
    assert [r.status for r in records[2:]] == ["queued"] * 3
    assert engine.seen.prepared == ["job-0", "job-1"]

    gate.set()
    done = finished.wait_for(5)
    assert {job.status for job in done.values()} == {"done"}
    # Each job ran once; after job-1 the order is the order builds finished, which two prepare threads race.
    assert engine.seen.executed[:2] == ["job-0", "job-1"]
    assert sorted(engine.seen.executed) == [f"job-{i}" for i in range(5)]
    assert all(store.get(job.id).built_at is not None for job in jobs)


def test_timing_is_exclusive_while_correctness_shares_the_device(store, engine, embedded):
    a_compare = engine.hold("A", "compare")
    timing_gates = {"A": engine.hold("A", "timing"), "B": engine.hold("B", "timing")}
    add_job(store, "A")
    pool, finished = embedded(PipelineConfig(device_concurrency=3, prepare_ahead=1, prepare_threads=2),
                              before_start=lambda p: setattr(engine, "schedule", p.pipeline.lanes[0].schedule))
    schedule = pool.pipeline.lanes[0].schedule
    engine.wait_for(lambda seen: seen.at_stage.get("A") == "compare")
    add_job(store, "B")
    pool.wake()
    # B finished its correctness stages and waits to time: A is still comparing on the device.
    assert schedule.wait_until(lambda s: s.waiting_exclusive == 1 and s.shared == 1, WAIT_S)
    b_waiting_since = time.monotonic()
    assert engine.seen.timing_now == set()

    add_job(store, "C")
    pool.wake()
    # A new job does not start its correctness stages while a timing waits.
    assert schedule.wait_until(lambda s: s.waiting_shared == 1, WAIT_S)
    c_waiting_since = time.monotonic()
    assert engine.seen.at_stage["C"] == "build"  # prepared, not on the device

    b_held_back_s = time.monotonic() - b_waiting_since  # B cannot time before A's compare has ended
    a_compare.set()
    # A and B both want to time: one does, the other waits.
    engine.wait_for(lambda seen: len(seen.timing_now) == 1)
    assert schedule.wait_until(lambda s: s.exclusive and s.waiting_exclusive == 1, WAIT_S)
    first = next(iter(engine.seen.timing_now))
    second = "B" if first == "A" else "A"
    timing_gates[first].set()
    engine.wait_for(lambda seen: seen.timing_now == {second})
    timing_gates[second].set()
    c_held_back_s = time.monotonic() - c_waiting_since  # C cannot start before the second timing has ended

    done = finished.wait_for(3)
    assert {job.status for job in done.values()} == {"done"}
    # The result says how long each job waited for its hold on the device: C, at least as long as it was held back.
    waits = {job.submission["candidate"]: job.result["extra"]["device_wait_s"] for job in done.values()}
    assert waits["C"] >= round(c_held_back_s, 3) - 0.001, (waits, c_held_back_s)  # stored to the millisecond
    # ...and which part of it was spent waiting to time alone: B, at least while A compared.
    timing_waits = {job.submission["candidate"]: job.result["extra"]["timing_wait_s"] for job in done.values()}
    assert timing_waits["B"] >= round(b_held_back_s, 3) - 0.001, (timing_waits, b_held_back_s)
    assert all(0 <= timing_waits[name] <= waits[name] for name in waits), (timing_waits, waits)
    assert engine.seen.max_timing_at_once == 1
    assert engine.seen.shared_during_timing == [0, 0, 0]


def test_a_crashing_or_invalid_job_fails_alone(store, engine, embedded):
    names = ["crash-prepare", "ok-1", "crash-execute", "invalid", "ok-2"]
    jobs = {name: add_job(store, name) for name in names}
    _pool, finished = embedded(PipelineConfig(device_concurrency=2, prepare_ahead=2, prepare_threads=2))
    finished.wait_for(len(names))
    final = {name: store.get(job.id) for name, job in jobs.items()}
    assert final["crash-prepare"].status == "failed" and "prepare blew up" in final["crash-prepare"].error
    assert final["crash-execute"].status == "failed" and "execute blew up" in final["crash-execute"].error
    assert final["invalid"].status == "done" and final["invalid"].verdict == "invalid_input"
    assert final["invalid"].built_at is None  # ended at prepare, never waited for the device
    assert final["ok-1"].verdict == final["ok-2"].verdict == "ok"


def test_a_hanging_job_times_out_alone(store, engine, embedded):
    hung = engine.hold("hang", "reference")  # until the engine's stage limit would end it
    hang = add_job(store, "hang")
    pool, finished = embedded(PipelineConfig(device_concurrency=3, prepare_ahead=1, prepare_threads=2))
    schedule = pool.pipeline.lanes[0].schedule
    # The hung job holds the device (shared) before the others arrive: had they come first, one of them could
    # be timing while the hung job still waits to enter its reference stage.
    engine.wait_for(lambda seen: seen.at_stage.get("hang") == "reference")
    others = [add_job(store, f"ok-{i}") for i in range(2)]
    pool.wake()
    # The others ran their correctness stages beside the hung one; now timing waits for the device
    # (and, once a timing waits, a correctness stage not yet started waits behind it).
    assert schedule.wait_until(lambda s: s.waiting_exclusive >= 1 and s.waiting_exclusive + s.waiting_shared == 2,
                               WAIT_S)
    assert engine.seen.at_stage["hang"] == "reference"
    assert "compare" in (engine.seen.at_stage.get("ok-0"), engine.seen.at_stage.get("ok-1"))
    hung.set()
    finished.wait_for(3)
    assert store.get(hang.id).verdict == "timeout"
    assert [store.get(job.id).verdict for job in others] == ["ok"] * 2


def _claim(store: JobStore, job: Job):
    return lambda: store.claim(job.id, CPU_LANE.name, None)[0]


def test_prepared_jobs_reach_the_device_by_priority(store, engine):
    gate = engine.hold("first", "reference")
    first = add_job(store, "first")
    waiting = [add_job(store, "low", 0), add_job(store, "high", 5), add_job(store, "mid", 1)]
    pipeline = JobPipeline(store, [CPU_LANE], PipelineConfig(device_concurrency=1, prepare_ahead=3, prepare_threads=2),
                           engine=_calls(engine))
    pipeline.start()
    lane = pipeline.lanes[0]
    try:
        futures = [lane.admit(_claim(store, first))]
        engine.wait_for(lambda seen: seen.at_stage.get("first") == "reference")
        futures += [lane.admit(_claim(store, job)) for job in waiting]
        assert lane.wait_until(lambda s: s.ready == 3, WAIT_S)
        gate.set()
        assert [f.result(WAIT_S).status for f in futures] == ["done"] * 4
        assert engine.seen.executed == ["first", "high", "mid", "low"]
    finally:
        gate.set()
        pipeline.stop(timeout_s=WAIT_S)


def test_stop_returns_prepared_jobs_to_the_queue_unrun(store, engine):
    gate = engine.hold("first", "reference")
    first, second = add_job(store, "first"), add_job(store, "second")
    pipeline = JobPipeline(store, [CPU_LANE], PipelineConfig(device_concurrency=1, prepare_ahead=1, prepare_threads=1),
                           engine=_calls(engine))
    pipeline.start()
    lane = pipeline.lanes[0]
    running = lane.admit(_claim(store, first))
    waiting = lane.admit(_claim(store, second))
    assert lane.wait_until(lambda s: s.executing == 1 and s.ready == 1, WAIT_S)

    pipeline.stop(timeout_s=0)  # the device thread is mid-job; it finishes that job
    assert waiting.result(WAIT_S) is None
    returned = store.get(second.id)
    assert returned.status == "queued" and returned.attempts == 0 and "returned to the queue" in returned.error
    assert lane.admit(_claim(store, second)) is None  # a stopping pipeline claims nothing
    gate.set()
    assert running.result(WAIT_S).status == "done"
    assert engine.seen.executed == ["first"]
