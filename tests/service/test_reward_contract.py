"""POST /get_reward and the file-mode adapter are one contract: tested against each other on the same
live server, and against OpenRLHF's reader (tests/client/openrlhf_reader.py).

A scripted worker stands in for the engine: it claims queued jobs from the store and finishes each
with the verdict its candidate names (`# verdict=...`), with the reward of the job's own preset
(worker/engine/verdict/reward.py), so the answers are exact. The real engine's /get_reward is
tests/service/test_end_to_end.py.
"""

from __future__ import annotations

import asyncio
import importlib.util
import re
import threading
from pathlib import Path

import pytest

from contract.get_reward import LOG_KEYS
from contract.requests import EvalOptions
from contract.results import EvalResult
from contract.statuses import EvalStatus
from kerneljudge.adapters.openrlhf import score_request
from kerneljudge.client import AsyncKernelJudgeClient
from service.helpers import USER_KEY, LiveServer
from service.sources import NO_CODE_COMPLETION, REFERENCE, TRITON_CANDIDATE
from worker.engine.verdict import reward

torch = pytest.importorskip("torch")  # the reader builds tensors, as OpenRLHF does

from tests.client.openrlhf_reader import (  # noqa: E402
    group_scores,
    keep_group,
    read_batched_answers,
    read_sample_answer,
)

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "Write a faster ModelNew for:\n```python\n" + REFERENCE + "```\n"


def completion(verdict: str) -> str:
    return f"Here it is.\n```python\n{TRITON_CANDIDATE}# verdict={verdict}\n```\n"


def scripted_result(candidate: str, options: dict) -> EvalResult:
    """The verdict the candidate names, rewarded under the job's preset like the engine does."""
    verdict = re.search(r"# verdict=(\w+)", candidate)[1]
    status = {"ok": EvalStatus.ok, "wrong": EvalStatus.incorrect, "hack": EvalStatus.rejected}[verdict]
    passed = verdict in ("ok", "hack")  # the hack's outputs matched; a reject rule fired
    comps = reward.components(compiled=True, correct=passed, speedup=1.5 if passed else None)
    preset = EvalOptions.model_validate(options).reward_preset
    value = reward.compute_reward(preset, comps, rejected=status == EvalStatus.rejected)
    return EvalResult(status=status, compiled=True, correct=status == EvalStatus.ok,
                      speedup=1.5 if status == EvalStatus.ok else None, reward=value, reward_preset=preset,
                      reward_components=comps)


class ScriptedWorker:
    def __init__(self, live: LiveServer):
        self.state = live.server.config.app.state
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        store = self.state.store
        while not self.stopped.is_set():
            job = store.claim_next("scripted", None)
            if job is None:
                self.stopped.wait(0.02)  # poll the queue
                continue
            result = scripted_result(job.submission["candidate"], job.submission["options"])
            store.finish(job.id, job.attempts, result.model_dump(mode="json"), result.status.value)
            self.state.events.notify()


@pytest.fixture
def scripted_server(queued_server):
    worker = ScriptedWorker(queued_server)
    worker.thread.start()
    yield queued_server
    worker.stopped.set()
    worker.thread.join(10)


QUERIES = [completion("ok"), completion("wrong"), completion("hack"), NO_CODE_COMPLETION, completion("ok")]
LABELS = [REFERENCE, REFERENCE, REFERENCE, REFERENCE, "two words"]  # the last label names nothing


def server_answer(live: LiveServer, queries: list[str], labels: list, preset: str) -> dict:
    body = {"query": [PROMPT + q for q in queries], "prompts": [PROMPT] * len(queries), "labels": labels}
    with live.client() as client:
        response = client.post("/get_reward", params={"reward_preset": preset, "timeout": 60}, json=body)
    assert response.status_code == 200, response.text
    return response.json()


