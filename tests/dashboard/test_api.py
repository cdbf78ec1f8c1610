"""/v1/dashboard/... on a real server whose CPU worker evaluated real jobs (see conftest.py)."""

from __future__ import annotations

from datetime import datetime

import pytest

from dashboard.conftest import PROBLEM_NAME, SPAWNING_CANDIDATE, EvaluatedServer
from tests.service.helpers import ADMIN_KEY, OTHER_KEY, USER_KEY, make_config, start_server
from worker.config.api_keys import key_id_for
from worker.jobs.store import JobStore, NewJob

ENDPOINTS = ["session", "live", "outcomes", "speedups", "rules", "stages", "jobs", "jobs/some-id"]


def _get(evaluated: EvaluatedServer, path: str, key: str | None = USER_KEY):
    with evaluated.client(key) as client:
        response = client.get(f"/v1/dashboard/{path}")
    assert response.status_code == 200, response.text
    return response.json()


def _totals(series: dict) -> dict[str, int]:
    return {s["outcome"]: sum(s["counts"]) for s in series["series"]}


@pytest.mark.parametrize("path", ENDPOINTS)
def test_every_endpoint_needs_a_valid_key(evaluated, path):
    for key in (None, "not-a-key"):
        with evaluated.client(key) as client:
            response = client.get(f"/v1/dashboard/{path}")
        assert response.status_code == 401, response.text
        assert response.headers["WWW-Authenticate"] == "Bearer"


def test_access_tells_the_page_a_key_is_required_without_one(evaluated):
    with evaluated.client(None) as client:
        assert client.get("/v1/dashboard/access").json() == {"key_required": True}


def test_session_names_whose_jobs_are_shown(evaluated):
    assert _get(evaluated, "session")["scope"] == "own_key"
    admin = _get(evaluated, "session", ADMIN_KEY)
    assert (admin["scope"], admin["admin"]) == ("all_keys", True)


def test_outcomes_count_each_keys_finished_jobs_by_verdict(evaluated):
    series = _get(evaluated, "outcomes?hours=1&buckets=12")
    assert len(series["bucket_starts"]) == 12 and series["bucket_s"] == pytest.approx(300.0)
    starts = [datetime.fromisoformat(s.replace("Z", "+00:00")) for s in series["bucket_starts"]]
    assert all((b - a).total_seconds() == pytest.approx(300.0) for a, b in zip(starts, starts[1:], strict=False))
    assert _totals(series) == {"ok": 2, "incorrect": 1, "rejected": 1, "invalid_input": 1}
    assert _totals(_get(evaluated, "outcomes?hours=1", OTHER_KEY)) == {"invalid_input": 1}
    assert _totals(_get(evaluated, "outcomes?hours=1", ADMIN_KEY)) == {
        "ok": 2, "incorrect": 1, "rejected": 1, "invalid_input": 2}


def test_speedups_summarise_the_timed_jobs(evaluated):
    speedups = [evaluated.jobs[kind]["result"]["speedup"] for kind in ("timed_1", "timed_2")]
    assert all(s is not None and s > 0 for s in speedups)
    (row,) = _get(evaluated, "speedups")
    assert (row["problem_id"], row["problem_name"], row["count"]) == (evaluated.problem_id, PROBLEM_NAME, 2)
    assert (row["min"], row["max"]) == (pytest.approx(min(speedups)), pytest.approx(max(speedups)))
    assert row["min"] <= row["p25"] <= row["median"] <= row["p75"] <= row["max"]
    assert _get(evaluated, "speedups", OTHER_KEY) == []


def test_rules_are_those_the_rejected_job_fired_with_it_as_example(evaluated):
    spawning = evaluated.jobs["spawning"]
    hits = spawning["result"]["rules"]
    assert hits, "the spawning candidate must fire a rule"
    rules = _get(evaluated, "rules")
    assert {r["rule"] for r in rules} == {h["rule"] for h in hits}
    for row in rules:
        first_hit = min((h for h in hits if h["rule"] == row["rule"]), key=lambda h: h["line"])
        assert (row["jobs"], row["example_job_id"]) == (1, spawning["id"])
        assert (row["severity"], row["message"], row["line"], row["evidence"]) == (
            first_hit["severity"], first_hit["message"], first_hit["line"], first_hit["evidence"])
    assert _get(evaluated, "rules", OTHER_KEY) == []


def test_stages_summarise_every_finished_evaluation(evaluated):
    per_stage: dict[str, dict[str, float]] = {}
    for job in evaluated.jobs.values():
        for stage, seconds in job["result"]["stages"].items():
            per_stage.setdefault(stage, {})[job["id"]] = seconds
    rows = _get(evaluated, "stages")
    assert {r["stage"] for r in rows} == set(per_stage)
    for row in rows:
        seconds = per_stage[row["stage"]]
        assert row["count"] == len(seconds)
        assert row["max_s"] == pytest.approx(max(seconds.values()))
        assert seconds[row["slowest_job_id"]] == pytest.approx(row["max_s"])
        assert row["mean_s"] == pytest.approx(sum(seconds.values()) / len(seconds))
    assert [r["p95_s"] for r in rows] == sorted((r["p95_s"] for r in rows), reverse=True)


