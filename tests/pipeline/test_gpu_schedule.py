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
