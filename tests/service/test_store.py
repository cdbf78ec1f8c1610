"""The job store on SQLite and (marked `postgres`) on a real PostgreSQL server."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from worker.jobs.store import MAX_ATTEMPTS, IdempotencyConflict, JobStore, NewJob


def _new(store: JobStore, key: str = "k", **fields) -> NewJob:
    # A fresh problem per test run keeps PostgreSQL runs independent of leftovers.
    problem, _ = store.put_problem(f"# problem {uuid.uuid4().hex}\nclass Model: pass\n")
    return NewJob(problem_id=problem.id, submission={"candidate": "x\x00y", "options": {}}, api_key_id=key, **fields)


def _drain(store: JobStore) -> None:
    # PostgreSQL is shared across runs: take every leftover queued job out of the way.
    while (job := store.claim_next("drain", None)) is not None:
        store.fail(job.id, "drained by test")


def _race(targets: list[Callable[[], Any]], timeout_s: float = 120.0) -> list[Any]:
    """Run each target in its own thread, concurrently; return their results in order.

    A thread's exception would otherwise only be printed as a warning: it fails the test here,
    as does a racer that did not finish with a result.
    """
    results: dict[int, Any] = {}
    errors: dict[int, BaseException] = {}

    def run(index: int, target: Callable[[], Any]) -> None:
        try:
            results[index] = target()
        except BaseException as exc:  # reported by the assertion below
            errors[index] = exc

    threads = [threading.Thread(target=run, args=(i, target)) for i, target in enumerate(targets)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout_s)
    assert not any(t.is_alive() for t in threads), f"racing threads still running after {timeout_s}s"
    assert not errors, f"racing threads raised: {errors!r}"
    assert sorted(results) == list(range(len(targets))), "every racer must finish with a result"
    return [results[i] for i in range(len(targets))]


def test_round_trip_keeps_nul_characters(store):
    job, created = store.create_job(_new(store))
    assert created and store.get(job.id).submission["candidate"] == "x\x00y"


def test_concurrent_claims_never_share_a_job(store):
    _drain(store)
    ids = {store.create_job(_new(store))[0].id for _ in range(12)}

    def worker(name: str) -> list[str]:
        mine: list[str] = []
        while (job := store.claim_next(name, None)) is not None:
            mine.append(job.id)
        return mine

    per_worker = _race([lambda name=f"w{i}": worker(name) for i in range(4)])
    claimed = [job_id for mine in per_worker for job_id in mine]
    assert sorted(claimed) == sorted(ids)  # each exactly once


def test_priority_then_age(store):
    _drain(store)
    low = store.create_job(_new(store, priority=0))[0]
    high = store.create_job(_new(store, priority=5))[0]
    assert store.claim_next("w", None).id == high.id
    assert store.claim_next("w", None).id == low.id


def test_idempotency_race_makes_one_job(store):
    new = _new(store, idempotency_key=f"key-{uuid.uuid4().hex}")

    def submit() -> str:
        return store.create_job(new)[0].id

    results = _race([submit] * 6)
    assert len(results) == 6 and all(results)
    assert len(set(results)) == 1
    other = NewJob(problem_id=new.problem_id, submission={"candidate": "other", "options": {}},
                   api_key_id="k", idempotency_key=new.idempotency_key)
    with pytest.raises(IdempotencyConflict):
        store.create_job(other)


def test_stale_attempt_cannot_overwrite_newer_state(store):
    _drain(store)
    job = store.create_job(_new(store))[0]
    first = store.claim_next("w1", None)
    assert first.id == job.id and first.attempts == 1
    # The first worker is presumed dead; the job is delivered again and claimed by attempt 2.
    second, why = store.claim(job.id, "w2", None)
    assert why == "claimed" and second.attempts == 2
    assert not store.finish(job.id, 1, {"status": "ok"}, "ok")
    assert store.finish(job.id, 2, {"status": "ok"}, "ok")
    assert store.get(job.id).status == "done"
    assert store.claim(job.id, "w3", None) == (None, "job is already done")


def test_worker_dying_twice_fails_the_job(store):
    _drain(store)
    job = store.create_job(_new(store))[0]
    for attempt in range(1, MAX_ATTEMPTS + 1):
        claimed, _ = store.claim(job.id, f"w{attempt}", None)
        assert claimed.attempts == attempt
    gone, why = store.claim(job.id, "w-last", None)
    assert gone is None and "final attempt" in why
    final = store.get(job.id)
    assert final.status == "failed" and "retried once" in final.error


def test_recover_orphans_requeues_once_then_fails(store):
    _drain(store)
    prefix = f"embedded@test-{uuid.uuid4().hex[:8]}:"
    job = store.create_job(_new(store))[0]
    store.claim_next(prefix + "cpu0", None)
    assert store.recover_orphans(prefix) == ([job.id], 0)
    again = store.get(job.id)
    assert again.status == "queued" and "requeued" in again.error
    store.claim_next(prefix + "cpu0", None)
    assert store.recover_orphans(prefix) == ([], 1)
    assert store.get(job.id).status == "failed"


def test_fail_overdue(store):
    _drain(store)
    job = store.create_job(_new(store))[0]
    store.claim_next("w", None)
    assert store.fail_overdue(3600) == 0
    assert store.fail_overdue(-1) >= 1
    assert "presumed dead" in store.get(job.id).error


def test_export_pages_in_order(store):
    key = f"export-{uuid.uuid4().hex}"
    made = [store.create_job(_new(store, key=key, result={"status": "ok"}, verdict="ok"))[0].id for _ in range(7)]
    assert [job.id for job in store.iter_jobs(api_key_id=key, page=3)] == made
