"""Persisted per-problem baselines in the job store: measured once, reused by a restarted worker, measured
again when stale; a job waits for the compile baseline only when its reward uses it. The measurement
itself is a stand-in here (tests/engine/test_compile_baseline.py runs the real one in a sandbox)."""

from __future__ import annotations

import threading
import time

import pytest

from contract.requests import EvalOptions
from worker.engine.engine_settings import EngineSettings
from worker.engine.timing import baseline_worker, compile_baseline
from worker.engine.timing.baselines import (
    COMPILE_BASELINE,
    REFERENCE_TIMING,
    BaselineKey,
    CompileBaselineRecord,
    ReferenceTimingRecord,
)
from worker.jobs.store import JobStore
from worker.jobs.store.baseline_rows import StoreBaselineBook

REFERENCE = "class Model: pass\n"
OPTIONS = EvalOptions(device="cuda")
KEY = BaselineKey.of(REFERENCE, "cuda", "NVIDIA H100 80GB HBM3")


class StandIn:
    """Measures instantly (or when released), counting how often it was asked."""

    def __init__(self, ratio: float = 2.0) -> None:
        self.calls = 0
        self.ratio = ratio
        self.release = threading.Event()
        self.release.set()

    def __call__(self, task, settings):
        assert self.release.wait(30)
        self.calls += 1
        now = time.time()
        return task.key, [CompileBaselineRecord(True, now, None, 1.0 * self.ratio, 1.0, 50, 50, 12.5, 4, "test"),
                          ReferenceTimingRecord(1.0 * self.ratio, 50, now, "test")]


def worker_settings(db_url: str, measure: StandIn) -> EngineSettings:
    """A worker process's settings over the job store at `db_url`, with a stand-in measurement."""
    settings = EngineSettings()
    settings.baselines = StoreBaselineBook(JobStore(db_url))
    baseline_worker.register(settings, baseline_worker.BaselineWorker(settings, measure_task=measure))
    return settings


@pytest.fixture
def db_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'jobs.db'}"


def attach(settings: EngineSettings, *, wait: bool, on_release=lambda: None):
    released = []

    def release() -> None:
        released.append(True)
        on_release()

    result = compile_baseline.attach(KEY, REFERENCE, OPTIONS, settings, wait=wait, release_device=release)
    return result, bool(released)


def test_the_persisted_baseline_is_reused_after_a_restart(db_url):
    first_measure = StandIn()
    first_measure.release.clear()
    first = worker_settings(db_url, first_measure)
    attached, released = attach(first, wait=True, on_release=first_measure.release.set)
    assert attached.state == "waited" and attached.missing is None and released
    assert first_measure.calls == 1
    assert first.baseline_book().get(KEY, REFERENCE_TIMING).median_ms == 2.0

    # A new worker process on the same store: nothing is measured again.
    restarted_measure = StandIn()
    restarted = worker_settings(db_url, restarted_measure)
    again, released = attach(restarted, wait=True)
    assert again.state == "attached" and not released
    assert again.record.ratio == 2.0 and again.record.measured_at == attached.record.measured_at
    assert restarted_measure.calls == 0


def test_a_stale_baseline_is_still_attached_and_measured_again_in_the_background(db_url):
    measure = StandIn(ratio=3.0)
    measure.release.clear()  # measured again only after this job attached what there was
    settings = worker_settings(db_url, measure)
    old = CompileBaselineRecord(True, time.time() - 2 * settings.baseline_retime_s, None, 2.0, 1.0, 50, 50, 10.0, 4)
    settings.baseline_book().put(KEY, old)
    attached, released = attach(settings, wait=True)
    assert attached.state == "attached" and attached.record.ratio == 2.0 and not released, "stale is used, not awaited"
    worker = baseline_worker.worker_for(settings)
    assert worker.pending(KEY)
    measure.release.set()
    fresh = worker.wait(KEY, 30)
    assert measure.calls == 1 and fresh.ratio == 3.0 and fresh.age_s() < 60


