"""The reference cache: keys, the refresh schedule, jobs sharing an entry, and dropping a bad judge."""

from __future__ import annotations

import threading
import time

from contract.requests import EvalOptions
from worker.engine.engine_settings import EngineSettings
from worker.engine.memory_budget import HeldMemory, MemoryBudget
from worker.engine.reference.reference_cache import (
    CachedReference,
    ProblemKey,
    ReferenceCache,
    new_seeds,
)


class FakeJudge:
    def __init__(self) -> None:
        self.alive = True
        self.closed = threading.Event()

    def close(self) -> None:
        self.closed.set()


def _key(reference: str = "ref", settings: EngineSettings | None = None, **options) -> ProblemKey:
    return ProblemKey.of(reference, EvalOptions(**options), settings or EngineSettings(), shape_check=True)


def _cache(**schedule) -> ReferenceCache:
    schedule = {"max_age_s": 600.0, "max_uses": 100, **schedule}
    return ReferenceCache(4, **schedule)


def _entry(key: ProblemKey) -> CachedReference:
    return CachedReference(key, FakeJudge(), new_seeds(None, 3, 4))


def test_the_key_separates_what_changes_the_reference_outputs_or_timing():
    base = _key()
    assert base == _key()
    assert base != _key("another reference")
    assert base != _key(trials=3) and base != _key(atol=1e-3) and base != _key(seed=7)
    assert base != _key(timing_budget_s=1.0) and base != _key(device="cuda")
    other_gpu = EngineSettings()
    other_gpu.gpu_index = 1
    assert base != _key(settings=other_gpu)
    assert base.torch and len(base.reference_sha256) == 64


def test_an_entry_serves_its_key_only_and_one_job_at_a_time():
    cache = _cache()
    key = _key()
    entry = cache.add(_entry(key))
    assert cache.checkout(_key("another reference")) is None
    assert cache.checkout(key) is None, "busy while its creator holds it"
    cache.checkin(entry, healthy=True)
    assert cache.checkout(key) is entry
    cache.checkin(entry, healthy=True)
    assert not entry.judge.closed.is_set()


def test_a_job_waits_for_its_problems_busy_judge_rather_than_start_another():
    """Starting a judge costs 10-40 s on an H100, a job's use of one seconds: a job whose problem's judges are
    all busy waits for one to come back, for at most what starting one cost."""
    cache = _cache()
    key = _key()
    entry = cache.add(_entry(key))  # held by its creator
    entry.miss_cost_s = 600.0
    waiting = threading.Event()
    got: list[CachedReference | None] = []
    original = cache._checkout_now

    def checkout_now(k):
        found = original(k)
        if found[0] is None:
            waiting.set()  # it found the judge busy and is about to wait for it
        return found

    cache._checkout_now = checkout_now  # type: ignore[method-assign]
    waiter = threading.Thread(target=lambda: got.append(cache.checkout(key, wait_limit_s=600.0)))
    waiter.start()
    assert waiting.wait(30)
    cache.checkin(entry, healthy=True)
    waiter.join(30)
    assert got == [entry]
    cache.checkin(entry, healthy=True)


def test_the_wait_for_a_busy_judge_is_bounded_by_its_start_cost_and_skipped_without_one():
    cache = _cache()
    key = _key()
    assert cache.checkout(key, wait_limit_s=600.0) is None, "no judge of the problem: nothing to wait for"
    entry = cache.add(_entry(key))
    entry.miss_cost_s = 0.05  # a judge that starts this fast is not worth waiting long for
    assert cache.checkout(key, wait_limit_s=600.0) is None
    entry.miss_cost_s = 600.0
    assert cache.checkout(key, wait_limit_s=0.05) is None, "and never longer than the caller's limit"
    cache.checkin(entry, healthy=True)


def test_an_unhealthy_entry_is_dropped_and_its_judge_closed():
    cache = _cache()
    key = _key()
    entry = cache.add(_entry(key))
    cache.checkin(entry, healthy=False)
    assert entry.judge.closed.wait(30)
    assert cache.checkout(key) is None


def test_entries_rotate_after_their_uses_or_age_with_fresh_secret_seeds():
    by_uses = _cache(max_uses=2)
    key = _key()
    entry = by_uses.add(_entry(key))  # first use
    by_uses.checkin(entry, healthy=True)
    assert by_uses.checkout(key) is entry  # second use
    by_uses.checkin(entry, healthy=True)
    assert by_uses.checkout(key) is None and entry.judge.closed.wait(30)

    by_age = _cache(max_age_s=-1.0)
    old = by_age.add(_entry(key))
    by_age.checkin(old, healthy=True)
    assert by_age.checkout(key) is None and old.judge.closed.wait(30)
    # A replacement draws its seeds from a new secret master seed.
    assert new_seeds(None, 3, 4) != new_seeds(None, 3, 4)
    assert new_seeds(5, 3, 4) == new_seeds(5, 3, 4)


