"""The lane watchdog (worker/jobs/watchdog.py): a lane with jobs and no progress is restarted, its jobs go back
to the queue and run again exactly once (the stuck attempt's late writes are refused by the store), a busy lane
that progresses is left alone, and /v1/ready and /metrics show a stalled lane."""

from __future__ import annotations

import logging
import threading
from collections import Counter

import pytest

from contract.requests import EvalOptions
from contract.results import EvalResult
from contract.statuses import EvalStatus
from pipeline.fakes import WAIT_S, FakePrepared, add_job
from tests.service.helpers import make_config, poll_until, start_server
from worker.engine.engine_settings import EngineSettings
from worker.engine.reference.reference_cache import CachedReference, ProblemKey, ReferenceCache, new_seeds
from worker.engine.sandbox_pool import SandboxPool
from worker.jobs.engine_call import EngineCalls, WorkerIdentity
from worker.jobs.pipeline import JobPipeline, LaneHealth, PipelineConfig
from worker.jobs.store import JobStore
from worker.jobs.watchdog import LaneWatchdog

# Each test needs an empty store of its own: tests/conftest.py's `store`, on SQLite only.
pytestmark = pytest.mark.sqlite_store

LANE = WorkerIdentity(name="embedded@watchdog-test:cpu0", device="cpu")
STALL_S = 1.0


class StallingEngine:
    """A fake engine whose execute blocks on the first attempt of a job named "stuck" (a hung device stage),
    and whose `reset` (the restart killing the sandboxes the stuck threads hold) is recorded and, unless
    the test holds it, wakes the stuck execute up, which then returns a verdict as a stale thread would."""

    def __init__(self, *, wake_on_reset: bool = True) -> None:
        self.cond = threading.Condition()
        self.executions: Counter[str] = Counter()
        self.stuck = threading.Event()  # the first attempt is blocked
        self.wake = threading.Event()  # ... until this is set
        self.woke = threading.Event()
        self.stuck_thread: threading.Thread | None = None
        self.wake_on_reset = wake_on_reset
        self.reset_gate = threading.Event()  # a test closes it to see the lane while it is stalled
        self.reset_gate.set()
        self.resetting = threading.Event()
        self.reset_threads: list[set[threading.Thread]] = []
        self.stage_pause_s = 0.0  # a working (progressing) job's time per stage

    def calls(self) -> EngineCalls:
        return EngineCalls(prepare=self.prepare, execute=self.execute, reset=self.reset)

    def prepare(self, request, *, settings, on_stage):
        return FakePrepared(request.candidate)

    def execute(self, prepared: FakePrepared, *, settings, on_stage):
        with self.cond:
            self.executions[prepared.candidate] += 1
            attempt = self.executions[prepared.candidate]
            self.cond.notify_all()
        on_stage("reference")
        if prepared.candidate == "stuck" and attempt == 1:
            self.stuck_thread = threading.current_thread()
            self.stuck.set()
            assert self.wake.wait(WAIT_S), "the stuck attempt was never woken"
            self.woke.set()
            # A stale thread that goes on: its verdict must not replace the rerun's.
            return EvalResult(status=EvalStatus.timeout, extra={"by": "stale attempt"})
        for stage in ("candidate", "compare", "timing", "reward"):
            if self.stage_pause_s:
                threading.Event().wait(self.stage_pause_s)  # the stage's work (time passing, not a wait for anything)
            on_stage(stage)
        return EvalResult(status=EvalStatus.ok, correct=True, compiled=True, extra={"by": f"attempt {attempt}"})

    def reset(self, settings, threads: set[threading.Thread]) -> int:
        self.resetting.set()
        assert self.reset_gate.wait(WAIT_S)
        with self.cond:
            self.reset_threads.append(set(threads))
        if self.wake_on_reset and self.stuck_thread in threads:
            self.wake.set()  # its sandbox was killed: the blocked reply fails at once
            return 1
        return 0


class Finished:
    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.jobs: list = []

    def __call__(self, job) -> None:
        with self.cond:
            self.jobs.append(job)
            self.cond.notify_all()

    def wait_for(self, predicate) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: predicate(self.jobs), WAIT_S), f"finished: {self.jobs}"