def wait_until(condition, timeout_s: float) -> bool:
    """Poll a condition another thread changes (no event to wait on here) until it holds or time runs out."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_only_a_job_whose_reward_uses_the_compile_baseline_waits_for_it(db_url):
    measure = StandIn()
    measure.release.clear()  # the background measurement takes its time
    settings = worker_settings(db_url, measure)
    pending, released = attach(settings, wait=False)
    assert pending.state == "pending" and pending.record is None and not released
    assert pending.missing.startswith("pending")

    assert baseline_worker.worker_for(settings).pending(KEY)
    results = [attach(settings, wait=True, on_release=measure.release.set)]  # released as the job starts waiting
    (waited, released), = results
    assert waited.state == "waited" and waited.missing is None and released, "waits holding no device"
    assert measure.calls == 1, "one measurement for both jobs"
    assert settings.baseline_book().get(KEY, COMPILE_BASELINE).available


def test_baselines_are_measured_during_a_batch_and_one_a_job_waits_for_goes_first(db_url):
    """A batch never leaves the lane quiet: its jobs' baselines are measured beside it (the batch's later
    jobs of that problem get them); among those queued, one a job waits for is measured first."""
    from worker.engine.gpu_schedule import GpuSchedule

    measured: list[BaselineKey] = []
    names = ("first", "background", "urgent")
    keys = {name: BaselineKey.of(f"# {name}\n{REFERENCE}", "cuda", "GPU") for name in names}
    first_started, first_release = threading.Event(), threading.Event()

    def measure(task, settings):
        measured.append(task.key)
        if task.key == keys["first"]:
            first_started.set()
            first_release.wait(30)
        now = time.time()
        return task.key, [CompileBaselineRecord(True, now, None, 2.0, 1.0, 50, 50, 12.5, 4, "test")]

    settings = EngineSettings()
    settings.baselines = StoreBaselineBook(JobStore(db_url))
    settings.gpu_schedule = GpuSchedule("gpu0", sharers=2)
    settings.gpu_schedule.note_lane_jobs(5)  # a batch is running, and keeps running
    worker = baseline_worker.BaselineWorker(settings, measure_task=measure)
    baseline_worker.register(settings, worker)

    def ask(name: str, *, wait: bool):
        return compile_baseline.attach(keys[name], f"# {name}\n{REFERENCE}", OPTIONS, settings, wait=wait,
                                       release_device=lambda: None)

    assert ask("first", wait=False).state == "pending"
    assert first_started.wait(30), "measured at once, with the batch running"
    assert ask("background", wait=False).state == "pending"
    waiting = threading.Thread(target=lambda: ask("urgent", wait=True), daemon=True)
    waiting.start()
    # The waiting job is counted before the first measurement ends, so the next pick sees it.
    assert wait_until(lambda: worker._waiters.get(keys["urgent"]), 30)
    first_release.set()
    waiting.join(30)
    assert not waiting.is_alive()
    assert wait_until(lambda: not worker.pending(keys["background"]), 30)
    assert measured == [keys["first"], keys["urgent"], keys["background"]]
    # A later job of the problem finds its baseline: no longer pending.
    assert ask("background", wait=False).state != "pending"


@pytest.mark.parametrize("lanes", [1, 2, 4])
def test_the_lanes_of_a_host_share_its_build_cores_between_their_baseline_compiles(lanes, monkeypatch):
    from worker.engine.cpu_plan import CpuPlan
    from worker.engine.gpu_schedule import GpuSchedule

    build_cores = 28
    per_lane = []
    for lane in range(lanes):
        settings = EngineSettings()
        settings.gpu_schedule = GpuSchedule(f"gpu{lane}")
        settings.lane_index, settings.lanes_on_host = lane, lanes
        monkeypatch.setattr(settings, "cpu_plan",
                            lambda lane=lane: CpuPlan(lane_cpus=(28 + lane,), build_cpus=tuple(range(build_cores))))
        per_lane.append(baseline_worker.compile_threads(settings))
    # Every lane compiles at least one, and together they use no more build cores than one lane alone would.
    assert min(per_lane) >= 1
    assert sum(per_lane) * baseline_worker.COMPILE_CORES <= build_cores
    assert per_lane[0] == build_cores // baseline_worker.COMPILE_CORES // lanes
