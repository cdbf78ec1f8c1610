"""API behaviour against the real app on the embedded backend, with no worker running.

Jobs stay queued here, so submission, reads, cancel, idempotency, problems, auth and limits
are checked deterministically without evaluations (those are in test_end_to_end.py).
"""

from __future__ import annotations

import hashlib
import json

from service.helpers import ADMIN_KEY, OTHER_KEY
from service.sources import FAST_OPTIONS, NO_CODE_COMPLETION, REFERENCE, TRITON_CANDIDATE

BODY = {"reference": REFERENCE, "candidate": TRITON_CANDIDATE, "options": FAST_OPTIONS}


def _locs(response) -> list[list]:
    return [error["loc"] for error in response.json()["detail"]]


def test_submit_returns_queued_job_and_reads_back(queued_server):
    with queued_server.client() as client:
        created = client.post("/v1/evaluations", json=BODY)
        assert created.status_code == 202
        job = created.json()
        assert job["status"] == "queued" and job["result"] is None and job["attempts"] == 0
        assert created.headers["location"] == f"/v1/evaluations/{job['id']}"
        assert job["problem_id"] == hashlib.sha256(REFERENCE.encode()).hexdigest()

        read = client.get(f"/v1/evaluations/{job['id']}")
        assert read.status_code == 200 and read.json()["id"] == job["id"]

        many = client.get("/v1/evaluations", params={"ids": f"{job['id']},nosuchjob"})
        assert many.status_code == 200
        assert [item["id"] for item in many.json()["items"]] == [job["id"]]
        assert many.json()["missing"] == ["nosuchjob"]

        # ?wait on a job nobody runs: the server answers 202 with the job still queued.
        waited = client.post("/v1/evaluations", params={"wait": 0.3}, json=BODY)
        assert waited.status_code == 202 and waited.json()["status"] == "queued"

    with queued_server.client(OTHER_KEY) as other:
        assert other.get(f"/v1/evaluations/{job['id']}").status_code == 404
    with queued_server.client(ADMIN_KEY) as admin:
        assert admin.get(f"/v1/evaluations/{job['id']}").status_code == 200


def test_cancel_queued_job(queued_server):
    with queued_server.client() as client:
        job = client.post("/v1/evaluations", json=BODY).json()
        cancelled = client.delete(f"/v1/evaluations/{job['id']}")
        assert cancelled.status_code == 200
        assert cancelled.json()["status"] == "cancelled" and cancelled.json()["finished_at"]
        again = client.delete(f"/v1/evaluations/{job['id']}")
        assert again.status_code == 409 and "cancelled" in again.json()["detail"]
        assert client.delete("/v1/evaluations/nosuchjob").status_code == 404


def test_idempotency_key_returns_same_job_and_rejects_other_body(queued_server):
    with queued_server.client() as client:
        first = client.post("/v1/evaluations", json=BODY, headers={"Idempotency-Key": "step-7-item-3"})
        second = client.post("/v1/evaluations", json=BODY, headers={"Idempotency-Key": "step-7-item-3"})
        assert first.status_code == second.status_code == 202
        assert first.json()["id"] == second.json()["id"]
        different = dict(BODY, candidate=TRITON_CANDIDATE + "\n# v2\n")
        conflict = client.post("/v1/evaluations", json=different, headers={"Idempotency-Key": "step-7-item-3"})
        assert conflict.status_code == 409 and first.json()["id"] in conflict.json()["detail"]
    # Keys are per API key: another client's identical key makes its own job.
    with queued_server.client(OTHER_KEY) as other:
        theirs = other.post("/v1/evaluations", json=BODY, headers={"Idempotency-Key": "step-7-item-3"})
        assert theirs.status_code == 202 and theirs.json()["id"] != first.json()["id"]


def test_problems_are_content_addressed(queued_server):
    with queued_server.client() as client:
        created = client.post("/v1/problems", json={"reference": REFERENCE, "name": "add one"})
        assert created.status_code == 201
        problem_id = created.json()["id"]
        assert problem_id == hashlib.sha256(REFERENCE.encode()).hexdigest()
        again = client.post("/v1/problems", json={"reference": REFERENCE})
        assert again.status_code == 200 and again.json()["id"] == problem_id
        read = client.get(f"/v1/problems/{problem_id}")
        assert read.status_code == 200 and read.json()["reference"] == REFERENCE
        assert client.get("/v1/problems/" + "0" * 64).status_code == 404

        by_id = client.post("/v1/evaluations", json={"problem_id": problem_id, "candidate": TRITON_CANDIDATE})
        assert by_id.status_code == 202 and by_id.json()["problem_id"] == problem_id
        unknown = client.post("/v1/evaluations", json={"problem_id": "1" * 64, "candidate": TRITON_CANDIDATE})
        assert unknown.status_code == 422 and ["body", "problem_id"] in _locs(unknown)