@pytest.fixture
def run_pipeline(store):
    """Start a pipeline of one CPU lane on a StallingEngine, with a feeder like the embedded workers'."""
    started: list[tuple[JobPipeline, StallingEngine, threading.Event]] = []

    def start(engine: StallingEngine, config: PipelineConfig) -> tuple[JobPipeline, Finished]:
        finished = Finished()
        pipeline = JobPipeline(store, [LANE], config, engine=engine.calls(), on_finished=finished)
        pipeline.start()
        stop = threading.Event()
        lane = pipeline.lanes[0]

        def feed() -> None:
            while not stop.is_set():
                if lane.admit(lane.claim_next, timeout=0.1) is None:
                    stop.wait(0.05)  # nothing queued: look again (the embedded feeder's idle recheck)

        threading.Thread(target=feed, daemon=True).start()
        started.append((pipeline, engine, stop))
        return pipeline, finished

    yield start
    for pipeline, engine, stop in started:
        stop.set()
        engine.reset_gate.set()
        engine.wake.set()
        pipeline.stop(timeout_s=WAIT_S)


def _config(**overrides) -> PipelineConfig:
    return PipelineConfig(**{"device_concurrency": 1, "prepare_ahead": 1, "prepare_threads": 2, "stall_s": STALL_S,
                             **overrides})


def _done(job_id: str):
    return lambda jobs: any(job.id == job_id and job.status == "done" for job in jobs)


def test_a_stalled_lane_is_restarted_and_its_job_runs_again_exactly_once(store, run_pipeline, caplog):
    caplog.set_level(logging.ERROR, logger="worker.jobs.watchdog")
    engine = StallingEngine(wake_on_reset=False)  # the stuck attempt stays stuck until the test releases it
    job = add_job(store, "stuck")
    pipeline, finished = run_pipeline(engine, _config())
    lane = pipeline.lanes[0]
    assert engine.stuck.wait(WAIT_S)

    finished.wait_for(_done(job.id))  # the watchdog gave the job back and the fresh lane ran it
    record = store.get(job.id)
    assert record.status == "done" and record.result["extra"]["by"] == "attempt 2"
    assert record.attempts == 2
    health = lane.health()
    assert health.restarts == 1 and not health.stalled
    assert engine.stuck_thread in engine.reset_threads[0], "the restart killed what the stuck thread held"
    stacks = "\n".join(r.getMessage() for r in caplog.records)
    assert "stalled" in stacks and engine.stuck_thread.name in stacks and "wait" in stacks  # its stack, logged

    # The stuck attempt wakes up late and returns a verdict: refused, and the job does not run again.
    engine.wake.set()
    engine.stuck_thread.join(WAIT_S)
    assert not engine.stuck_thread.is_alive(), "the abandoned device thread exits once it comes back"
    record = store.get(job.id)
    assert record.status == "done" and record.result["extra"]["by"] == "attempt 2" and record.attempts == 2
    assert engine.executions["stuck"] == 2
    assert [j.status for j in finished.jobs if j.id == job.id] == ["done"], "reported finished exactly once"
    assert lane.wait_until(lambda s: s.admitted == s.preparing == s.ready == s.executing == 0, WAIT_S), \
        "the stale thread left the lane's counters alone"

    # The restarted lane goes on working, on the device slots it has (one).
    other = add_job(store, "after")
    finished.wait_for(_done(other.id))
    assert lane.health().restarts == 1


def test_a_stuck_attempt_woken_by_the_restart_cannot_overwrite_or_fail_its_job(store, run_pipeline):
    # Killing its sandbox wakes the stuck attempt at once: it races the requeue and the rerun, and loses.
    engine = StallingEngine(wake_on_reset=True)
    job = add_job(store, "stuck")
    waiting = add_job(store, "waiting")  # prepared behind it: given back uncounted
    pipeline, finished = run_pipeline(engine, _config())
    finished.wait_for(lambda jobs: _done(job.id)(jobs) and _done(waiting.id)(jobs))
    assert engine.woke.is_set()
    record = store.get(job.id)
    assert record.result["extra"]["by"] == "attempt 2" and record.attempts == 2
    assert store.get(waiting.id).attempts == 1, "a job no thread had went back without using its retry"
    assert engine.executions == Counter({"stuck": 2, "waiting": 1})
    assert [j.id for j in finished.jobs].count(job.id) == 1


def test_a_busy_lane_that_progresses_is_never_flagged(store, run_pipeline):
    engine = StallingEngine()
    engine.stage_pause_s = 0.4  # each job takes ~1.6 s, longer than the stall period, moving stage by stage
    jobs = [add_job(store, f"slow-{i}") for i in range(2)]  # the second waits, prepared, behind the first
    pipeline, finished = run_pipeline(engine, _config())
    finished.wait_for(lambda done: all(_done(job.id)(done) for job in jobs))
    assert pipeline.lanes[0].health().restarts == 0
    assert engine.reset_threads == []
    assert all(store.get(job.id).attempts == 1 for job in jobs)


