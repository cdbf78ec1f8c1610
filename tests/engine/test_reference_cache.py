"""The reference cache: keys, the refresh schedule, one job per entry, and dropping a bad judge."""

from __future__ import annotations

import threading

from worker.engine.reference_cache import (
    CachedReference,
    ProblemKey,
    ReferenceCache,
    ReferenceTiming,
    new_seeds,
)
from worker.engine.settings import EngineSettings
from worker.models import EvalOptions


class FakeJudge:
    def __init__(self) -> None:
        self.alive = True
        self.closed = threading.Event()

    def close(self) -> None:
        self.closed.set()


def _key(reference: str = "ref", settings: EngineSettings | None = None, **options) -> ProblemKey:
    return ProblemKey.of(reference, EvalOptions(**options), settings or EngineSettings(), shape_check=True)


def _cache(**schedule) -> ReferenceCache:
    schedule = {"max_age_s": 600.0, "max_uses": 100, "retime_s": 120.0, **schedule}
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


def test_reference_timing_is_reused_until_it_is_older_than_the_retime_interval():
    import time

    fresh = _cache()
    stale = _cache(retime_s=-1.0)
    entry = _entry(_key())
    assert not fresh.timing_fresh(entry)
    entry.timing = ReferenceTiming([1.0, 1.1], 2, time.monotonic())
    assert fresh.timing_fresh(entry) and not stale.timing_fresh(entry)


def test_least_recently_used_entries_are_evicted_past_the_size():
    cache = ReferenceCache(1, max_age_s=600.0, max_uses=100, retime_s=120.0)
    first = cache.add(_entry(_key("a")))
    cache.checkin(first, healthy=True)
    second = cache.add(_entry(_key("b")))
    cache.checkin(second, healthy=True)
    assert first.judge.closed.wait(30)
    assert cache.checkout(_key("a")) is None and cache.checkout(_key("b")) is second


def test_an_entry_evicted_while_a_job_holds_it_is_closed_only_after_that_job():
    cache = ReferenceCache(1, max_age_s=600.0, max_uses=100, retime_s=120.0)
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
    cache = ReferenceCache(0, max_age_s=600.0, max_uses=100, retime_s=120.0)
    entry = cache.add(_entry(_key()))
    assert not entry.cached
    cache.checkin(entry, healthy=True)
    assert entry.judge.closed.wait(30)
