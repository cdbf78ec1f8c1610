"""The TRL and verifiers adapters (and their examples) driven by the REAL libraries, offline, on CPU.

TRL: a real `GRPOTrainer` (a tiny randomly initialised Llama built from a config, a byte-level tokenizer
built locally with `tokenizers`, no hub access) runs one training step. Generation goes through TRL's
`rollout_func` hook so the completions are known kernels; everything after it is TRL's own code:
decoding with the tokenizer, building the conversational completions, the reward kwargs (dataset
columns, completion_ids, log_metric, trainer_state), running our async reward on the trainer's event
loop, advantages, the loss and the logged metrics.

verifiers: the `SingleTurnEnv` + `Rubric` of examples/verifiers_env.py evaluates a real dataset; the
policy model is an OpenAI-compatible endpoint answered by an httpx MockTransport, so the rollout,
message types and rubric scoring are verifiers' own.

The kerneljudge service is the fake API (tests/client/fake_api.py) in both.
"""

from __future__ import annotations

import asyncio
import functools
import json

import httpx
import pytest
import torch
import verifiers as vf
from datasets import Dataset
from openai import AsyncOpenAI
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast, TrainerCallback
from trl import GRPOConfig, GRPOTrainer
from verifiers.clients import OpenAIChatCompletionsClient

from client.conftest import GOOD, REFERENCE, WRONG
from client.test_examples import load
from kerneljudge.adapters import trl as trl_adapter
from kerneljudge.adapters import verifiers as verifiers_adapter
from kerneljudge.client import AsyncKernelJudgeClient

CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def answer(code: str) -> str:
    return f"Here is the kernel.\n```python\n{code}```\n"


@pytest.fixture(autouse=True)
def quiet_experimental(monkeypatch):
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is marked experimental in TRL


@pytest.fixture
def fake_service(api, monkeypatch):
    """The adapters' default clients (built by the examples at import) talk to the fake API."""
    monkeypatch.setenv("KERNELJUDGE_API_KEY", "secret")
    async_client = functools.partial(AsyncKernelJudgeClient, transport=api.transport())
    for module in (trl_adapter, verifiers_adapter):
        monkeypatch.setattr(module, "AsyncKernelJudgeClient", async_client)
    return api


def verdicts(api) -> list[tuple[str, float]]:
    """(candidate marker, reward) of every job the service finished, in submission order."""
    out = []
    for job in api.jobs.values():
        marker = "good" if "# speedup=4.0" in job["_body"]["completion"] else "wrong"
        out.append((marker, job["result"]["reward"]))
    return out


# --- TRL ------------------------------------------------------------------------------------
def byte_level_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {ch: i for i, ch in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    vocab.update({"<eos>": len(vocab), "<pad>": len(vocab) + 1})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<pad>")
    hf.chat_template = CHAT_TEMPLATE
    return hf


def tiny_model(tokenizer: PreTrainedTokenizerFast) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=1024,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    return LlamaForCausalLM(config)


def scripted_rollout(answers: list[str]):
    """TRL `rollout_func`: prompt ids from the trainer's own tokenizer/chat template, scripted completions."""

    def rollout(prompts, trainer):
        tok = trainer.processing_class
        prompt_ids, completion_ids = [], []
        for i, prompt in enumerate(prompts):
            if isinstance(prompt, list):
                prompt_ids.append(tok.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True,
                                                          return_dict=True)["input_ids"])
            else:
                prompt_ids.append(tok(prompt)["input_ids"])
            completion_ids.append(tok(answers[i % len(answers)])["input_ids"] + [tok.eos_token_id])
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": None}

    return rollout


class LogCapture(TrainerCallback):
    def __init__(self) -> None:
        self.logs: list[dict] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs:
            self.logs.append(dict(logs))