def test_a_job_that_stalls_its_lane_on_its_retry_is_failed(store, run_pipeline):
    engine = StallingEngine(wake_on_reset=True)
    job = add_job(store, "stuck")
    first, _ = store.claim(job.id, "embedded@lost:cpu0", None)  # a first attempt was lost already
    store.recover_orphans("embedded@lost:")
    pipeline, finished = run_pipeline(engine, _config())
    finished.wait_for(lambda jobs: any(j.id == job.id and j.status == "failed" for j in jobs))
    record = store.get(job.id)
    assert record.status == "failed" and record.attempts == 2 and "no progress" in record.error
    assert engine.executions["stuck"] == 1


def test_a_celery_message_claims_again_when_its_lane_restarts(store, monkeypatch):
    """The Celery task holds a claim token per message: when the watchdog gives its job back, it claims again,
    so the requeued job is not left in the queue without a message to claim it."""
    from worker.jobs.distributed import tasks

    engine = StallingEngine(wake_on_reset=True)
    pipeline = JobPipeline(store, [WorkerIdentity("celery@watchdog-test:1", "cpu")], _config(), engine=engine.calls())
    pipeline.start()
    monkeypatch.setattr(tasks, "_lane", pipeline.lanes[0])
    job = add_job(store, "stuck")
    outcome: list[str] = []
    task = threading.Thread(target=lambda: outcome.append(tasks.evaluate_job(job.id)))
    try:
        task.start()
        task.join(WAIT_S)
        assert outcome == ["done"]
    finally:
        engine.wake.set()
        pipeline.stop(timeout_s=WAIT_S)
    record = store.get(job.id)
    assert record.attempts == 2 and record.result["extra"]["by"] == "attempt 2"
    assert pipeline.lanes[0].health().restarts == 1


def test_the_store_fences_a_requeued_attempt(store):
    job = add_job(store, "a")
    first = store.claim_next("w", None)
    assert first.attempts == 1
    assert store.requeue_stalled(job.id, 1, "its lane stalled") == "requeued"
    queued = store.get(job.id)
    assert queued.status == "queued" and queued.attempts == 1 and queued.worker is None
    # While queued, the stalled attempt can change nothing.
    assert not store.fail(job.id, "stale", attempt=1)
    assert not store.finish(job.id, 1, {"by": "stale"}, "ok")
    assert not store.mark_running(job.id, 1) and not store.release(job.id, 1, "stale")
    second = store.claim_next("w", None)
    assert second.attempts == 2
    assert not store.fail(job.id, "stale", attempt=1) and not store.finish(job.id, 1, {"by": "stale"}, "ok")
    assert store.requeue_stalled(job.id, 1, "stale watchdog") == "gone"
    assert store.finish(job.id, 2, {"by": "second"}, "ok")
    assert store.get(job.id).result == {"by": "second"}
    # A job already on its retry is failed, not requeued again.
    other = add_job(store, "b")
    store.claim_next("w", None)
    store.requeue_stalled(other.id, 1, "stalled")
    store.claim_next("w", None)
    assert store.requeue_stalled(other.id, 2, "stalled again") == "failed"
    assert store.get(other.id).status == "failed"


class FakeLane:
    def __init__(self, name: str, busy: bool, quiet_s: float) -> None:
        self.identity = WorkerIdentity(name, "cpu")
        self.busy, self.quiet_s = busy, quiet_s
        self.stalled = False
        self.restarted = 0

    def health(self) -> LaneHealth:
        return LaneHealth(self.identity.name, self.busy, self.quiet_s, self.stalled, self.restarted)

    def mark_stalled(self) -> None:
        self.stalled = True

    def restart(self) -> list[str]:
        self.stalled = False
        self.restarted += 1
        return ["job-1"]


def test_only_a_lane_with_work_and_no_progress_is_stalled(caplog):
    lanes = [FakeLane("progressing", True, 5.0), FakeLane("idle", False, 10_000.0), FakeLane("hung", True, 61.0)]
    watchdog = LaneWatchdog(lanes, stall_s=60.0)
    with caplog.at_level(logging.ERROR, logger="worker.jobs.watchdog"):
        assert watchdog.check() == ["hung"]
    assert [lane.restarted for lane in lanes] == [0, 0, 1]
    assert "MainThread" in caplog.text and "test_only_a_lane_with_work" in caplog.text  # every thread's stack


def test_a_lane_that_cannot_restart_stays_stalled_and_its_stacks_are_logged_once(caplog):
    hung = FakeLane("hung", True, 61.0)
    hung.restart = lambda: []  # its lock is held: the restart gives up (and leaves it stalled)
    watchdog = LaneWatchdog([hung], stall_s=60.0)
    with caplog.at_level(logging.ERROR, logger="worker.jobs.watchdog"):
        assert watchdog.check() == [] and watchdog.check() == []
    assert hung.stalled and hung.health().stalled
    assert caplog.text.count("Every thread's stack") == 1


