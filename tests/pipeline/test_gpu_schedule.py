"""GpuSchedule: exclusive is re-entrant in its thread; a lease follows the stage names."""

from __future__ import annotations

from worker.engine.gpu_schedule import GpuSchedule


def test_exclusive_is_reentrant_in_the_holding_thread():
    schedule = GpuSchedule("gpu0")
    with schedule.exclusive():
        with schedule.exclusive():  # e.g. the engine re-timing a reference inside a job's timing stage
            assert schedule.state().exclusive
        assert schedule.state().exclusive
    assert not schedule.state().exclusive


def test_a_lease_holds_shared_for_correctness_exclusive_for_timing_and_nothing_after():
    schedule = GpuSchedule("gpu0", sharers=2)
    lease = schedule.lease()
    for stage, shared, exclusive in [("reference", 1, False), ("compare", 1, False), ("timing", 0, True),
                                     ("reward", 0, False)]:
        lease.enter(stage)
        state = schedule.state()
        assert (state.shared, state.exclusive) == (shared, exclusive), stage
    lease.release()
    assert schedule.state().shared == 0


def test_after_the_alone_stage_every_device_stage_holds_the_device_exclusively():
    schedule = GpuSchedule("gpu0", sharers=2)
    lease, other = schedule.lease(), schedule.lease()
    lease.enter("compare")
    other.enter("compare")
    assert schedule.state().shared == 2
    other.release()  # the other job leaves its shared stage; only then can this one have the device alone
    lease.enter("alone")
    for stage in ("reference", "candidate", "compare", "timing"):
        lease.enter(stage)
        state = schedule.state()
        assert (state.shared, state.exclusive) == (0, True), stage
    lease.enter("reward")
    assert not schedule.state().exclusive
    lease.release()


def test_a_job_waiting_for_a_judge_or_a_baseline_holds_nothing_on_the_device():
    from worker.engine.gpu_schedule import BASELINE_WAIT_STAGE, REFERENCE_WAIT_STAGE

    schedule = GpuSchedule("gpu0", sharers=2)
    lease = schedule.lease()
    for stage, shared in [("reference", 1), (REFERENCE_WAIT_STAGE, 0), ("reference", 1), ("compare", 1),
                          (BASELINE_WAIT_STAGE, 0)]:
        lease.enter(stage)
        assert schedule.state().shared == shared, stage
    lease.enter("timing")
    assert schedule.state().exclusive
    lease.release()


def test_background_work_waits_for_a_timing_but_never_holds_one_up():
    import threading

    schedule = GpuSchedule("gpu0", sharers=2)
    started = threading.Event()

    def compile_in_background() -> None:
        with schedule.background():
            started.set()

    with schedule.exclusive():
        thread = threading.Thread(target=compile_in_background)
        thread.start()
        assert not started.wait(0.2), "no background work starts while a job times"
    thread.join(10)
    assert started.is_set()
    with schedule.background():
        with schedule.exclusive():  # taken at once: background work holds nothing
            assert schedule.state().exclusive
