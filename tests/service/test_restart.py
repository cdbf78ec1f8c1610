"""Jobs survive a restart of the API; jobs left in flight by a dead process are requeued once."""

from __future__ import annotations

import os
import uuid

import pytest

from service.helpers import USER_KEY, make_config, start_server
from service.sources import FAST_OPTIONS, REFERENCE, TRITON_CANDIDATE
from worker.jobs.launchers.embedded_launcher import embedded_prefix
from worker.jobs.store import JobStore

BODY = {"reference": REFERENCE, "candidate": TRITON_CANDIDATE, "options": FAST_OPTIONS}
POSTGRES_URL = os.environ.get("KERNELJUDGE_TEST_POSTGRES_URL")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'jobs.db'}"
    if not POSTGRES_URL:
        pytest.skip("KERNELJUDGE_TEST_POSTGRES_URL is not set (e.g. postgresql://kj@127.0.0.1:5439/kjtest)")
    return POSTGRES_URL


def test_jobs_survive_api_restart(tmp_path, database_url):
    config = make_config(tmp_path, database_url=database_url, local_workers=0)
    key = f"restart-{uuid.uuid4().hex}"  # unique: the PostgreSQL database outlives test runs
    first = start_server(config)
    with first.client() as client:
        job = client.post("/v1/evaluations", json=BODY, headers={"Idempotency-Key": key}).json()
    first.stop()

    second = start_server(config)
    try:
        with second.client() as client:
            read = client.get(f"/v1/evaluations/{job['id']}")
            assert read.status_code == 200 and read.json()["status"] == "queued"
            replay = client.post("/v1/evaluations", json=BODY, headers={"Idempotency-Key": key})
            assert replay.json()["id"] == job["id"]
    finally:
        second.stop()


def test_in_flight_jobs_of_a_dead_server_are_requeued_then_failed(tmp_path, database_url):
    config = make_config(tmp_path, database_url=database_url, local_workers=0)
    live = start_server(config)
    with live.client() as client:
        job_id = client.post("/v1/evaluations", json=BODY).json()["id"]
    live.stop()

    # Simulate a server that died mid-job: the job is `building` under this node's embedded worker.
    store = JobStore(database_url)
    claimed = store.claim(job_id, embedded_prefix() + "cpu0", None)[0]
    assert claimed.status == "building" and claimed.attempts == 1

    live = start_server(config)
    with live.client(USER_KEY) as client:
        requeued = client.get(f"/v1/evaluations/{job_id}").json()
        assert requeued["status"] == "queued" and "requeued" in requeued["error"]
    live.stop()

    # It dies again on its retry: the next start fails it with the reason instead of looping.
    store.claim(job_id, embedded_prefix() + "cpu0", None)
    live = start_server(config)
    try:
        with live.client(USER_KEY) as client:
            failed = client.get(f"/v1/evaluations/{job_id}").json()
            assert failed["status"] == "failed" and "retried once" in failed["error"]
    finally:
        live.stop()
        store.close()


@pytest.mark.parametrize("stage", ["building", "built", "running"])
def test_a_job_in_any_pipeline_stage_is_requeued_after_a_crash(tmp_path, stage):
    """A job claimed, prepared and waiting for its GPU, or running when the process died is not lost."""
    database_url = f"sqlite:///{tmp_path / 'jobs.db'}"
    config = make_config(tmp_path, database_url=database_url, local_workers=0)
    live = start_server(config)
    with live.client() as client:
        job_id = client.post("/v1/evaluations", json=BODY).json()["id"]
    live.stop()

    store = JobStore(database_url)
    claimed = store.claim(job_id, embedded_prefix() + "cpu0", None)[0]
    if stage in ("built", "running"):
        assert store.mark_built(job_id, claimed.attempts)
    if stage == "running":
        assert store.mark_running(job_id, claimed.attempts)
    assert store.get(job_id).status == ("running" if stage == "running" else "building")

    live = start_server(config)
    try:
        with live.client() as client:
            requeued = client.get(f"/v1/evaluations/{job_id}").json()
            assert requeued["status"] == "queued" and "requeued" in requeued["error"], requeued
    finally:
        live.stop()
        store.close()