def test_the_restart_kills_only_the_sandboxes_the_stuck_threads_hold():
    class Judge:
        def __init__(self) -> None:
            self.alive, self.killed, self.closed = True, threading.Event(), threading.Event()

        def kill(self) -> None:
            self.killed.set()

        def close(self) -> None:
            self.closed.set()

    class Runner:
        alive = True

        def __init__(self) -> None:
            self.killed = threading.Event()

        def kill(self) -> None:
            self.killed.set()

        def close(self) -> None:
            pass

    cache = ReferenceCache(4, max_age_s=600.0, max_uses=100)
    pool = SandboxPool(Runner, size=0)
    held: dict[str, tuple] = {}

    def take(name: str, reference: str) -> None:
        key = ProblemKey.of(reference, EvalOptions(), EngineSettings(), shape_check=True)
        entry = cache.add(CachedReference(key, Judge(), new_seeds(None, 3, 4)))
        held[name] = (entry, pool.take(30))

    threads = {name: threading.Thread(target=take, args=(name, f"ref {name}"), name=name) for name in ("stuck", "ok")}
    for thread in threads.values():
        thread.start()
        thread.join(WAIT_S)
    try:
        assert cache.kill_held_by({threads["stuck"]}) == 1 and pool.kill_taken_by({threads["stuck"]}) == 1
        (stuck_entry, stuck_runner), (ok_entry, ok_runner) = held["stuck"], held["ok"]
        assert stuck_entry.judge.killed.is_set() and stuck_runner.killed.is_set()
        assert not ok_entry.judge.killed.is_set() and not ok_runner.killed.is_set()
        assert cache.counts().entries == 1, "the killed judge is no longer offered to jobs"
        cache.checkin(stuck_entry, healthy=True)  # its stale holder comes back: the entry is retired
        assert stuck_entry.judge.closed.wait(WAIT_S)
        pool.retire(ok_runner)
        assert pool.kill_taken_by({threads["ok"]}) == 0, "a retired runner is no longer held"
    finally:
        pool.close()


def test_ready_and_metrics_show_a_stalled_lane(monkeypatch, tmp_path):
    """The real app with one embedded CPU worker on the stalling fake engine."""
    import worker.jobs.pipeline as pipeline_module

    engine = StallingEngine(wake_on_reset=True)
    engine.reset_gate.clear()  # the restart waits here: the lane stays stalled for the test to see
    monkeypatch.setattr(pipeline_module, "real_engine", engine.calls)
    data_dir = tmp_path / "data"
    live = start_server(make_config(data_dir, local_workers=1, stall_s=STALL_S))
    store = JobStore(f"sqlite:///{(data_dir / 'kerneljudge.db').resolve()}")
    try:
        with live.client() as client:
            ready = client.get("/v1/ready").json()
            assert ready["ready"] and [lane["stalled"] for lane in ready["lanes"]] == [False]
            job = add_job(store, "stuck")  # the feeder finds it at its next look at the queue
            assert engine.resetting.wait(WAIT_S), "the watchdog did not restart the stalled lane"

            stalled = client.get("/v1/ready")
            assert stalled.status_code == 503
            (lane,) = stalled.json()["lanes"]
            assert lane["stalled"] and lane["restarts"] == 0
            metrics = client.get("/metrics").text
            name = lane["name"]
            assert f'kerneljudge_lane_stalled{{lane="{name}"}} 1.0' in metrics
            assert f'kerneljudge_lane_restarts_total{{lane="{name}"}} 0.0' in metrics

            engine.reset_gate.set()
            # Another process's view (the server's): polled, with a deadline.
            record = poll_until(lambda: store.get(job.id), lambda j: j.status == "done", WAIT_S, 0.05)
            assert record.attempts == 2 and record.result["extra"]["by"] == "attempt 2"
            again = poll_until(lambda: client.get("/v1/ready"), lambda r: r.status_code == 200, WAIT_S, 0.05).json()
            assert again["lanes"][0]["restarts"] == 1 and not again["lanes"][0]["stalled"]
            metrics = client.get("/metrics").text
            assert f'kerneljudge_lane_stalled{{lane="{name}"}} 0.0' in metrics
            assert f'kerneljudge_lane_restarts_total{{lane="{name}"}} 1.0' in metrics
    finally:
        engine.reset_gate.set()
        engine.wake.set()
        live.stop()
        store.close()
