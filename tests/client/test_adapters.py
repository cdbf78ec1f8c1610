"""Trainer adapters against their documented contracts, with the fake API behind the client.

trl, verl, openrlhf and verifiers are not installed here (each pulls torch/transformers or ray):
the adapters are checked against the call signatures those libraries document.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging

import httpx
import pytest

from client.conftest import GOOD, REFERENCE, WRONG
from contract import get_reward
from contract.get_reward import ReferenceSpec, parse_reference_label
from contract.http_objects import Job
from contract.outcomes import outcome_from_failure, outcome_from_job, outcome_from_result
from contract.requests import EvalOptions
from contract.results import ErrorInfo, EvalResult
from contract.statuses import EvalStatus, JobStatus
from kerneljudge.adapters import trl, verifiers, verl
from kerneljudge.adapters.common import score_batch
from kerneljudge.client import KernelJudgeClient


def answer(code: str) -> str:
    return f"Here is the kernel.\n```python\n{code}```\n"


# --- labels ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "label, reference, problem_id",
    [
        (REFERENCE, REFERENCE, None),
        ("p_abc123", None, "p_abc123"),
        ({"problem_id": "p_1"}, None, "p_1"),
        (json.dumps({"reference": REFERENCE}), REFERENCE, None),
    ],
)
def test_reference_labels(label, reference, problem_id):
    spec = parse_reference_label(label)
    assert (spec.reference, spec.problem_id) == (reference, problem_id)


@pytest.mark.parametrize("label", [None, "", "two words", {"reference": "x", "problem_id": "y"}, "{not json"])
def test_bad_labels_raise_value_error(label):
    with pytest.raises(ValueError):
        parse_reference_label(label)


# --- TRL ------------------------------------------------------------------------------------
def test_trl_reward_scores_strings_and_chat_messages(make_async_client, api):
    metrics = []
    reward = trl.kerneljudge_reward(make_async_client(), metrics_hook=metrics.append,
                                    options={"reward_preset": "binary_fast"})
    assert inspect.iscoroutinefunction(reward)
    completions = [answer(GOOD), [{"role": "assistant", "content": answer(WRONG)}], "no code here"]
    logged = {}
    rewards = asyncio.run(reward(["p"] * 3, completions, reference=[REFERENCE] * 3,
                                 log_metric=lambda k, v: logged.__setitem__(k, v)))
    assert rewards == [1.0, 0.0, 0.0]
    assert metrics[0]["kerneljudge/correct"] == pytest.approx(1 / 3)
    assert metrics[0]["kerneljudge/format"] == pytest.approx(2 / 3)
    assert logged == metrics[0]


def test_trl_problem_id_column_and_missing_reference(make_async_client, api, caplog):
    with KernelJudgeClient("http://judge.test", "secret", transport=api.transport()) as sync:
        problem_id = sync.register_problem(REFERENCE).id
    reward = trl.kerneljudge_reward(make_async_client(), fallback_reward=-0.5)
    assert asyncio.run(reward(["p"], [answer(GOOD)], problem_id=[problem_id])) == [pytest.approx(1.0 * 0 + 0.3 + 0.7 * (2 / 3))]
    with caplog.at_level(logging.WARNING, "kerneljudge.adapters"):
        assert asyncio.run(reward(["p"], [answer(GOOD)])) == [-0.5]
    assert "no `reference` or `problem_id` column" in caplog.text


def test_trl_service_down_gives_fallback_never_raises(make_async_client, api, caplog):
    api.script = [httpx.ConnectError("refused")] * 100
    reward = trl.kerneljudge_reward(make_async_client(timeout=5), fallback_reward=0.0, timeout_s=5)
    with caplog.at_level(logging.WARNING, "kerneljudge.adapters"):
        assert asyncio.run(reward(["p", "p"], [answer(GOOD)] * 2, reference=[REFERENCE] * 2)) == [0.0, 0.0]
    assert "service error" in caplog.text


def test_trl_deadline_gives_fallback_for_unfinished_jobs(make_async_client, api):
    api.reads_to_finish = 10**6
    reward = trl.kerneljudge_reward(make_async_client(), timeout_s=10, fallback_reward=0.1)
    assert asyncio.run(reward(["p"], [answer(GOOD)], reference=[REFERENCE])) == [0.1]


def test_one_sample_past_the_deadline_costs_only_its_own_reward(make_async_client, api, clock):
    """A slow server (every read 1.5 s) and one sample that never finishes: the batch's other samples
    keep their real rewards; only the late one gets the fallback, with its own reason."""
    api.clock, api.read_latency_s = clock, 1.5
    completions = [answer(GOOD), answer(GOOD + "# never finishes\n"), answer(WRONG)]
    references = [ReferenceSpec(reference=REFERENCE)] * 3

    async def score():
        async with make_async_client() as client:
            return await score_batch(client, completions, references, timeout_s=20, fallback_reward=0.1,
                                     options=EvalOptions(reward_preset="binary_fast"))

    outcomes = asyncio.run(score())
    assert [o.reward for o in outcomes] == [1.0, 0.1, 0.0]
    assert [o.fallback for o in outcomes] == [False, True, False]
    assert outcomes[0].status == "ok" and outcomes[2].status == "incorrect"
    assert "still running at the deadline" in outcomes[1].reason and outcomes[1].job_id


# --- veRL -----------------------------------------------------------------------------------
def test_verl_compute_score_contract(api, clock):
    params = list(inspect.signature(verl.compute_score).parameters)
    assert params[:4] == ["data_source", "solution_str", "ground_truth", "extra_info"]
    with KernelJudgeClient("http://judge.test", "secret", transport=api.transport(), clock=clock,
                           sleep=clock.sleep) as client:
        out = verl.compute_score("kernelbench", answer(GOOD), REFERENCE,
                                 {"kerneljudge_options": {"reward_preset": "kevin"}}, client=client)
        assert out["score"] == pytest.approx(4.3)
        assert out["correct"] == 1.0 and out["speedup"] == 4.0 and out["fallback"] == 0.0
        assert all(isinstance(v, float) for v in out.values())
        bad = verl.compute_score("kernelbench", answer(GOOD), "", None, client=client)
        assert bad["score"] == 0.0 and bad["fallback"] == 1.0
        api.fail_jobs = True
        failed = verl.compute_score("kernelbench", answer(GOOD), REFERENCE, client=client)
        assert failed["fallback"] == 1.0


def test_verl_fallback_from_environment(api, clock, monkeypatch):
    monkeypatch.setenv("KERNELJUDGE_FALLBACK_REWARD", "-1")
    api.script = [httpx.Response(500, json={"detail": "boom"})]
    with KernelJudgeClient("http://judge.test", "secret", transport=api.transport()) as client:
        assert verl.compute_score("k", answer(GOOD), REFERENCE, client=client)["score"] == -1.0


# --- OpenRLHF -------------------------------------------------------------------------------
def test_openrlhf_parse_strips_prompt_and_reads_labels():
    prompt = "Reference:\n```python\n" + REFERENCE + "```\nExample:\n```python\n" + GOOD + "```\n"
    body = {"query": [prompt + answer(WRONG), prompt + "nothing"], "prompts": [prompt, prompt],
            "labels": [REFERENCE, 42]}
    items = get_reward.parse_get_reward_request(body)
    assert items[0].completion == answer(WRONG)
    assert items[0].reference.reference == REFERENCE and items[0].label_error is None
    assert items[1].reference is None and "labels[1]" in items[1].label_error


@pytest.mark.parametrize(
    "body, message",
    [
        ([], "JSON object"),
        ({"query": "x", "labels": []}, "`query` must be a list of strings"),
        ({"query": ["a"]}, "`labels` is missing"),
        ({"query": ["a"], "labels": ["x", "y"]}, "`labels` has 2 items but `query` has 1"),
        ({"query": ["a"], "prompts": [1], "labels": ["x"]}, "`prompts` must be a list of strings"),
    ],
)
def test_openrlhf_malformed_bodies_name_the_field(body, message):
    with pytest.raises(get_reward.GetRewardRequestError, match=message):
        get_reward.parse_get_reward_request(body)


def test_openrlhf_response_shape():
    items = get_reward.parse_get_reward_request({"query": ["a", "b", "c", "d"], "labels": ["p_1", "p_2", None, "p_3"]})
    ok = EvalResult(status=EvalStatus.ok, compiled=True, correct=True, speedup=2.0, reward=0.77,
                    reward_components={"format": 1.0, "compiled": 1.0, "correct": 1.0, "speedup": 2.0})
    # Outputs matched but a reject rule fired: the verdict is not correct, whatever the components say.
    rejected = EvalResult(status=EvalStatus.rejected, compiled=True, correct=False, reward=-1.0,
                          reward_components={"format": 1.0, "compiled": 1.0, "correct": 1.0, "speedup": 0.0})
    assert items[2].label_error is not None
    outcomes = [outcome_from_result(ok, "j1"), outcome_from_failure("worker lost", -0.25, "j2"),
                outcome_from_failure(items[2].label_error, -0.25), outcome_from_result(rejected, "j4")]
    response = get_reward.response_from_outcomes(outcomes)
    assert response.rewards == [0.77, -0.25, -0.25, -1.0]
    assert response.scores == [1.0, 0.0, 0.0, 0.0]
    assert set(response.extra_logs) == set(get_reward.LOG_KEYS)
    assert all(key.startswith("kerneljudge/") for key in response.extra_logs)
    assert response.extra_logs["kerneljudge/speedup"] == [2.0, 0.0, 0.0, 0.0]
    assert response.extra_logs["kerneljudge/correct"] == [1.0, 0.0, 0.0, 0.0]
    assert response.extra_logs["kerneljudge/fallback"] == [0.0, 1.0, 1.0, 0.0]
    assert response.reasons[0] is None and response.reasons[1] == "worker lost"
    assert response.job_ids == ["j1", "j2", None, "j4"]
    json.dumps(response.model_dump())


def _done_job(job_id: str, result: EvalResult) -> Job:
    return Job(id=job_id, status=JobStatus.done, problem_id="p", created_at="2026-11-25T00:00:00Z", result=result)


def test_a_result_that_is_no_verdict_gets_the_fallback_reward_with_its_reason():
    """status sandbox_error (the judge ran out of memory even alone, say) judges nothing: never a silent 0."""
    harness = EvalResult(status=EvalStatus.sandbox_error, compiled=True,
                         error=ErrorInfo(kind="judge_out_of_memory", message="the judge ran out of device memory"))
    assert not harness.judged
    outcome = outcome_from_job(_done_job("j1", harness), fallback_reward=-0.25)
    assert outcome.fallback and outcome.reward == -0.25 and outcome.metrics()["fallback"] == 1.0
    assert "no verdict" in outcome.reason and "judge_out_of_memory" in outcome.reason
    judged = EvalResult(status=EvalStatus.incorrect, compiled=True, reward=0.0)
    assert not outcome_from_job(_done_job("j2", judged), fallback_reward=-0.25).fallback


# --- verifiers ------------------------------------------------------------------------------
def test_verifiers_reward_function(make_async_client, api):
    reward = verifiers.kerneljudge_reward(make_async_client())
    params = inspect.signature(reward).parameters
    assert {"completion", "answer", "state"} <= set(params) and inspect.iscoroutinefunction(reward)
    state: dict = {}
    value = asyncio.run(reward([{"role": "assistant", "content": answer(GOOD)}], REFERENCE, state=state))
    assert value == pytest.approx(0.3 + 0.7 * (2 / 3))
    assert state["kerneljudge"]["status"] == "ok" and state["kerneljudge"]["speedup"] == 4.0
    assert asyncio.run(reward(answer(GOOD), None, state=state)) == 0.0
    assert state["kerneljudge"]["reason"]


def test_completion_text_reads_message_objects():
    """verifiers (>= 0.3) hands rubrics pydantic message objects with `role`/`content` attributes."""
    from dataclasses import dataclass

    from kerneljudge.adapters.common import completion_text

    @dataclass
    class Message:
        role: str
        content: object

    @dataclass
    class Part:
        type: str
        text: str

    messages = [Message("user", "ignored"), Message("assistant", "a"),
                Message("assistant", [Part("text", "b"), Part("image", "x"), {"type": "text", "text": "c"}])]
    assert completion_text(messages) == "a\nbc"
    assert completion_text(Message("assistant", "solo")) == "solo"
