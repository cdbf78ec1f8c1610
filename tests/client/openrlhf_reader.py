"""How OpenRLHF reads a remote reward answer, re-implemented (written here from reading its source,
not copied) so that our two answers, POST /get_reward and the file-mode `reward_func`, are tested
against the trainer's reader as it is. Sources, OpenRLHF/OpenRLHF main:

- openrlhf/utils/agent.py, `SingleTurnAgentExecutor.execute`: each sample is scored on its own,
  `{"query": [q], "prompts": [p], "labels": [l]}` posted to the URL (`_fetch_rewards_via_http`) or
  `reward_func([q], [p], [l])` called in a thread (`_fetch_rewards_via_func`); from the answer it
  takes reward = `rewards`, scores = `scores or rewards` (Python truthiness: a falsy `scores` is
  replaced by the rewards; OpenRLHF issue #1219) and extra_logs = `extra_logs or {}`.
- openrlhf/trainer/ppo_utils/samples_generator.py, `SamplesGenerator._process_response_into_experience`:
  rewards = torch.tensor([reward]), scores = torch.tensor([scores]); info["reward"], info["score"];
  each extra_logs value: a tensor is reduced to its first element's .item(), then
  info[key] = torch.tensor([value]). The info entries are what the trainer logs.
- openrlhf/trainer/ppo_utils/dynamic_filtering.py: `extract_group_scores` takes `scores[0].item()`
  of each sample of a prompt's group; `should_keep_group` keeps the group when the mean score lies
  strictly inside `dynamic_filtering_range` (default (0, 1)) and its std is above the threshold.
- openrlhf/trainer/ppo_utils/experience_maker.py, `update_samples_with_rewards` (the batched reader
  of earlier releases, still in use): torch.cat of torch.as_tensor(answer["rewards"]) over the
  answers, the same for `scores` when the first answer has it (else the rewards), and for each key
  of the first answer's `extra_logs`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class Sample:
    rewards: torch.Tensor
    scores: torch.Tensor
    info: dict[str, torch.Tensor]


def read_sample_answer(answer: dict[str, Any]) -> Sample:
    """One sample's answer, as SingleTurnAgentExecutor + _process_response_into_experience read it."""
    reward = answer.get("rewards")
    scores = answer.get("scores") or answer.get("rewards")
    extra_logs = answer.get("extra_logs") or {}
    info = {"reward": torch.tensor([reward]), "score": torch.tensor([scores])}
    for key, value in extra_logs.items():
        if isinstance(value, torch.Tensor):
            value = value.flatten()[0].item()
        info[key] = torch.tensor([value])
    return Sample(torch.tensor([reward]), torch.tensor([scores]), info)


def group_scores(samples: list[Sample]) -> list[float]:
    return [sample.scores[0].item() for sample in samples]


def keep_group(scores: list[float], reward_range: tuple[float, float] = (0.0, 1.0),
               std_threshold: float = 0.0) -> bool:
    low, high = reward_range
    mean = sum(scores) / len(scores)
    if not low < mean < high:
        return False
    std = (sum((s - mean) ** 2 for s in scores) / len(scores)) ** 0.5
    return std > std_threshold


def read_batched_answers(answers: list[dict[str, Any]]) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """Answers for consecutive chunks of a batch, as update_samples_with_rewards reads them."""
    rewards = torch.cat([torch.as_tensor(a["rewards"]) for a in answers], dim=0)
    scores = torch.cat([torch.as_tensor(a["scores"]) for a in answers], dim=0) if "scores" in answers[0] else rewards
    logs = {}
    if "extra_logs" in answers[0]:
        logs = {key: torch.cat([torch.as_tensor(a["extra_logs"][key]) for a in answers], dim=0)
                for key in answers[0]["extra_logs"]}
    return rewards, scores, logs