def grpo_step(tmp_path, reward_fn, dataset: Dataset, answers: list[str]):
    """One real GRPO step; returns (per-completion reward tensor TRL computed, the step's logged metrics)."""
    tokenizer = byte_level_tokenizer()
    args = GRPOConfig(output_dir=str(tmp_path / "grpo"), per_device_train_batch_size=2, num_generations=2,
                      max_steps=1, max_completion_length=512, logging_steps=1, report_to="none",
                      save_strategy="no", use_cpu=True, bf16=False, seed=0)
    capture = LogCapture()
    trainer = GRPOTrainer(model=tiny_model(tokenizer), reward_funcs=[reward_fn], args=args, train_dataset=dataset,
                          processing_class=tokenizer, rollout_func=scripted_rollout(answers), callbacks=[capture])
    computed = []
    real_calculate = trainer._calculate_rewards

    def spy(*call_args, **call_kwargs):
        rewards = real_calculate(*call_args, **call_kwargs)
        computed.append(rewards.clone())
        return rewards

    trainer._calculate_rewards = spy
    trainer.train()
    assert len(computed) == 1, "GRPO computes rewards once for a one-step run"
    step_logs = next(entry for entry in capture.logs if "loss" in entry)
    return computed[0], step_logs


def test_trl_grpo_trainer_scores_the_example_reward(tmp_path, fake_service):
    reward_fn = load("trl_grpo.py").reward_fn  # examples/trl_grpo.py, verbatim
    dataset = Dataset.from_list([{"prompt": "Write ModelNew for:\n" + REFERENCE, "reference": REFERENCE}] * 2)
    rewards, logs = grpo_step(tmp_path, reward_fn, dataset, [answer(GOOD), answer(WRONG)])

    # Both generations of the prompt reached the service with the dataset's reference column.
    assert [m for m, _ in verdicts(fake_service)] == ["good", "wrong"]
    assert all(job["_body"]["reference"] == REFERENCE for job in fake_service.jobs.values())
    # The reward tensor TRL built (one column: our function) holds the service's verdicts, in order.
    expected = [reward for _, reward in verdicts(fake_service)]
    assert rewards.shape == (2, 1)
    assert rewards[:, 0].tolist() == pytest.approx(expected)
    assert expected[0] > 0.3 and expected[1] == 0.0
    # TRL's own logging: the reward under the function's name, and our components through log_metric.
    assert logs["rewards/kerneljudge/mean"] == pytest.approx(sum(expected) / 2)
    assert logs["kerneljudge/correct"] == pytest.approx(0.5)
    assert logs["kerneljudge/format"] == pytest.approx(1.0)
    assert logs["kerneljudge/fallback"] == pytest.approx(0.0)
    assert logs["reward_std"] > 0  # GRPO saw a real difference between the two completions


def test_trl_conversational_prompts_problem_id_column(tmp_path, fake_service, make_async_client):
    with httpx.Client(base_url="http://judge.test", transport=fake_service.transport(),
                      headers={"authorization": "Bearer secret"}) as http:
        problem_id = http.post("/v1/problems", json={"reference": REFERENCE}).json()["id"]
    reward_fn = trl_adapter.kerneljudge_reward(make_async_client(), options={"reward_preset": "binary_fast"})
    prompt = [{"role": "user", "content": "Write ModelNew."}]
    dataset = Dataset.from_list([{"prompt": prompt, "problem_id": problem_id}] * 2)
    rewards, logs = grpo_step(tmp_path, reward_fn, dataset, [answer(WRONG), answer(GOOD)])

    # TRL decoded our completions into assistant messages; the adapter read their text and the id column.
    bodies = [job["_body"] for job in fake_service.jobs.values()]
    assert [b["problem_id"] for b in bodies] == [problem_id, problem_id]
    assert [b["completion"] for b in bodies] == [answer(WRONG), answer(GOOD)]
    assert rewards[:, 0].tolist() == [0.0, 1.0]  # binary_fast: correct and faster than the reference
    assert logs["kerneljudge/speedup"] == pytest.approx(2.0)  # mean of 0 (wrong) and 4.0


