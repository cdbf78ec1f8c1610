"""A problem carries its jobs' default policy profile and what evaluations measured about it."""

from __future__ import annotations

import sqlite3

import pytest

from worker.jobs.engine_call import WorkerIdentity, build_request
from worker.jobs.store import JobStore, NewJob

# Each test needs an empty store of its own: tests/conftest.py's `store`, on SQLite only.
pytestmark = pytest.mark.sqlite_store

REFERENCE = "import torch\nclass Model(torch.nn.Module):\n    pass\n"
CPU_WORKER = WorkerIdentity(name="test", device="cpu")


def _job(store: JobStore, problem_id: str, options: dict):
    job, _ = store.create_job(NewJob(problem_id=problem_id, submission={"candidate": "x", "options": options},
                                     api_key_id="k"))
    return job


def test_a_job_without_a_profile_gets_its_problems(store):
    problem, created = store.put_problem(REFERENCE, profile="full")
    assert created and problem.profile == "full"
    request = build_request(_job(store, problem.id, {}), store.get_problem(problem.id), CPU_WORKER)
    assert request.options.policy.profile == "full"


def test_a_job_that_names_a_profile_keeps_it(store):
    problem, _ = store.put_problem(REFERENCE, profile="full")
    request = build_request(_job(store, problem.id, {"policy": {"profile": "partial"}}), problem, CPU_WORKER)
    assert request.options.policy.profile == "partial"


def test_registering_again_updates_the_profile_and_keeps_the_problem(store):
    first, _ = store.put_problem(REFERENCE)
    again, created = store.put_problem(REFERENCE, profile="full")
    assert not created and again.id == first.id
    assert store.get_problem(first.id).profile == "full"


def test_degeneracy_is_unknown_until_measured(store):
    problem, _ = store.put_problem(REFERENCE)
    assert problem.degenerate_reference is None
    store.note_degenerate_reference(problem.id, True)
    assert store.get_problem(problem.id).degenerate_reference is True


def test_a_store_made_before_these_columns_existed_gets_them(tmp_path):
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE problems (id VARCHAR(64) PRIMARY KEY, reference TEXT NOT NULL, "
                     "name VARCHAR(200), created_at FLOAT NOT NULL)")
        conn.execute("INSERT INTO problems VALUES ('abc', 'ref', NULL, 1.0)")
    store = JobStore(f"sqlite:///{path}")
    try:
        old = store.get_problem("abc")
        assert old.reference == "ref" and old.profile is None and old.degenerate_reference is None
    finally:
        store.close()


def test_the_api_reports_profile_and_degeneracy(queued_server):
    with queued_server.client() as client:
        reply = client.post("/v1/problems", json={"reference": REFERENCE, "profile": "full"})
        assert reply.status_code == 201, reply.text
        body = reply.json()
        assert body["profile"] == "full" and body["degenerate_reference"] is None
        assert client.get(f"/v1/problems/{body['id']}").json()["profile"] == "full"
        bad = client.post("/v1/problems", json={"reference": REFERENCE, "profile": "strict"})
        assert bad.status_code == 422