def test_validation_errors_name_the_field(queued_server):
    with queued_server.client() as client:
        both = client.post("/v1/evaluations", json={**BODY, "problem_id": "a" * 64})
        assert both.status_code == 422 and ["body", "problem_id"] in _locs(both)
        neither = client.post("/v1/evaluations", json={"reference": REFERENCE})
        assert neither.status_code == 422 and ["body", "completion"] in _locs(neither)
        unknown_option = client.post("/v1/evaluations", json={**BODY, "options": {"trails": 3}})
        assert unknown_option.status_code == 422 and ["body", "options", "trails"] in _locs(unknown_option)
        bad_preset = client.post("/v1/evaluations", json={**BODY, "options": {"reward_preset": "nope"}})
        assert bad_preset.status_code == 422 and "nope" in bad_preset.text
        unsandboxed = client.post("/v1/evaluations", json={**BODY, "options": {"sandbox": "none"}})
        assert unsandboxed.status_code == 422 and ["body", "options", "sandbox"] in _locs(unsandboxed)
        nul = client.post("/v1/evaluations", json={**BODY, "reference": "x = 1\x00"})
        assert nul.status_code == 422 and ["body", "reference"] in _locs(nul)
        not_json = client.post("/v1/evaluations", content=b"{not json", headers={"content-type": "application/json"})
        assert not_json.status_code == 422
        wrong_type = client.post("/v1/evaluations", json=[1, 2, 3])
        assert wrong_type.status_code == 422
        bad_wait = client.post("/v1/evaluations", params={"wait": "-1"}, json=BODY)
        assert bad_wait.status_code == 422 and ["query", "wait"] in _locs(bad_wait)


def test_auth(queued_server):
    with queued_server.client(key=None) as anonymous:
        missing = anonymous.post("/v1/evaluations", json=BODY)
        assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
        assert anonymous.get("/v1/health").status_code == 200
        assert anonymous.get("/metrics").status_code == 200
        assert anonymous.get("/v1/ready").status_code == 503  # no worker in this server
    with queued_server.client(key="wrong") as wrong:
        assert wrong.get("/v1/evaluations", params={"ids": "x"}).status_code == 401
    with queued_server.client() as user:
        assert user.get("/v1/evaluations:export", params={"all_keys": "true"}).status_code == 403
    with queued_server.client(ADMIN_KEY) as admin:
        assert admin.get("/v1/evaluations:export", params={"all_keys": "true"}).status_code == 200


def test_batch_accepts_good_items_and_reports_bad_ones_inline(queued_server):
    items = [BODY, {"reference": REFERENCE}, {**BODY, "options": {"trials": 0}}, BODY]
    with queued_server.client() as client:
        response = client.post("/v1/evaluations:batch", json={"items": items}, headers={"Idempotency-Key": "b1"})
        assert response.status_code == 202
        body = response.json()
        assert body["accepted"] == 2 and body["rejected"] == 2
        assert [item["index"] for item in body["items"]] == [0, 1, 2, 3]
        assert body["items"][1]["error"]["status"] == 422
        assert ["body", "items", 1, "completion"] in [e["loc"] for e in body["items"][1]["error"]["detail"]]
        assert ["body", "items", 2, "options", "trials"] in [e["loc"] for e in body["items"][2]["error"]["detail"]]
        ids = [body["items"][0]["job"]["id"], body["items"][3]["job"]["id"]]
        assert ids[0] != ids[1]
        replay = client.post("/v1/evaluations:batch", json={"items": items}, headers={"Idempotency-Key": "b1"}).json()
        assert [replay["items"][0]["job"]["id"], replay["items"][3]["job"]["id"]] == ids
        empty = client.post("/v1/evaluations:batch", json={"items": []})
        assert empty.status_code == 422 and ["body", "items"] in _locs(empty)


def test_batch_size_limit(serve):
    server = serve(max_batch_items=3)
    with server.client() as client:
        response = client.post("/v1/evaluations:batch", json={"items": [BODY] * 4})
        assert response.status_code == 422 and ["body", "items"] in _locs(response)


def test_completion_without_code_is_finished_at_once_with_format_zero(queued_server):
    with queued_server.client() as client:
        response = client.post("/v1/evaluations", json={"reference": REFERENCE, "completion": NO_CODE_COMPLETION})
        job = response.json()
        # Finished without any worker (this server has none): nothing to evaluate.
        assert job["status"] == "done"
        assert job["result"]["status"] == "invalid_input"
        assert job["result"]["reward"] == 0.0
        assert job["result"]["reward_components"]["format"] == 0.0
        assert job["result"]["error"]["kind"] == "no_candidate"
        tiered = client.post("/v1/evaluations", json={"reference": REFERENCE, "completion": NO_CODE_COMPLETION,
                                                      "options": {"reward_preset": "tiered"}}).json()
        assert tiered["result"]["reward"] == -1.0