def test_trl_service_down_gives_fallback_inside_the_trainer(tmp_path, fake_service, make_async_client, caplog):
    fake_service.script = [httpx.ConnectError("refused")] * 100
    reward_fn = trl_adapter.kerneljudge_reward(make_async_client(timeout=5), timeout_s=5, fallback_reward=-0.5)
    dataset = Dataset.from_list([{"prompt": "Write ModelNew.", "reference": REFERENCE}] * 2)
    rewards, logs = grpo_step(tmp_path, reward_fn, dataset, [answer(GOOD)])
    assert rewards[:, 0].tolist() == [-0.5, -0.5]  # the step still ran: no exception reached TRL
    assert logs["kerneljudge/fallback"] == pytest.approx(1.0)
    assert "service error" in caplog.text


# --- verifiers ------------------------------------------------------------------------------
def openai_policy(replies: dict[str, str]) -> OpenAIChatCompletionsClient:
    """An OpenAI-compatible chat endpoint (MockTransport) answering by a keyword of the last user message."""

    def handle(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        question = body["messages"][-1]["content"]
        content = next(text for key, text in replies.items() if key in question)
        return httpx.Response(200, json={
            "id": "cmpl-1", "object": "chat.completion", "created": 0, "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        })

    http = httpx.AsyncClient(transport=httpx.MockTransport(handle))
    return OpenAIChatCompletionsClient(AsyncOpenAI(base_url="http://llm.test/v1", api_key="none", http_client=http))


async def _evaluate(env, policy, rollouts_per_example: int = 2):
    return await env.evaluate(client=policy, model="policy", num_examples=-1,
                              rollouts_per_example=rollouts_per_example, state_columns=["kerneljudge"])


def test_verifiers_example_environment_scores_rollouts(fake_service):
    dataset = Dataset.from_list([{"question": "make it fast", "answer": REFERENCE},
                                 {"question": "make it wrong", "answer": REFERENCE}])
    env = load("verifiers_env.py").load_environment(dataset)  # examples/verifiers_env.py, verbatim
    assert isinstance(env, vf.SingleTurnEnv) and isinstance(env.rubric, vf.Rubric)
    policy = openai_policy({"fast": answer(GOOD), "wrong": answer(WRONG)})
    outputs = asyncio.run(_evaluate(env, policy))["outputs"]

    # verifiers hands the rubric pydantic AssistantMessage objects; the service must get their text.
    assert sorted(job["_body"]["completion"] for job in fake_service.jobs.values()) == \
        sorted([answer(GOOD)] * 2 + [answer(WRONG)] * 2)
    by_example = {0: [], 1: []}
    for out in outputs:
        by_example[out["example_id"]].append(out)
    good_reward = next(r for m, r in verdicts(fake_service) if m == "good")
    assert good_reward > 0.3
    for out in by_example[0]:
        assert out["reward"] == pytest.approx(good_reward)
        assert out["metrics"]["kerneljudge"] == pytest.approx(good_reward)
        assert out["kerneljudge"]["status"] == "ok" and out["kerneljudge"]["speedup"] == 4.0
    for out in by_example[1]:
        assert out["reward"] == 0.0 and out["kerneljudge"]["status"] == "incorrect"
        assert out["kerneljudge"]["fallback"] == 0.0


def test_verifiers_rubric_fallback_when_service_down(make_async_client, api):
    api.script = [httpx.ConnectError("refused")] * 100
    reward = verifiers_adapter.kerneljudge_reward(make_async_client(timeout=5), timeout_s=5, fallback_reward=-1.0)
    env = vf.SingleTurnEnv(dataset=Dataset.from_list([{"question": "make it fast", "answer": REFERENCE}]),
                           rubric=vf.Rubric(funcs=[reward], weights=[1.0]))
    outputs = asyncio.run(_evaluate(env, openai_policy({"fast": answer(GOOD)}), rollouts_per_example=1))["outputs"]
    assert [o["reward"] for o in outputs] == [-1.0]  # our fallback, not verifiers' 0.0-on-exception
    assert outputs[0]["kerneljudge"]["fallback"] == 1.0
    assert "service error" in outputs[0]["kerneljudge"]["reason"]
