"""KernelJudgeClient / AsyncKernelJudgeClient against the in-process fake API."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import httpx
import pytest

from client.conftest import GOOD, REFERENCE, WRONG
from contract.statuses import EvalStatus, JobStatus
from kerneljudge.client import KernelJudgeClient
from kerneljudge.errors import (
    ApiError,
    EvaluationTimeoutError,
    JobFailedError,
    ServiceUnavailableError,
)


def test_evaluate_returns_typed_result(client, api):
    result = client.evaluate(REFERENCE, GOOD, options={"reward_preset": "kevin"})
    assert result.status is EvalStatus.ok
    assert result.speedup == 4.0
    assert result.reward == pytest.approx(0.3 + 4.0)
    body = json.loads(api.requests[0].content)
    assert body == {"reference": REFERENCE, "candidate": GOOD, "options": {"reward_preset": "kevin"}}
    assert api.requests[0].headers["authorization"] == "Bearer secret"
    assert api.requests[0].url.params["wait"] == "30"


def test_submit_then_wait_polls_until_done(client, api, clock):
    job = client.submit(REFERENCE, WRONG)
    assert job.status is JobStatus.queued and job.created_at is not None
    done = client.wait(job.id, timeout=30)
    assert done.status is JobStatus.done and done.result.status is EvalStatus.incorrect
    assert len(clock.sleeps) >= 1


def test_wait_returns_latest_state_at_deadline(client, api):
    api.reads_to_finish = 10**6
    job = client.submit(REFERENCE, GOOD)
    latest = client.wait(job.id, timeout=2)
    assert latest.status is JobStatus.running and not latest.finished


def test_evaluate_raises_timeout_and_failure(client, api):
    api.reads_to_finish = 10**6
    with pytest.raises(EvaluationTimeoutError, match="still running"):
        client.evaluate(REFERENCE, GOOD, timeout=3)
    api.reads_to_finish = 1
    api.fail_jobs = True
    with pytest.raises(JobFailedError, match="failed: worker died twice"):
        client.evaluate(REFERENCE, GOOD)


def test_completion_and_problem_id(client, api):
    problem = client.register_problem(REFERENCE)
    assert client.get_problem(problem.id).id == problem.id
    result = client.evaluate(problem_id=problem.id, completion=f"Sure:\n```python\n{GOOD}```\n")
    assert result.correct
    submitted = json.loads(next(r for r in api.requests if r.url.path == "/v1/evaluations").content)
    assert submitted["problem_id"] == problem.id and "reference" not in submitted


def test_submit_needs_one_reference_and_one_candidate(client):
    with pytest.raises(ValueError, match="exactly one of `reference`"):
        client.submit(candidate=GOOD)
    with pytest.raises(ValueError, match="exactly one of `candidate`"):
        client.submit(REFERENCE, GOOD, completion="x")


def test_retries_429_honouring_retry_after_then_succeeds(client, api, clock):
    api.script = [httpx.Response(429, headers={"Retry-After": "7"}, json={"detail": "rate limited"}),
                  httpx.Response(503, json={"detail": "queue full"})]
    job = client.submit(REFERENCE, GOOD)
    assert job.status is JobStatus.queued
    assert clock.sleeps[0] >= 7.0
    assert len(api.jobs) == 1
    keys = {r.headers["idempotency-key"] for r in api.requests}
    assert len(keys) == 1, "every retry of one submission carries the same Idempotency-Key"


def test_connection_error_retried_with_growing_backoff(client, api, clock):
    api.script = [httpx.ConnectError("refused")] * 4
    client.get_many([])  # no ids: no request
    job = client.submit(REFERENCE, GOOD)
    assert job.id in api.jobs
    assert len(clock.sleeps) == 4
    # full jitter within [b/2, b] of an exponential base 0.25s
    for attempt, delay in enumerate(clock.sleeps, start=1):
        base = 0.25 * 2 ** (attempt - 1)
        assert base / 2 <= delay <= base


def test_gives_up_when_retry_after_exceeds_deadline(client, api):
    api.script = [httpx.Response(429, headers={"Retry-After": "120"}, json={"detail": "slow down"})]
    with pytest.raises(ServiceUnavailableError, match="deadline passes before the next retry"):
        client.submit(REFERENCE, GOOD, timeout=10)


def test_gives_up_after_max_attempts(api, clock):
    api.script = [httpx.ConnectError("refused")] * 50
    from kerneljudge._protocol import RetryPolicy

    with KernelJudgeClient("http://judge.test", "secret", transport=api.transport(), clock=clock,
                           sleep=clock.sleep, retry=RetryPolicy(max_attempts=3)) as c:
        with pytest.raises(ServiceUnavailableError, match="failed 3 times.*ConnectError"):
            c.get("job-1")


def test_client_errors_are_not_retried_and_explain(client, api):
    with pytest.raises(ApiError) as info:
        client.submit(problem_id="nope", candidate=GOOD)
    assert info.value.status_code == 422 and "problem_id: unknown problem nope" in str(info.value)
    assert len(api.requests) == 1
    bad = KernelJudgeClient("http://judge.test", "wrong", transport=api.transport())
    with pytest.raises(ApiError, match="401.*KERNELJUDGE_API_KEY"):
        bad.get("job-1")


def test_batch_submit_chunks_and_reports_inline_errors(api, clock):
    with KernelJudgeClient("http://judge.test", "secret", transport=api.transport(), clock=clock,
                           sleep=clock.sleep, batch_size=3) as c:
        items = [{"reference": REFERENCE, "candidate": GOOD}] * 4 + [{"problem_id": "missing", "candidate": GOOD}]
        entries = c.submit_many(items)
        assert [e.index for e in entries] == [0, 1, 2, 3, 4]
        assert [e.accepted for e in entries] == [True, True, True, True, False]
        assert "unknown problem" in entries[4].error.message
        batch_calls = [r for r in api.requests if r.url.path.endswith(":batch")]
        assert len(batch_calls) == 2
        progress = []
        jobs = c.wait_many([e.job.id for e in entries[:4]], timeout=30,
                           on_progress=lambda done, total: progress.append((done, total)))
        assert all(j.status is JobStatus.done for j in jobs)
        assert [j.id for j in jobs] == [e.job.id for e in entries[:4]]
        assert progress[-1] == (4, 4)


def test_get_many_unknown_id_is_an_error(client):
    with pytest.raises(ApiError, match="does not know job"):
        client.get_many(["ghost"])


def test_cancel(client, api):
    job = client.submit(REFERENCE, GOOD)
    assert client.cancel(job.id).status is JobStatus.cancelled
    with pytest.raises(JobFailedError, match="cancelled"):
        from kerneljudge.client import _result_of

        _result_of(client.get(job.id), 1)
    api.reads_to_finish = 1
    other = client.submit(REFERENCE, GOOD)
    client.get(other.id)
    with pytest.raises(ApiError, match="409"):
        client.cancel(other.id)


def test_server_wait_finishes_in_one_request(api, client):
    api.finish_on_wait = True
    assert client.evaluate(REFERENCE, GOOD).correct
    assert len(api.requests) == 1


def test_async_client_same_behaviour(make_async_client, api, clock):
    async def scenario():
        async with make_async_client(batch_size=2) as c:
            api.script = [httpx.Response(503, headers={"Retry-After": "1"}, json={"detail": "full"})]
            result = await c.evaluate(REFERENCE, GOOD)
            entries = await c.submit_many([{"reference": REFERENCE, "candidate": WRONG}] * 3)
            jobs = await c.wait_many([e.job.id for e in entries], timeout=30)
            cancelled = await c.cancel((await c.submit(REFERENCE, GOOD)).id)
            problem = await c.register_problem(REFERENCE)
            return result, jobs, cancelled, problem

    result, jobs, cancelled, problem = asyncio.run(scenario())
    assert result.correct and clock.sleeps[0] >= 1.0
    assert [j.result.status for j in jobs] == [EvalStatus.incorrect] * 3
    assert cancelled.status is JobStatus.cancelled
    assert problem.id.startswith("p_")


def test_env_configuration(monkeypatch, api):
    monkeypatch.setenv("KERNELJUDGE_URL", "http://from-env.test/")
    monkeypatch.setenv("KERNELJUDGE_API_KEY", "secret")
    with KernelJudgeClient(transport=api.transport()) as c:
        c.submit(REFERENCE, GOOD)
    assert str(api.requests[0].url).startswith("http://from-env.test/v1/evaluations")


def test_retry_after_http_date():
    from kerneljudge._protocol import parse_retry_after

    assert parse_retry_after("Wed, 21 Oct 2015 07:28:10 GMT", now=1445412480.0) == pytest.approx(10.0)
    assert parse_retry_after("garbage") is None and parse_retry_after("3") == 3.0


def test_client_imports_without_torch_or_celery():
    code = ("import sys, kerneljudge.client, kerneljudge.adapters.openrlhf, kerneljudge.adapters.verl, "
            "kerneljudge.adapters.trl, kerneljudge.adapters.verifiers, kerneljudge.cli_client;"
            "bad=[m for m in ('torch','celery','fastapi','sqlalchemy') if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)
