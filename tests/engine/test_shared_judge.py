"""Jobs of a problem share its judge on a device (up to the device's concurrency), each taking the judge's process for
one exchange at a time. A judge that fails in one job's exchange answers no other job: the others run their device
stages again with another judge and say why, so one candidate never decides another's verdict."""

from __future__ import annotations

import uuid

from contract.requests import EvalOptions, EvalRequest
from contract.statuses import EvalStatus
from tests.engine.conftest import HONEST_SILU, SILU_REFERENCE
from worker.engine import evaluate
from worker.engine.gpu_schedule import GpuSchedule
from worker.engine.reference.judge_start import key_of
from worker.engine.reference.reference_cache import cache_for
from worker.engine.stage import Stage


def _request() -> EvalRequest:
    """A reference of its own, so that no judge of an earlier test is cached for it."""
    return EvalRequest(reference=f"{SILU_REFERENCE}\n# shared-judge {uuid.uuid4().hex}\n", candidate=HONEST_SILU,
                       options=EvalOptions(timing=False))


def test_a_job_is_judged_by_the_judge_another_job_of_its_problem_holds(settings):
    settings.gpu_schedule = GpuSchedule("dev0", sharers=2)
    request = _request()
    first = evaluate(request, settings=settings)
    assert first.status == EvalStatus.ok and first.extra.reference_cache == "miss", first.error
    cache = cache_for(settings)
    assert cache.jobs_per_judge == 2
    other = cache.checkout(key_of(request, settings))  # held by another job of the problem, still running
    assert other is not None
    try:
        second = evaluate(request, settings=settings)
    finally:
        cache.checkin(other, healthy=True)
    assert second.status == EvalStatus.ok and second.extra.reference_cache == "hit", second.error
    assert second.extra.judge_lost is None and other.uses == 3 and other.jobs == 0
    assert second.stages.keys() >= {"compare", "inputs"}


def test_a_judge_another_job_broke_sends_this_job_to_another_judge(settings):
    settings.gpu_schedule = GpuSchedule("dev0", sharers=2)
    request = _request()
    assert evaluate(request, settings=settings).status == EvalStatus.ok
    cache = cache_for(settings)
    shared = cache.checkout(key_of(request, settings))  # the other job
    assert shared is not None
    broke: list[str] = []

    def on_stage(stage: Stage) -> None:
        # This job holds the judge now (its reference stage is over); the other job's exchange fails before this
        # job's first one, as DeviceStage._exchange marks it.
        if stage == Stage.candidate and not broke:
            shared.broken = "it failed while comparing for another job (crashed)"
            broke.append(stage)

    try:
        result = evaluate(request, settings=settings, on_stage=on_stage)
    finally:
        cache.checkin(shared, healthy=False)
    assert broke, "the job reached its candidate stage"
    assert result.status == EvalStatus.ok and result.judged, result.error
    assert result.extra.judge_lost is not None and "it failed while comparing for another job (crashed)" in \
        result.extra.judge_lost and result.extra.judge_lost.endswith("its device stages ran again with another judge")
    assert result.extra.reference_cache == "miss"  # the second pass started a judge of its own
    assert shared.closing, "the broken judge is closed once its last holder is done"
    replacement = cache.checkout(key_of(request, settings))
    assert replacement is not None and replacement is not shared
    cache.checkin(replacement, healthy=True)


def test_jobs_sharing_a_judge_time_alone_by_turns_without_waiting_on_each_other(settings):
    """Three jobs at a time, six in all, of one problem, each with its own device lease (as the service's lanes run
    them): their exchanges with the one judge happen only inside their stages' holds, so a job timing alone never
    waits for the judge another job holds, and no job waits for a lease while it holds the judge."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    schedule = settings.gpu_schedule = GpuSchedule("dev0", sharers=3)
    request = EvalRequest(reference=_request().reference, candidate=HONEST_SILU,
                          options=EvalOptions(timing=True, timing_budget_s=0.2))
    timing_alone: list[int] = []
    guard = threading.Lock()

    def one_job(_: int):
        lease = schedule.lease()

        def on_stage(stage: Stage) -> None:
            lease.enter(stage)
            if stage == Stage.timing:
                with guard:
                    timing_alone.append(schedule.state().shared)

        try:
            return evaluate(request, settings=settings, on_stage=on_stage)
        finally:
            lease.release()

    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(one_job, range(6)))
    assert all(r.status == EvalStatus.ok and r.timing is not None for r in results), [r.error for r in results]
    assert all(r.extra.judge_lost is None for r in results)
    assert timing_alone == [0] * 6, "every timing window had the device alone"
    cache = cache_for(settings)
    (judge,) = cache.entries_of(key_of(request, settings))
    assert judge.uses == 6 and judge.jobs == 0, "one judge served all six"
    assert schedule.state().shared == 0
