"""The distributed path: API -> Redis -> `kerneljudge worker` (Celery) -> engine, against a real redis-server.

Set KERNELJUDGE_TEST_REDIS_URL (e.g. redis://127.0.0.1:6390/0); start one with
`redis-server --port 6390 --daemonize yes`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from service.helpers import LiveServer, make_config, poll_until, start_server
from service.sources import FAST_OPTIONS, REFERENCE, TRITON_CANDIDATE

pytestmark = pytest.mark.redis

REDIS_URL = os.environ.get("KERNELJUDGE_TEST_REDIS_URL")
REPO_ROOT = Path(__file__).resolve().parents[2]
BODY = {"reference": REFERENCE, "candidate": TRITON_CANDIDATE, "options": FAST_OPTIONS}


@pytest.fixture
def cluster(tmp_path):
    """An API in Celery mode plus one CPU `kerneljudge worker`, sharing a SQLite store."""
    if not REDIS_URL:
        pytest.skip("KERNELJUDGE_TEST_REDIS_URL is not set (start redis-server and point it there)")
    database_url = f"sqlite:///{tmp_path / 'jobs.db'}"
    env = dict(os.environ, KERNELJUDGE_DATA_DIR=str(tmp_path), KERNELJUDGE_DATABASE_URL=database_url)
    worker = subprocess.Popen(
        [sys.executable, "-m", "kerneljudge.cli", "worker", "--broker", REDIS_URL, "--device", "cpu",
         "--loglevel", "WARNING"],
        cwd=REPO_ROOT, env=env, start_new_session=True,
    )
    api = start_server(make_config(tmp_path, database_url=database_url, broker_url=REDIS_URL))
    try:
        with api.client(key=None) as client:
            poll_until(lambda: client.get("/v1/ready").status_code, lambda code: code == 200, timeout_s=60,
                       interval_s=0.5)
        yield api
    finally:
        api.stop()
        os.killpg(worker.pid, signal.SIGTERM)  # the supervisor's own process group
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(10)


def _kill_running_attempt(api: LiveServer, job_id: str, attempt: int) -> None:
    """SIGKILL the Celery pool process running `attempt` of the job (its pid is in the worker name)."""
    with api.client() as client:
        job = poll_until(lambda: client.get(f"/v1/evaluations/{job_id}").json(),
                         lambda j: j["status"] in ("building", "running") and j["attempts"] == attempt,
                         interval_s=0.02)
    pid = int(job["worker"].rsplit(":", 1)[1])
    os.kill(pid, signal.SIGKILL)


def test_job_flows_end_to_end(cluster):
    with cluster.client() as client:
        job = client.post("/v1/evaluations", params={"wait": 170}, json=BODY).json()
        assert job["status"] == "done", job
        assert job["result"]["status"] == "ok" and job["worker"].startswith("celery@")
        assert job["building_at"] <= job["built_at"] <= job["running_at"]  # stamped by the pipeline


def test_one_worker_process_pipelines_several_jobs(cluster):
    """The Celery worker runs the embedded workers' pipeline: a second job starts before the first ends."""
    with cluster.client() as client:
        ids = [client.post("/v1/evaluations", json=BODY).json()["id"] for _ in range(2)]
        jobs = [client.get(f"/v1/evaluations/{job_id}", params={"wait": 170}).json() for job_id in ids]
    assert [job["status"] for job in jobs] == ["done", "done"], jobs
    assert jobs[0]["worker"] == jobs[1]["worker"]
    first, second = sorted(jobs, key=lambda job: job["building_at"])
    assert second["building_at"] < first["finished_at"]


def test_killed_worker_job_is_retried_and_finishes(cluster):
    with cluster.client() as client:
        job_id = client.post("/v1/evaluations", json=BODY).json()["id"]
        _kill_running_attempt(cluster, job_id, attempt=1)
        final = client.get(f"/v1/evaluations/{job_id}", params={"wait": 170}).json()
        assert final["status"] == "done" and final["attempts"] == 2, final
        assert final["result"]["status"] == "ok"


def test_job_whose_worker_dies_twice_fails_with_reason(cluster):
    with cluster.client() as client:
        job_id = client.post("/v1/evaluations", json=BODY).json()["id"]
        _kill_running_attempt(cluster, job_id, attempt=1)
        _kill_running_attempt(cluster, job_id, attempt=2)
        final = client.get(f"/v1/evaluations/{job_id}", params={"wait": 120}).json()
        assert final["status"] == "failed", final
        assert "retried once" in final["error"]
