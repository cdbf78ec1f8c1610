"""A judge's process start, CUDA set-up and reference import hold no device lock, and neither do the host-only
steps of its generation (making and sealing the input sets); its device steps hold the device shared, and a
timing that waits has the device between two steps. On an H100, a whole start held shared kept every other job's
timing waiting for up to 30 s."""

from __future__ import annotations

import threading
import time
import uuid

from contract.requests import EvalOptions, EvalRequest
from contract.statuses import EvalStatus
from sandbox_side.runtime.messages import StepReached
from tests.engine.conftest import HONEST_SILU, SILU_REFERENCE
from worker.engine import evaluate
from worker.engine.gpu_schedule import GpuSchedule
from worker.engine.reference.generate_hold import GenerateHold
from worker.engine.reference.judge import JudgeSession
from worker.engine.reference.judge_start import key_of, start_entry
from worker.engine.reference.reference_cache import cache_for

HOST_STEPS = {"inputs", "seal"}
DEVICE_STEPS = {"trials", "truths", "pool", "shape", "probe_inputs", "probes", "probe_truths", "physics"}


def _own_reference() -> str:
    """A reference of its own: no judge of an earlier test is cached for it (these tests need a miss)."""
    return f"{SILU_REFERENCE}\n# judge-start-unlocked {uuid.uuid4().hex}\n"


def test_a_judge_holds_the_device_shared_over_its_device_steps_only(settings, monkeypatch):
    schedule = settings.gpu_schedule = GpuSchedule("dev0", sharers=2)
    seen: dict[str, int] = {}
    steps: list[tuple[str, bool, int]] = []
    launch, step = JudgeSession.launch, GenerateHold.step

    def observed_launch(self, deadline):
        seen["launch"] = schedule.state().shared
        return launch(self, deadline)

    def observed_step(self, reached: StepReached):
        step(self, reached)
        steps.append((reached.step, reached.device, schedule.state().shared))

    monkeypatch.setattr(JudgeSession, "launch", observed_launch)
    monkeypatch.setattr(GenerateHold, "step", observed_step)
    lease = schedule.lease()
    request = EvalRequest(reference=_own_reference(), candidate=HONEST_SILU, options=EvalOptions(timing=False))
    try:
        result = evaluate(request, settings=settings, on_stage=lease.enter)
    finally:
        lease.release()
    assert result.status == EvalStatus.ok, result.error
    assert result.extra.reference_cache == "miss"
    assert result.extra.reference_judge.startswith("started its own judge: none of its problem was cached")
    assert seen == {"launch": 0}
    assert {name for name, _, _ in steps} == HOST_STEPS | DEVICE_STEPS
    for name, device, shared in steps:  # the job's own lease: shared in its device steps, nothing in the others
        assert device == (name in DEVICE_STEPS) and shared == int(device), (name, device, shared)
    start = result.extra.judge_start  # the job that started its judge says where that start went
    assert start is not None and start.launch_s > 0 and start.generate_s > 0 and start.device_wait_s >= 0
    assert start.cpu_s is not None and start.cpu_s > 0.5  # its sandbox's processes: torch's import alone
    assert result.extra.candidate_cpu_s is not None and result.extra.candidate_cpu_s > 0.5  # the runner's too
    assert set(start.steps_s) == HOST_STEPS | DEVICE_STEPS and all(s >= 0 for s in start.steps_s.values())
    assert sum(start.steps_s.values()) <= start.generate_s + 0.01
    assert schedule.state().shared == 0


def test_a_timing_that_waits_has_the_device_between_two_steps_of_a_generation(settings, monkeypatch):
    schedule = settings.gpu_schedule = GpuSchedule("dev0", sharers=2)
    timed = threading.Event()
    timing_done = threading.Event()
    order: list[str] = []
    step = GenerateHold.step

    def time_alone() -> None:
        schedule.acquire_exclusive()  # waits for the judge's shared hold to go
        order.append(f"timing alone, judge holds {schedule.state().shared}")
        timed.set()
        schedule.release_exclusive()
        timing_done.set()

    def step_with_a_timing_waiting(self, reached: StepReached):
        if reached.step == "pool":  # the judge holds the device (its `truths` step) and a timing comes
            assert self.held and schedule.state().shared == 1
            threading.Thread(target=time_alone, daemon=True).start()
            assert schedule.wait_until(lambda state: state.waiting_exclusive == 1, timeout=30)
        step(self, reached)
        order.append(f"judge at {reached.step}")

    monkeypatch.setattr(GenerateHold, "step", step_with_a_timing_waiting)
    request = EvalRequest(reference=_own_reference(), candidate=HONEST_SILU, options=EvalOptions(timing=False))
    hold = GenerateHold.on_schedule(schedule)
    entry = start_entry(request, settings, key_of(request, settings), time.monotonic() + 120, hold)
    try:
        assert timing_done.wait(30)
        # The timing ran once the judge let go at `pool`, before the judge's `pool` step began.
        assert order.index("timing alone, judge holds 0") < order.index("judge at pool")
        assert hold.yields == 1 and not hold.held and schedule.state().shared == 0
        assert entry.start is not None and entry.start.yields == 1
    finally:
        entry.judge.close()


def test_a_job_whose_problems_judge_stays_busy_says_why_it_started_its_own(settings):
    """A batch's extra judges were its host's largest cost on two H100s: a job that starts one says why."""
    request = EvalRequest(reference=_own_reference(), candidate=HONEST_SILU, options=EvalOptions(timing=False))
    first = evaluate(request, settings=settings)
    assert first.status == EvalStatus.ok and first.extra.reference_cache == "miss", first.error
    cache = cache_for(settings)
    # Held by as many other jobs of the problem as may share it.
    held = [cache.checkout(key_of(request, settings)) for _ in range(cache.jobs_per_judge)]
    busy = held[0]
    assert busy is not None and all(entry is busy for entry in held)
    busy.miss_cost_s = 0.05  # its start's cost bounds the wait for it
    try:
        second = evaluate(request, settings=settings)
    finally:
        for entry in held:
            cache.checkin(entry, healthy=True)
    assert second.status == EvalStatus.ok and second.extra.reference_cache == "miss", second.error
    assert second.extra.reference_judge.startswith(
        f"started its own judge: its problem's 1 judge(s) on this GPU stayed shared by as many other jobs as may "
        f"share one ({cache.jobs_per_judge}) for 0.0"), second.extra.reference_judge


def test_a_job_with_the_judge_cache_off_says_so(settings):
    settings.reference_cache_entries = 0
    request = EvalRequest(reference=_own_reference(), candidate=HONEST_SILU, options=EvalOptions(timing=False))
    result = evaluate(request, settings=settings)
    assert result.status == EvalStatus.ok and result.extra.reference_cache == "off", result.error
    assert result.extra.reference_judge == "started its own judge: the judge cache is off " \
                                           "(KERNELJUDGE_REFERENCE_CACHE_ENTRIES=0)"
