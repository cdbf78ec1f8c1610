"""A registered problem belongs to the key that registered it: another key's registration of the
same source never changes what the owner's jobs get (the issue: key B re-registered key A's
problem with another profile, and one of A's rejected candidates became ok)."""

from __future__ import annotations

import sqlite3
import uuid

from service.helpers import ADMIN_KEY, OTHER_KEY, USER_KEY
from service.sources import REFERENCE, TRITON_CANDIDATE
from worker.config.api_keys import key_id_for
from worker.jobs.engine_call import WorkerIdentity, build_request
from worker.jobs.store import JobStore, NewJob, problem_id_for

CPU_WORKER = WorkerIdentity(name="test", device="cpu")
A, B = key_id_for(USER_KEY), key_id_for(OTHER_KEY)
# Its own kernel adds one; then PyTorch multiplies by one: library compute, which the full profile
# rejects (KJ-R11) and the partial one accepts with a lower coverage.
LIBRARY_COMPUTE_CANDIDATE = TRITON_CANDIDATE.replace("        return out\n", "        return out * 1.0\n")
UNTIMED = {"trials": 1, "timing": False}


def _profile_for(store: JobStore, problem_id: str, key_id: str, options: dict | None = None) -> str | None:
    job, _ = store.create_job(NewJob(problem_id=problem_id, api_key_id=key_id,
                                     submission={"candidate": "x", "options": options or {}}))
    request = build_request(job, store.get_problem(problem_id, job.api_key_id), CPU_WORKER)
    return request.options.policy.profile


def test_the_attack_is_contained_end_to_end(working_server):
    """Real evaluations on the CPU worker: A's candidate stays rejected after B's registration."""
    with working_server.client(USER_KEY) as a, working_server.client(OTHER_KEY) as b:
        mine = a.post("/v1/problems", json={"reference": REFERENCE, "name": "add_one", "profile": "full"})
        assert mine.status_code == 201 and mine.json()["registered_by_you"] is True, mine.text
        problem_id = mine.json()["id"]

        theirs = b.post("/v1/problems", json={"reference": REFERENCE, "name": "renamed", "profile": "partial"})
        assert theirs.status_code == 200, theirs.text
        seen_by_b = theirs.json()
        assert seen_by_b["registered_by_you"] is False and seen_by_b["name"] == "add_one"
        assert seen_by_b["profile"] == "partial"  # B's own choice, for B's jobs
        assert "name is kept" in seen_by_b["note"] and "this key's jobs only" in seen_by_b["note"]

        assert a.get(f"/v1/problems/{problem_id}").json()["profile"] == "full"
        body = {"problem_id": problem_id, "candidate": LIBRARY_COMPUTE_CANDIDATE, "options": UNTIMED}
        a_job = a.post("/v1/evaluations", params={"wait": 170}, json=body).json()
        b_job = b.post("/v1/evaluations", params={"wait": 170}, json=body).json()
    assert a_job["result"]["status"] == "rejected", a_job
    assert "KJ-R11-library-compute" in {hit["rule"] for hit in a_job["result"]["rules"]}
    assert b_job["result"]["status"] == "ok", b_job


def test_a_submission_with_the_reference_never_changes_the_problem(queued_server):
    with queued_server.client(USER_KEY) as a, queued_server.client(OTHER_KEY) as b:
        problem_id = a.post("/v1/problems", json={"reference": REFERENCE, "profile": "full"}).json()["id"]
        job = b.post("/v1/evaluations", json={"reference": REFERENCE, "candidate": TRITON_CANDIDATE})
        assert job.status_code == 202 and job.json()["problem_id"] == problem_id
        assert a.get(f"/v1/problems/{problem_id}").json()["profile"] == "full"
        assert b.get(f"/v1/problems/{problem_id}").json()["profile"] == "partial"