def test_recent_jobs_newest_first_and_filtered_by_outcome(evaluated):
    jobs = _get(evaluated, "jobs")
    assert {j["id"] for j in jobs} == {j["id"] for j in evaluated.jobs.values()}
    assert [j["created_at"] for j in jobs] == sorted((j["created_at"] for j in jobs), reverse=True)
    rejected = _get(evaluated, "jobs?outcome=rejected")
    assert [(j["id"], j["rules_fired"]) for j in rejected] == [
        (evaluated.jobs["spawning"]["id"], len(evaluated.jobs["spawning"]["result"]["rules"]))]
    assert len(_get(evaluated, "jobs?limit=2")) == 2
    assert len(_get(evaluated, "jobs", ADMIN_KEY)) == len(evaluated.jobs) + 1


def test_job_detail_has_result_and_candidate_source_for_its_owner_only(evaluated):
    spawning = evaluated.jobs["spawning"]
    detail = _get(evaluated, f"jobs/{spawning['id']}")
    assert detail["candidate"] == SPAWNING_CANDIDATE
    assert detail["problem_name"] == PROBLEM_NAME
    assert detail["job"]["result"]["rules"] == spawning["result"]["rules"]
    no_code = _get(evaluated, f"jobs/{evaluated.jobs['no_code']['id']}")
    assert no_code["candidate"] is None and no_code["completion"] and no_code["extraction"]
    with evaluated.client(OTHER_KEY) as client:
        hidden = client.get(f"/v1/dashboard/jobs/{spawning['id']}")
    assert hidden.status_code == 404 and "another API key" in hidden.json()["detail"]
    assert _get(evaluated, f"jobs/{spawning['id']}", ADMIN_KEY)["candidate"] == SPAWNING_CANDIDATE


def test_live_shows_the_idle_cpu_worker(evaluated):
    live = _get(evaluated, "live")
    assert (live["mode"], live["workers_alive"], live["queued"], live["in_flight"]) == ("embedded", 1, 0, 0)
    (worker,) = live["workers"]
    assert worker["name"].endswith(":cpu0") and worker["device"].endswith(" CPU") and not worker["busy"]
    assert live["devices"] == [{"device": worker["device"], "workers": 1, "busy": 0}]


@pytest.mark.parametrize("query", ["outcomes?hours=721", "outcomes?hours=0", "outcomes?buckets=241",
                                   "speedups?problems=51", "rules?limit=51", "jobs?limit=201",
                                   "jobs?outcome=DROP%20TABLE"])
def test_requests_past_the_bounds_are_refused_with_the_field_named(evaluated, query):
    with evaluated.client() as client:
        response = client.get(f"/v1/dashboard/{query}")
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"][0] == "query"


def test_live_shows_busy_workers_and_hides_other_keys_jobs(tmp_path):
    """Jobs in flight on workers of another node (claimed straight in the shared store)."""
    live = start_server(make_config(tmp_path / "data", local_workers=0))
    store = JobStore(f"sqlite:///{(tmp_path / 'data' / 'kerneljudge.db').resolve()}")
    try:
        problem, _ = store.put_problem("class Model: pass\n")
        owned = {}
        for key_id, worker in ((key_id_for(USER_KEY), "celery@node7:101"), ("someone-else", "celery@node7:102")):
            job, _ = store.create_job(NewJob(problem_id=problem.id, submission={"candidate": "", "options": {}},
                                             api_key_id=key_id))
            store.claim(job.id, worker, "1")
            owned[key_id] = job.id
        store.create_job(NewJob(problem_id=problem.id, submission={"candidate": "", "options": {}},
                                api_key_id="someone-else"))
        with live.client(ADMIN_KEY) as admin:
            as_admin = admin.get("/v1/dashboard/live").json()
        assert (as_admin["queued"], as_admin["in_flight"], as_admin["workers_alive"]) == (1, 2, 0)
        assert as_admin["devices"] == [{"device": "node7 GPU 1", "workers": 2, "busy": 2}]
        assert {w["job_id"] for w in as_admin["workers"]} == set(owned.values())
        assert all(w["job_status"] == "building" and w["busy_for_s"] >= 0 for w in as_admin["workers"])
        with live.client(USER_KEY) as user:
            as_user = user.get("/v1/dashboard/live").json()
        # A key sees every worker busy, but only which of its own jobs they run.
        assert (as_user["queued"], as_user["queued_yours"]) == (1, 0)
        assert [(w["name"], w["job_id"]) for w in as_user["workers"]] == [
            ("celery@node7:101", owned[key_id_for(USER_KEY)]), ("celery@node7:102", None)]
        assert all(w["busy"] for w in as_user["workers"])
    finally:
        store.close()
        live.stop()


def test_open_mode_needs_no_key_and_shows_every_job(tmp_path):
    live = start_server(make_config(tmp_path / "data", api_keys={}, open_mode=True))
    try:
        with live.client(None) as client:
            assert client.get("/v1/dashboard/access").json() == {"key_required": False}
            assert client.get("/v1/dashboard/session").json()["scope"] == "all_keys"
    finally:
        live.stop()
