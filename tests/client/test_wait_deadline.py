"""`wait_many` at its deadline returns every job's latest state; it never raises for the timeout itself.

The fault it guards against: the poll slept until the deadline, then read with a timeout of about
1 ms; the read timed out and the exception threw away every state read until then (a trainer batch
voided by one slow sample; a GPU benchmark that counted 0 of 128).
"""

from __future__ import annotations

import asyncio
import itertools

import httpx
import pytest

from client.conftest import GOOD, REFERENCE, WRONG
from kerneljudge.client import FINAL_READ_S, KernelJudgeClient
from kerneljudge.errors import ApiError, ServiceUnavailableError

HANGS = GOOD + "# never finishes\n"


def submit_three(client) -> list[str]:
    entries = client.submit_many([{"reference": REFERENCE, "candidate": c} for c in (GOOD, HANGS, WRONG)])
    return [e.job.id for e in entries]


# Timeouts around the poll intervals and read latencies, so that the deadline falls before, during and
# after a read, and between polls.
TIMEOUTS = [0.0, 0.001, 0.05, 0.19, 0.2, 0.21, 0.5, 0.99, 1.0, 1.3, 2.0, 3.7, 7.5]
LATENCIES = [0.0, 0.01, 0.3, 1.0, 4.0]


@pytest.mark.parametrize("latency", LATENCIES)
def test_wait_many_returns_every_job_at_any_deadline(api, clock, latency):
    api.clock, api.read_latency_s = clock, latency
    with KernelJudgeClient("http://judge.test", "secret", transport=api.transport(), clock=clock,
                           sleep=clock.sleep) as client:
        for timeout in TIMEOUTS:
            ids = submit_three(client)
            jobs = client.wait_many(ids, timeout=timeout)
            assert [job.id for job in jobs] == ids
            assert not jobs[1].finished  # the one that never finishes is returned in its latest state
            # A deadline after two reads of each job sees the others finished (the fake finishes on read 2).
            if timeout >= 2.0 + 2 * latency:
                assert jobs[0].finished and jobs[2].finished
                assert jobs[0].result.speedup == 4.0 and jobs[2].result.status.value == "incorrect"


def test_a_read_at_the_deadline_gets_a_real_timeout(api, clock):
    api.clock, api.read_latency_s = clock, 1.5  # every answer takes 1.5 s: the old 1 ms read always failed
    with KernelJudgeClient("http://judge.test", "secret", transport=api.transport(), clock=clock,
                           sleep=clock.sleep) as client:
        ids = submit_three(client)
        started = clock.now
        jobs = client.wait_many(ids, timeout=2.0)
        assert [j.finished for j in jobs] == [True, False, True]
        # It returned within the deadline plus one read's own budget.
        assert clock.now - started <= 2.0 + FINAL_READ_S


def test_a_failed_read_after_every_job_was_read_returns_the_latest_states(api, clock, caplog):
    with KernelJudgeClient("http://judge.test", "secret", transport=api.transport(), clock=clock,
                           sleep=clock.sleep, timeout=60) as client:
        ids = submit_three(client)
        # The first read answers (every job has a state: running); then the server goes away.
        api.script = [lambda request: None] + [httpx.ConnectError("refused")] * 100
        with caplog.at_level("WARNING", "kerneljudge.client"):
            jobs = client.wait_many(ids, timeout=30)
        assert [j.id for j in jobs] == ids and [j.status.value for j in jobs] == ["running"] * 3
        assert "returning the latest states" in caplog.text


def test_a_server_error_mid_wait_keeps_the_finished_jobs(api, clock):
    with KernelJudgeClient("http://judge.test", "secret", transport=api.transport(), clock=clock,
                           sleep=clock.sleep, timeout=60) as client:
        ids = submit_three(client)
        reads = itertools.count()

        def third_read_fails(request: httpx.Request):
            return httpx.Response(500, json={"detail": "boom"}) if next(reads) == 2 else None

        api.script = [third_read_fails] * 3
        jobs = client.wait_many(ids, timeout=30)
        assert [j.finished for j in jobs] == [True, False, True]


def test_no_answer_at_all_still_raises(api, clock):
    with KernelJudgeClient("http://judge.test", "secret", transport=api.transport(), clock=clock,
                           sleep=clock.sleep, timeout=60) as client:
        ids = submit_three(client)
        api.script = [httpx.ConnectError("refused")] * 100
        with pytest.raises(ServiceUnavailableError, match="cannot reach"):
            client.wait_many(ids, timeout=5)


def test_unknown_ids_still_raise(client):
    with pytest.raises(ApiError, match="does not know job"):
        client.wait_many(["job-404"], timeout=5)


@pytest.mark.parametrize("latency", [0.0, 0.3, 4.0])
def test_async_wait_many_returns_every_job_at_any_deadline(api, clock, make_async_client, latency):
    api.clock, api.read_latency_s = clock, latency

    async def scenario() -> None:
        async with make_async_client() as client:
            for timeout in TIMEOUTS:
                entries = await client.submit_many([{"reference": REFERENCE, "candidate": c}
                                                    for c in (GOOD, HANGS, WRONG)])
                ids = [e.job.id for e in entries]
                jobs = await client.wait_many(ids, timeout=timeout)
                assert [job.id for job in jobs] == ids and not jobs[1].finished
                if timeout >= 2.0 + 2 * latency:
                    assert jobs[0].finished and jobs[2].finished

    asyncio.run(scenario())
