"""GpuSchedule: exclusive is re-entrant in its thread; a lease follows the stage names."""

from __future__ import annotations

import contextlib
import threading

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


def test_only_the_measured_timing_window_holds_the_device_alone():
    schedule = GpuSchedule("gpu0", sharers=2)
    lease, other = schedule.lease(), schedule.lease()
    other.enter("compare")
    lease.enter("timing_setup")  # the variants are made beside the other job's correctness stage
    assert (schedule.state().shared, schedule.state().exclusive) == (2, False)
    other.release()
    lease.enter("timing")
    assert (schedule.state().shared, schedule.state().exclusive) == (0, True)
    lease.enter("timing_check")  # the kept outputs are re-checked beside whatever comes next
    other.enter("candidate")
    assert (schedule.state().shared, schedule.state().exclusive) == (2, False)
    lease.release()
    other.release()


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


def test_beside_another_job_a_shared_stage_waits_while_the_cards_measured_memory_is_full():
    """Full means over 85%, not 90%: admitted under 90%, two H100s still peaked at 92% as the stages running grew
    and warm runners and judges started beside them."""
    import threading

    memory = {"share": 0.88}
    schedule = GpuSchedule("gpu0", sharers=2, memory_share=lambda: memory["share"])
    schedule.acquire_shared()  # alone on the device: admitted whatever the memory says
    admitted = threading.Event()

    def second_job() -> None:
        schedule.acquire_shared()
        admitted.set()

    thread = threading.Thread(target=second_job, daemon=True)
    thread.start()
    assert schedule.wait_until(lambda s: s.waiting_shared == 1, timeout=10)
    assert not admitted.wait(0.6)  # held back across two memory re-reads
    memory["share"] = 0.5  # the card's memory falls under the admission share
    assert admitted.wait(10) and schedule.state().shared == 2
    assert schedule.memory_waits == 1
    schedule.release_shared()
    schedule.release_shared()


def test_a_job_held_back_by_memory_starts_when_the_one_on_the_device_leaves():
    import threading

    schedule = GpuSchedule("gpu0", sharers=2, memory_share=lambda: 0.99)
    schedule.acquire_shared()
    admitted = threading.Event()
    thread = threading.Thread(target=lambda: (schedule.acquire_shared(), admitted.set()), daemon=True)
    thread.start()
    assert schedule.wait_until(lambda s: s.waiting_shared == 1, timeout=10)
    schedule.release_shared()  # alone now: it may have the device whatever the memory says
    assert admitted.wait(10) and schedule.state().shared == 1
    schedule.release_shared()


def test_the_gpu_monitor_integrates_busy_time_and_keeps_the_memory_peak():
    from worker.engine.gpu_monitor import GpuMonitor

    monitor = GpuMonitor()
    monitor.record("0, 100, 40000, 80000", now=10.0)
    monitor.record("1, 0, 1000, 80000", now=10.0)
    monitor.record("0, 50, 76000, 80000", now=12.0)  # half busy over the 2 s since the last line
    monitor.record("0, [N/A], [N/A], 80000", now=13.0)  # nothing measured: ignored
    monitor.record("0, 0, 20000, 80000", now=14.0)
    gpu0, gpu1 = monitor.readings()
    assert gpu0.busy_s == 1.0 and gpu1.busy_s == 0.0
    assert gpu0.memory_peak == 0.95 and gpu0.memory_share == 0.25
    assert monitor.reading(1).memory_used_bytes == 1000 * 1024**2



class _Sandbox:
    """A Pausable that records its pauses (SandboxProcess.paused freezes a real one: tests/sandbox)."""

    def __init__(self, running: bool = True) -> None:
        self.running = running
        self.paused_now = False
        self.pauses = 0

    @contextlib.contextmanager
    def paused(self):
        if not self.running:
            yield "not paused: the sandbox is not running"
            return
        self.paused_now, self.pauses = True, self.pauses + 1
        try:
            yield "frozen (test)"
        finally:
            self.paused_now = False


def _in_thread(body) -> None:
    thread = threading.Thread(target=body)
    thread.start()
    thread.join()


def test_a_neighbour_of_the_device_is_paused_while_another_thread_times_and_resumed_after():
    schedule = GpuSchedule("gpu0")
    starting = _Sandbox()
    with schedule.neighbour(starting):
        seen = []

        def timing():
            with schedule.exclusive():
                with schedule.exclusive():  # re-entrant: still paused after the inner release
                    seen.append(starting.paused_now)
                seen.append(starting.paused_now)
            seen.append(starting.paused_now)

        _in_thread(timing)
        assert seen == [True, True, False] and schedule.neighbour_pauses == 1
        # Shared stages beside it do not pause it: only a timing does.
        with schedule.shared():
            assert not starting.paused_now


def test_a_neighbour_registered_while_a_job_times_is_paused_at_once_and_let_go_when_it_leaves():
    schedule = GpuSchedule("gpu0")
    sandbox = _Sandbox()
    holding, leave = threading.Event(), threading.Event()

    def timing():
        with schedule.exclusive():
            holding.set()
            leave.wait()

    thread = threading.Thread(target=timing)
    thread.start()
    holding.wait()
    with schedule.neighbour(sandbox):
        assert sandbox.paused_now
    assert not sandbox.paused_now  # leaving the block resumes it, the timing still on
    leave.set()
    thread.join()


def test_the_holders_own_neighbours_and_sandboxes_not_running_yet_are_not_paused():
    schedule = GpuSchedule("gpu0")
    mine, unstarted = _Sandbox(), _Sandbox(running=False)
    with schedule.neighbour(mine), schedule.neighbour(unstarted):
        with schedule.exclusive():  # e.g. the baseline worker timing what it compiled
            assert not mine.paused_now
        unstarted.running = True
        seen = []

        def timing():
            with schedule.exclusive():
                seen.append(unstarted.paused_now)  # tried again at the next timing, now that it runs

        _in_thread(timing)
    assert seen == [True] and mine.pauses == 1 and unstarted.pauses == 1