def test_a_dead_judge_is_not_reused():
    cache = _cache()
    key = _key()
    entry = cache.add(_entry(key))
    cache.checkin(entry, healthy=True)
    entry.judge.alive = False
    assert cache.checkout(key) is None


def test_least_recently_used_entries_are_evicted_past_the_size():
    cache = ReferenceCache(1, max_age_s=600.0, max_uses=100)
    first = cache.add(_entry(_key("a")))
    cache.checkin(first, healthy=True)
    second = cache.add(_entry(_key("b")))
    cache.checkin(second, healthy=True)
    assert first.judge.closed.wait(30)
    assert cache.checkout(_key("a")) is None and cache.checkout(_key("b")) is second


def test_an_entry_evicted_while_a_job_holds_it_is_closed_only_after_that_job():
    cache = ReferenceCache(1, max_age_s=600.0, max_uses=100)
    busy = cache.add(_entry(_key("a")))
    job_done = threading.Event()
    closed_during_job = []
    busy.judge.close = lambda: (closed_during_job.append(not job_done.is_set()), busy.judge.closed.set())
    second = cache.add(_entry(_key("b")))  # evicts the busy entry
    cache.checkin(second, healthy=True)
    assert cache.checkout(_key("a")) is None
    job_done.set()
    cache.checkin(busy, healthy=True)
    assert busy.judge.closed.wait(30)
    assert closed_during_job == [False]


def test_a_disabled_cache_closes_each_judge_after_its_job():
    cache = ReferenceCache(0, max_age_s=600.0, max_uses=100)
    entry = cache.add(_entry(_key()))
    assert not entry.cached
    cache.checkin(entry, healthy=True)
    assert entry.judge.closed.wait(30)


def _sized(key: ProblemKey, *, cost_s: float, device: int, host: int = 0) -> CachedReference:
    entry = _entry(key)
    entry.miss_cost_s = cost_s
    entry.held = HeldMemory(device_bytes=device, host_bytes=host)
    return entry


def _budgeted(budget: MemoryBudget, **options) -> ReferenceCache:
    return ReferenceCache(64, max_age_s=600.0, max_uses=100, budget=budget, **options)


def _kept(cache: ReferenceCache, *entries: CachedReference) -> list[CachedReference]:
    """Entries added by their jobs, which are done with them."""
    added = [cache.add(entry) for entry in entries]
    for entry in added:
        cache.checkin(entry, healthy=True)
    return added


def test_judges_stay_within_the_memory_budget_and_the_cheapest_to_lose_goes_first():
    cache = _budgeted(MemoryBudget(device_limit=1000, host_limit=10_000))
    costly, cheap = _kept(cache, _sized(_key("costly"), cost_s=10.0, device=400),
                          _sized(_key("cheap"), cost_s=1.0, device=400))
    newest = cache.add(_sized(_key("newest"), cost_s=5.0, device=400))  # 1200 bytes: over the budget
    assert cheap.judge.closed.wait(30)
    assert not costly.judge.closed.is_set() and not newest.judge.closed.is_set()
    assert cache.counts().device_bytes == 800 and cache.counts().evicted == 1
    assert cache.problems() == {_key("costly").reference_sha256, _key("newest").reference_sha256}


def test_an_entry_holding_more_memory_goes_before_a_smaller_one_of_the_same_cost():
    cache = _budgeted(MemoryBudget(device_limit=1000, host_limit=10_000))
    large, small = _kept(cache, _sized(_key("large"), cost_s=5.0, device=600),
                         _sized(_key("small"), cost_s=5.0, device=200))
    cache.add(_sized(_key("new"), cost_s=5.0, device=300))
    assert large.judge.closed.wait(30) and not small.judge.closed.is_set()


def test_a_costly_entry_unused_for_long_loses_to_newer_ones():
    """Evictions raise the cache's inflation, so values of entries used long ago fall behind (recency)."""
    cache = _budgeted(MemoryBudget(device_limit=1000, host_limit=10_000))
    (old,) = _kept(cache, _sized(_key("old"), cost_s=6.0, device=500))
    _kept(cache, *(_sized(_key(f"p{index}"), cost_s=2.0, device=500) for index in range(12)))
    assert old.judge.closed.wait(30)


def test_the_host_memory_budget_counts_too():
    cache = _budgeted(MemoryBudget(device_limit=None, host_limit=1000))
    (first,) = _kept(cache, _sized(_key("a"), cost_s=1.0, device=0, host=700))
    cache.add(_sized(_key("b"), cost_s=1.0, device=0, host=700))
    assert first.judge.closed.wait(30)


