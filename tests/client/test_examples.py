"""examples/*.py run as documented (trainer side stubbed by calling the reward the way the trainer does),
and the README's trainer section shows each of them verbatim."""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import re
from pathlib import Path

import pytest

from client.conftest import GOOD, REFERENCE, WRONG
from kerneljudge.adapters import openrlhf, trl, verifiers, verl
from kerneljudge.client import AsyncKernelJudgeClient, KernelJudgeClient

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ["trl_grpo.py", "verl_reward.py", "openrlhf_reward_func.py", "verifiers_env.py"]


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name[:-3]}", ROOT / "examples" / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True)
def clients_use_fake_api(api, monkeypatch):
    monkeypatch.setenv("KERNELJUDGE_API_KEY", "secret")
    async_client = functools.partial(AsyncKernelJudgeClient, transport=api.transport())
    for module in (trl, verifiers, openrlhf):
        monkeypatch.setattr(module, "AsyncKernelJudgeClient", async_client)
    monkeypatch.setattr(verl, "KernelJudgeClient", functools.partial(KernelJudgeClient, transport=api.transport()))
    monkeypatch.setattr(verl, "_clients", {})
    api.finish_on_wait = True


def answer(code: str) -> str:
    return f"```python\n{code}```"


def test_trl_example():
    reward_fn = load("trl_grpo.py").reward_fn
    rewards = asyncio.run(reward_fn(["p", "p"], [answer(GOOD), answer(WRONG)], reference=[REFERENCE] * 2))
    assert rewards[0] > 0.3 and rewards[1] == 0.0


def test_verl_example():
    out = load("verl_reward.py").compute_score("kernelbench", answer(GOOD), REFERENCE, None)
    assert out["correct"] == 1.0 and out["score"] > 0.3


def test_openrlhf_example():
    """The file-mode answer as OpenRLHF's reader takes it (tests/client/openrlhf_reader.py)."""
    pytest.importorskip("torch")  # the reader builds tensors, as OpenRLHF does
    from client.openrlhf_reader import keep_group, read_sample_answer

    prompt = "Write ModelNew.\n"
    reward_func = load("openrlhf_reward_func.py").reward_func
    good = read_sample_answer(reward_func([prompt + answer(GOOD)], [prompt], [REFERENCE]))
    wrong = read_sample_answer(reward_func([prompt + answer(WRONG)], [prompt], [REFERENCE]))
    assert good.rewards.flatten().tolist() == [pytest.approx(0.3 + 0.7 * (2 / 3))]
    assert good.scores.flatten().tolist() == [1.0] and wrong.scores.flatten().tolist() == [0.0]
    assert good.info["kerneljudge/speedup"].flatten().tolist() == [4.0]
    assert wrong.info["kerneljudge/correct"].flatten().tolist() == [0.0]
    assert keep_group([good.scores[0].item(), wrong.scores[0].item()])


def test_verifiers_example():
    reward = load("verifiers_env.py").kernel_reward
    assert asyncio.run(reward([{"role": "assistant", "content": answer(GOOD)}], REFERENCE)) == pytest.approx(0.75)


def test_docs_show_each_example_verbatim():
    doc = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", doc, flags=re.DOTALL)
    for name in EXAMPLES:
        assert (ROOT / "examples" / name).read_text() in blocks, f"README.md must show examples/{name}"