def adapter_answer(live: LiveServer, queries: list[str], labels: list, preset: str) -> dict:
    body = {"query": [PROMPT + q for q in queries], "prompts": [PROMPT] * len(queries), "labels": labels}

    async def score() -> dict:
        async with AsyncKernelJudgeClient(live.base_url, USER_KEY) as client:
            return await score_request(body, client, options=EvalOptions(reward_preset=preset), timeout_s=60)

    return asyncio.run(score())


@pytest.mark.parametrize("preset", ["tiered", "default"])
def test_server_and_adapter_answer_alike(scripted_server, preset):
    served = server_answer(scripted_server, QUERIES, LABELS, preset)
    adapted = adapter_answer(scripted_server, QUERIES, LABELS, preset)
    for answer in (served, adapted):
        # scores: correct or not, whatever the preset (tiered's rewards go down to -1)
        assert answer["scores"] == [1.0, 0.0, 0.0, 0.0, 0.0]
        assert set(answer["extra_logs"]) == set(LOG_KEYS)
        assert answer["extra_logs"]["kerneljudge/correct"] == [1.0, 0.0, 0.0, 0.0, 0.0]
        assert answer["extra_logs"]["kerneljudge/format"] == [1.0, 1.0, 1.0, 0.0, 0.0]
        assert answer["extra_logs"]["kerneljudge/fallback"] == [0.0, 0.0, 0.0, 0.0, 1.0]
        assert answer["reasons"][:4] == [None] * 4 and answer["reasons"][4].startswith("labels[4]: ")
        assert answer["job_ids"][4] is None and all(answer["job_ids"][:4])
    if preset == "tiered":
        assert served["rewards"] == [0.75, -0.5, -1.0, -1.0, 0.0]
    for key in ("rewards", "scores", "extra_logs"):
        assert served[key] == adapted[key], key
    assert served["reasons"] == adapted["reasons"]

    rewards, scores, logs = read_batched_answers([served])  # the batched reader of earlier releases
    assert scores.tolist() == served["scores"] and rewards.tolist() == pytest.approx(served["rewards"])
    assert logs["kerneljudge/fallback"].tolist() == served["extra_logs"]["kerneljudge/fallback"]


def load_example_reward_func():
    spec = importlib.util.spec_from_file_location("openrlhf_example", ROOT / "examples" / "openrlhf_reward_func.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.reward_func


def test_openrlhf_reads_both_answers_per_sample(scripted_server, monkeypatch):
    """Current OpenRLHF scores each sample on its own: the URL (HTTP) and reward_func (file mode)."""
    monkeypatch.setenv("KERNELJUDGE_URL", scripted_server.base_url)
    monkeypatch.setenv("KERNELJUDGE_API_KEY", USER_KEY)
    reward_func = load_example_reward_func()
    by_route = {}
    for verdict in ("ok", "wrong", "hack"):
        query = PROMPT + completion(verdict)
        http = read_sample_answer(server_answer(scripted_server, [completion(verdict)], [REFERENCE], "default"))
        file_mode = read_sample_answer(reward_func([query], [PROMPT], [REFERENCE]))
        for sample in (http, file_mode):
            assert sample.scores.flatten().tolist() == [1.0 if verdict == "ok" else 0.0]
            assert set(sample.info) == {"reward", "score", *LOG_KEYS}
            assert all(value.numel() == 1 for value in sample.info.values())
        assert torch.equal(http.rewards, file_mode.rewards) and torch.equal(http.scores, file_mode.scores)
        assert all(torch.equal(http.info[key], file_mode.info[key]) for key in http.info)
        by_route[verdict] = http
    # Dynamic filtering: a prompt whose samples are all wrong (or all correct) teaches nothing.
    assert keep_group(group_scores([by_route["ok"], by_route["wrong"]]))
    assert not keep_group(group_scores([by_route["wrong"], by_route["hack"]]))
    assert not keep_group(group_scores([by_route["ok"], by_route["ok"]]))