def test_a_problem_first_seen_in_a_submission_is_owned_by_its_key(queued_server):
    with queued_server.client(OTHER_KEY) as b, queued_server.client(USER_KEY) as a:
        problem_id = b.post("/v1/evaluations", json={"reference": REFERENCE, "candidate": TRITON_CANDIDATE}
                            ).json()["problem_id"]
        assert b.post("/v1/problems", json={"reference": REFERENCE}).json()["registered_by_you"] is True
        assert a.get(f"/v1/problems/{problem_id}").json()["registered_by_you"] is False


def test_owner_changes_its_settings_and_an_admin_renames(queued_server):
    with queued_server.client(USER_KEY) as a, queued_server.client(ADMIN_KEY) as admin:
        a.post("/v1/problems", json={"reference": REFERENCE, "name": "first", "profile": "partial"})
        again = a.post("/v1/problems", json={"reference": REFERENCE, "name": "second", "profile": "full"}).json()
        assert (again["name"], again["profile"], again["note"]) == ("second", "full", None)
        renamed = admin.post("/v1/problems", json={"reference": REFERENCE, "name": "by_admin", "profile": "partial"})
        assert renamed.status_code == 200 and renamed.json()["name"] == "by_admin"
        assert renamed.json()["profile"] == "partial"  # the admin's own profile
        owner_view = a.get(f"/v1/problems/{again['id']}").json()
        assert (owner_view["name"], owner_view["profile"]) == ("by_admin", "full")


def test_batch_registration_follows_the_same_rules(queued_server):
    with queued_server.client(USER_KEY) as a, queued_server.client(OTHER_KEY) as b:
        a.post("/v1/problems", json={"reference": REFERENCE, "profile": "full"})
        reply = b.post("/v1/problems:batch", json={"items": [{"reference": REFERENCE, "profile": "partial"}]}).json()
        item = reply["items"][0]
        assert item["created"] is False and item["problem"]["note"] and item["problem"]["profile"] == "partial"
        assert a.post("/v1/problems", json={"reference": REFERENCE}).json()["profile"] == "full"


def test_each_keys_jobs_get_their_own_profile(store):
    reference = REFERENCE + f"# {uuid.uuid4().hex}\n"  # PostgreSQL is shared across runs
    problem, created = store.put_problem(reference, profile="full", key_id=A)
    assert created and problem.owner_key_id == A
    store.put_problem(reference, name="theirs", profile="partial", key_id=B)
    assert _profile_for(store, problem.id, A) == "full"
    assert _profile_for(store, problem.id, B) == "partial"
    # A key that chose nothing gets the default, not the owner's choice; a job's own option wins.
    assert _profile_for(store, problem.id, "key_third") is None
    assert _profile_for(store, problem.id, A, {"policy": {"profile": "partial"}}) == "partial"
    assert store.get_problem(problem.id).name is None  # B's name was not applied


def test_a_store_made_before_owners_were_recorded_keeps_its_problems_profiles(tmp_path):
    """Upgrade: the owner column is added (the store's migrations); an ownerless problem's profile still
    applies to every key's jobs, and only the operator (no key) changes it."""
    path, pid = tmp_path / "old.db", problem_id_for("ref")
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE problems (id VARCHAR(64) PRIMARY KEY, reference TEXT NOT NULL, "
                     "name VARCHAR(200), created_at FLOAT NOT NULL, profile VARCHAR(16))")
        conn.execute("INSERT INTO problems VALUES (?, 'ref', 'old', 1.0, 'full')", (pid,))
    store = JobStore(f"sqlite:///{path}")
    try:
        assert store.get_problem(pid).owner_key_id is None
        assert _profile_for(store, pid, A) == "full" and _profile_for(store, pid, B) == "full"
        _, created = store.put_problem("ref", name="mine", profile="partial", key_id=B)  # B's choice is B's only
        assert not created
        assert _profile_for(store, pid, B) == "partial" and _profile_for(store, pid, A) == "full"
        assert store.get_problem(pid).name == "old"
        store.put_problem("ref", profile="partial")  # the operator (`serve --problems`) changes it
        assert _profile_for(store, pid, A) == "partial"
    finally:
        store.close()
