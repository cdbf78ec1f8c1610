"""OpenRLHF's remote reward contract (POST /get_reward), without running evaluations."""

from __future__ import annotations

import httpx

from service.helpers import USER_KEY
from service.sources import NO_CODE_COMPLETION, REFERENCE, TRITON_CANDIDATE


def test_shape_fallback_and_timeout(queued_server):
    prompt = "Write a Triton kernel for this model:\n```python\nclass ModelNew: pass\n```\n"
    body = {
        "query": [prompt + NO_CODE_COMPLETION, prompt + "```python\n" + TRITON_CANDIDATE + "```"],
        "prompts": [prompt, prompt],
        "labels": [REFERENCE, REFERENCE],
    }
    # OpenRLHF sends no headers of its own: the key travels in the URL.
    response = httpx.post(f"{queued_server.base_url}/get_reward", params={"key": USER_KEY, "timeout": 0.5},
                          json=body, timeout=30)
    assert response.status_code == 200
    answer = response.json()
    assert answer["rewards"] == answer["scores"] == [0.0, 0.0]
    # Item 0: an evaluation (no code block, format 0), not a fallback: the prompt's example
    # block was stripped with the prompt, so it was not mistaken for the answer.
    assert answer["extra_logs"]["kerneljudge/fallback"] == [0.0, 1.0]
    assert answer["extra_logs"]["kerneljudge/format"] == [0.0, 0.0]
    assert answer["reasons"][0] is None
    # Item 1: nobody runs it in time; it gets the fallback and is withdrawn from the queue.
    assert answer["reasons"][1].startswith("timeout") and "withdrawn" in answer["reasons"][1]
    with queued_server.client() as client:
        assert client.get(f"/v1/evaluations/{answer['job_ids'][1]}").json()["status"] == "cancelled"


def test_problem_id_labels_and_bad_bodies(queued_server):
    with queued_server.client() as client:
        problem_id = client.post("/v1/problems", json={"reference": REFERENCE}).json()["id"]
        ok = client.post("/get_reward", json={"query": [NO_CODE_COMPLETION], "labels": [problem_id]})
        assert ok.status_code == 200 and ok.json()["reasons"] == [None]
        unknown = client.post("/get_reward", json={"query": [NO_CODE_COMPLETION], "labels": ["f" * 64]})
        assert unknown.json()["extra_logs"]["kerneljudge/fallback"] == [1.0]
        assert "problem_id" in unknown.json()["reasons"][0]
        mismatch = client.post("/get_reward", json={"query": ["a", "b"], "labels": [REFERENCE]})
        assert mismatch.status_code == 422 and mismatch.json()["detail"][0]["loc"] == ["body", "labels"]
        preset = client.post("/get_reward", params={"reward_preset": "nope"},
                             json={"query": ["a"], "labels": [REFERENCE]})
        assert preset.status_code == 422
    with queued_server.client(key=None) as anonymous:
        assert anonymous.post("/get_reward", json={"query": [], "labels": []}).status_code == 401


def test_a_result_that_is_no_verdict_is_a_fallback_with_its_reason():
    """A done job whose result is sandbox_error (the harness failed) is no score: the item gets the
    fallback reward and `reasons` says why, like a failed job."""
    from app.routes_reward import _outcome
    from worker.jobs.store import Job

    def done(result: dict) -> Job:
        return Job(id="j", status="done", priority=0, created_at=0.0, updated_at=0.0, problem_id="p", submission={},
                   api_key_id="k", result=result)

    harness = _outcome("j", done({"status": "sandbox_error", "compiled": True, "error": {
        "kind": "judge_out_of_memory", "message": "out of memory"}}), None)
    assert harness.fallback and "no verdict" in harness.reason and "judge_out_of_memory" in harness.reason
    judged = _outcome("j", done({"status": "incorrect", "compiled": True, "error": None}), None)
    assert not judged.fallback and judged.reason is None
