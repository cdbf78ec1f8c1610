"""The warm pool: each runner is handed out once, refilled in the background, torn down off the
caller's thread; an empty pool makes the caller wait (and says so when its time is up)."""

from __future__ import annotations

import threading

import pytest

from worker.engine.sandbox import SandboxUnavailable
from worker.engine.sandbox_pool import PoolEmpty, SandboxPool


class FakeRunner:
    def __init__(self, number: int) -> None:
        self.number = number
        self.alive = True
        self.closed = threading.Event()

    def close(self) -> None:
        self.closed.set()


class Starter:
    """Starts fake runners, each only once its gate is opened."""

    def __init__(self, *, open_gate: bool = True) -> None:
        self.gate = threading.Event()
        if open_gate:
            self.gate.set()
        self.started: list[FakeRunner] = []
        self.fail_with: Exception | None = None
        self.failures_left = 0  # starts that crash before the next one succeeds

    def __call__(self) -> FakeRunner:
        self.gate.wait()
        if self.failures_left:
            self.failures_left -= 1
            raise SandboxUnavailable("the process was killed by SIGSEGV")
        if self.fail_with is not None:
            raise self.fail_with
        runner = FakeRunner(len(self.started))
        self.started.append(runner)
        return runner


def test_each_runner_is_handed_out_once_and_torn_down_after_use():
    starter = Starter()
    pool = SandboxPool(starter, size=2)
    try:
        first = pool.take(timeout_s=30)
        second = pool.take(timeout_s=30)
        third = pool.take(timeout_s=30)
        assert len({first.number, second.number, third.number}) == 3
        pool.retire(first)
        assert first.closed.wait(30)
    finally:
        pool.close()
    # Every runner started was closed: the used ones by retire, the waiting ones by close.
    assert all(r.closed.is_set() for r in starter.started if r is not second and r is not third)


def test_an_empty_pool_makes_the_caller_wait_then_hands_out_the_next_ready_runner():
    starter = Starter(open_gate=False)
    pool = SandboxPool(starter, size=1)
    try:
        with pytest.raises(PoolEmpty, match="no warm sandbox"):
            pool.take(timeout_s=0)
        starter.gate.set()
        runner = pool.take(timeout_s=30)
        assert runner is starter.started[0]
    finally:
        pool.close()


def test_a_dead_waiting_runner_is_discarded_not_handed_out():
    starter = Starter()
    pool = SandboxPool(starter, size=1)
    try:
        first = pool.take(timeout_s=30)
        pool.retire(first)
        waiting = pool.take(timeout_s=30)
        waiting.alive = False
        pool.retire(waiting)
        fresh = pool.take(timeout_s=30)
        assert fresh.alive and fresh is not waiting and fresh is not first
    finally:
        pool.close()


def test_a_failed_start_reaches_the_caller():
    starter = Starter()
    starter.fail_with = SandboxUnavailable("bubblewrap is not installed")
    pool = SandboxPool(starter, size=1)
    try:
        with pytest.raises(SandboxUnavailable, match="bubblewrap"):
            pool.take(timeout_s=30)
    finally:
        pool.close()


def test_a_start_that_fails_once_is_started_again_and_the_caller_gets_a_runner():
    starter = Starter()
    starter.failures_left = 1
    pool = SandboxPool(starter, size=1)
    try:
        runner = pool.take(timeout_s=30)
        assert starter.failures_left == 0 and runner is starter.started[0]
    finally:
        pool.close()


def test_a_pool_that_starts_runners_again_hands_them_out_not_its_old_failure(monkeypatch):
    from worker.engine import sandbox_pool

    monkeypatch.setattr(sandbox_pool, "RETRY_AFTER_S", 0.01)
    starter = Starter()
    starter.failures_left = sandbox_pool.FAILED_STARTS_TO_REPORT  # reported, then the next start works
    started = threading.Event()
    plain_call = starter.__call__

    def start() -> FakeRunner:
        runner = plain_call()
        started.set()
        return runner

    pool = SandboxPool(start, size=1)
    try:
        assert started.wait(30)
        assert pool.take(timeout_s=30) is starter.started[0]
        # The pool is empty again and starting the next one: the caller waits for it.
        assert pool.take(timeout_s=30) is starter.started[1]
    finally:
        pool.close()


def test_size_zero_starts_a_runner_for_each_take():
    starter = Starter()
    pool = SandboxPool(starter, size=0)
    try:
        assert pool.take(timeout_s=0).number == 0
        assert pool.take(timeout_s=0).number == 1
        assert pool.ready_count == 0
    finally:
        pool.close()


def test_runners_start_in_parallel_up_to_the_pool_size():
    """A runner's start takes seconds: one at a time, a GPU lane used them up faster than they came."""
    entered = threading.Semaphore(0)
    release = threading.Event()
    concurrent = {"now": 0, "most": 0}
    lock = threading.Lock()

    def slow_start() -> FakeRunner:
        with lock:
            concurrent["now"] += 1
            concurrent["most"] = max(concurrent["most"], concurrent["now"])
        entered.release()
        release.wait(30)
        with lock:
            concurrent["now"] -= 1
        return FakeRunner(0)

    pool = SandboxPool(slow_start, size=3)
    try:
        for _ in range(3):  # all three starts are under way before any one of them has finished
            assert entered.acquire(timeout=30)
        assert concurrent["most"] == 3
        release.set()
        assert pool.take(timeout_s=30) is not None
    finally:
        release.set()
        pool.close()


def test_a_start_cut_by_the_pools_close_is_not_logged_as_a_failure(caplog):
    """The service stopping kills the sandbox a warm runner was starting in; the two-GPU soak's only warning
    was that, at shutdown."""
    starter = Starter(open_gate=False)
    starter.fail_with = SandboxUnavailable("the process was killed by SIGKILL")
    pool = SandboxPool(starter, size=1)
    closer = threading.Thread(target=pool.close)
    with caplog.at_level("DEBUG", logger="worker.engine.sandbox_pool"):
        closer.start()
        with pool._cond:  # close() marks the pool closed and notifies, then waits for the start in flight
            assert pool._cond.wait_for(lambda: pool._closed, 30)
        starter.gate.set()
        closer.join(30)
    assert not closer.is_alive()
    failures = [r for r in caplog.records if "starting a warm runner failed" in r.getMessage()]
    assert failures and all(r.levelname == "DEBUG" for r in failures)