def test_body_size_limit(serve):
    server = serve(max_body_bytes=4096)
    with server.client() as client:
        big = client.post("/v1/evaluations", json={**BODY, "candidate": "x" * 10_000})
        assert big.status_code == 413 and "4096" in big.json()["detail"]

        def chunks():  # no Content-Length: the limit is enforced on the bytes actually received
            yield b'{"reference": "'
            for _ in range(10):
                yield b"y" * 1000
            yield b'"}'

        streamed = client.post("/v1/evaluations", content=chunks(), headers={"content-type": "application/json"})
        assert streamed.status_code == 413


def test_rate_limit_answers_429_with_retry_after(serve):
    server = serve(rate_limit_per_s=0.5, rate_burst=3)
    with server.client() as client:
        codes = [client.get("/v1/evaluations", params={"ids": "x"}).status_code for _ in range(5)]
        assert codes[:3] == [200, 200, 200]
        limited = client.get("/v1/evaluations", params={"ids": "x"})
        assert limited.status_code == 429 and int(limited.headers["retry-after"]) >= 1
    with server.client(OTHER_KEY) as other:  # buckets are per key
        assert other.get("/v1/evaluations", params={"ids": "x"}).status_code == 200


def test_quota_and_full_queue(serve):
    server = serve(max_active_per_key=2, max_queue=3)
    with server.client() as client:
        keyed = {"Idempotency-Key": "quota-1"}
        made = [client.post("/v1/evaluations", json=BODY, headers=headers) for headers in (keyed, {})]
        assert [response.status_code for response in made] == [202, 202]
        over_quota = client.post("/v1/evaluations", json=BODY)
        assert over_quota.status_code == 429 and over_quota.headers["retry-after"]
        # A replayed Idempotency-Key adds no job: it is answered even over quota; a new key is not.
        replay = client.post("/v1/evaluations", json=BODY, headers=keyed)
        assert replay.status_code == 202 and replay.json()["id"] == made[0].json()["id"]
        assert client.post("/v1/evaluations", json=BODY, headers={"Idempotency-Key": "quota-2"}).status_code == 429
    with server.client(OTHER_KEY) as other:
        assert other.post("/v1/evaluations", json=BODY).status_code == 202
        full = other.post("/v1/evaluations", json=BODY)
        assert full.status_code == 503 and full.headers["retry-after"]


def test_export_streams_jsonl_with_reference(queued_server):
    with queued_server.client() as client:
        finished = client.post("/v1/evaluations", json={"reference": REFERENCE, "completion": NO_CODE_COMPLETION})
        client.post("/v1/evaluations", json=BODY)  # still queued: not exported by default
        export = client.get("/v1/evaluations:export")
        assert export.status_code == 200 and export.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(line) for line in export.text.splitlines()]
        assert [line["id"] for line in lines] == [finished.json()["id"]]
        assert lines[0]["reference"] == REFERENCE
        assert lines[0]["submission"]["completion"] == NO_CODE_COMPLETION
        everything = client.get("/v1/evaluations:export", params={"include_unfinished": "true"})
        assert len(everything.text.splitlines()) == 2
    with queued_server.client(OTHER_KEY) as other:
        assert other.get("/v1/evaluations:export").text == ""


def test_metrics_report_queue_and_outcomes(queued_server):
    with queued_server.client() as client:
        client.post("/v1/evaluations", json=BODY)
        client.post("/v1/evaluations", json={"reference": REFERENCE, "completion": NO_CODE_COMPLETION})
        text = client.get("/metrics").text
    assert "kerneljudge_queue_depth 1.0" in text
    assert 'kerneljudge_job_outcomes{status="done",verdict="invalid_input"} 1.0' in text
    assert "kerneljudge_workers 0.0" in text
    assert 'kerneljudge_http_requests_total{code="202",method="POST",route="/v1/evaluations"} 1.0' in text


def test_metrics_label_static_files_by_their_mount(queued_server):
    with queued_server.client(None) as client:
        assert client.get("/dashboard/static/style.css").status_code == 200
        assert client.get("/dashboard/static/vendor/chart.umd.min.js").status_code == 200
        assert client.get("/no/such/path").status_code == 404
        text = client.get("/metrics").text
    assert 'kerneljudge_http_requests_total{code="200",method="GET",route="/dashboard/static"} 2.0' in text
    assert 'kerneljudge_http_requests_total{code="404",method="GET",route="unmatched"} 1.0' in text
    assert 'code="200",method="GET",route="unmatched"' not in text