def test_short_device_memory_gives_up_one_more_judge_than_the_budget():
    class Short(MemoryBudget):
        def device_short(self) -> bool:
            return True

    cache = _budgeted(Short(device_limit=10_000, host_limit=10_000))
    (first,) = _kept(cache, _sized(_key("a"), cost_s=1.0, device=100))
    second = cache.add(_sized(_key("b"), cost_s=1.0, device=100))
    assert first.judge.closed.wait(30) and not second.judge.closed.is_set()


def test_a_problem_keeps_as_many_judges_as_jobs_may_run_at_once():
    cache = _budgeted(MemoryBudget(device_limit=10_000, host_limit=10_000), per_key=2)
    key = _key()
    one, two, three = (cache.add(_sized(key, cost_s=1.0, device=10)) for _ in range(3))
    assert one.cached and two.cached and not three.cached, "the third is a private judge"
    cache.checkin(three, healthy=True)
    assert three.judge.closed.wait(30)
    cache.checkin(one, healthy=True)
    assert cache.checkout(key) is one and cache.checkout(key) is None  # two is still busy


def test_a_judge_started_ahead_is_announced_and_then_found_warm():
    cache = _cache()
    key = _key()
    assert cache.begin_warming(key) and not cache.begin_warming(key), "one start per problem"
    started = cache.warming(key)
    assert started is not None and not started.is_set()
    assert key.reference_sha256 in cache.problems()
    entry = _entry(key)
    entry.prestarted = True
    cache.add(entry, hold=False)
    cache.end_warming(key)
    assert started.is_set() and cache.warming(key) is None
    assert cache.checkout(key) is entry and entry.uses == 1


def test_jobs_share_a_judge_up_to_the_limit_and_take_turns_in_their_exchanges():
    """A job held its judge from its reference stage to its end (6 s a job at the median on two H100s, about 2 s
    of use); now it holds the judge's process only for each exchange, and up to `jobs_per_judge` jobs hold it."""
    cache = ReferenceCache(4, max_age_s=600.0, max_uses=100, jobs_per_judge=2)
    key = _key()
    entry = cache.add(_entry(key))
    assert cache.checkout(key) is entry and entry.jobs == 2 and entry.uses == 2
    assert cache.checkout(key) is None, "as many jobs hold it as may share it"

    in_exchange, exchanged = threading.Event(), threading.Event()
    order: list[str] = []

    def second_job() -> None:
        in_exchange.wait(30)
        with entry.exchange(time.monotonic() + 30) as lost:
            order.append(f"second, lost={lost}")
        exchanged.set()

    waiter = threading.Thread(target=second_job)
    waiter.start()
    with entry.exchange(time.monotonic() + 30) as lost:
        in_exchange.set()
        assert not exchanged.wait(0.2), "the other job's exchange waits for this one"
        order.append(f"first, lost={lost}")
    waiter.join(30)
    assert order == ["first, lost=None", "second, lost=None"]

    cache.checkin(entry, healthy=True)
    assert cache.checkout(key) is entry, "room for one more again"
    for _ in range(2):
        cache.checkin(entry, healthy=True)
    assert entry.jobs == 0 and not entry.judge.closed.is_set()


def test_a_judge_broken_in_one_job_s_exchange_serves_no_other_and_closes_after_its_last_holder():
    cache = ReferenceCache(4, max_age_s=600.0, max_uses=100, jobs_per_judge=2)
    key = _key()
    entry = cache.add(_entry(key))
    assert cache.checkout(key) is entry  # a second job holds it too
    entry.broken = "it failed while comparing for another job (crashed)"  # as DeviceStage._exchange marks it
    with entry.exchange(time.monotonic() + 30) as lost:
        assert lost == "it failed while comparing for another job (crashed)"
    cache.checkin(entry, healthy=False)  # the job whose exchange broke it
    assert cache.checkout(key) is None, "no new job gets it"
    assert not entry.judge.closed.is_set(), "the other job still holds it"
    cache.checkin(entry, healthy=False)  # that job's pass ends (it runs again with another judge)
    assert entry.judge.closed.wait(30)


def test_a_dead_judge_or_an_exchange_held_past_the_deadline_is_no_answer():
    entry = _entry(_key())
    entry.judge.alive = False
    with entry.exchange(time.monotonic() + 30) as lost:
        assert lost == "its process is gone"
    entry.judge.alive = True
    with entry.lock:  # another job's exchange, still going
        with entry.exchange(time.monotonic() + 0.05) as lost:
            assert lost == "another job's exchange with it lasted past this job's deadline"
    with entry.exchange(time.monotonic() + 30) as lost:
        assert lost is None and entry.lock.locked()
    assert not entry.lock.locked()


def test_no_start_is_announced_for_others_to_share_when_the_cache_is_off():
    """A job that starts a judge announces it, so that jobs of its problem that come meanwhile wait and share it;
    with the cache off nothing is kept to share, and each job starts its own at once."""
    assert not ReferenceCache(0, max_age_s=600.0, max_uses=100).begin_warming(_key())
    assert _cache().begin_warming(_key())
