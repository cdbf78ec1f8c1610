"""OpenRLHF remote reward: the `/get_reward` contract as two pure functions (no torch, no I/O).

OpenRLHF posts `{"query": [...], "prompts": [...], "labels": [...]}` to `--remote_rm_url`;
`query[i]` is prompt + response, `labels[i]` comes from `--label_key` and carries the reference
(source, problem id, or {"reference"|"problem_id": ...} as JSON). The answer is
`{"rewards": [...], "scores": [...], "extra_logs": {...}}`:
  rewards     the verdict's reward, or `fallback_reward` when no verdict was produced
  scores      1.0 if correct else 0.0 (OpenRLHF uses scores in [0, 1] for dynamic filtering)
  extra_logs  per-sample lists: kerneljudge/format, /compiled, /correct, /speedup, /fallback

`score_request` scores such a body through the client, for OpenRLHF's file mode (`reward_func` in
examples/openrlhf_reward_func.py). The API's own POST /get_reward (app/routes_reward.py) is a separate
implementation that does not use this module (its `scores` repeat the rewards).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from worker.models import EvalOptions

from ..client import AsyncKernelJudgeClient
from .common import (
    DEFAULT_FALLBACK_REWARD,
    LOGGED_COMPONENTS,
    Outcome,
    ReferenceSpec,
    log_fallbacks,
    parse_reference_label,
    score_batch,
)

LOG_PREFIX = "kerneljudge/"


class GetRewardRequestError(ValueError):
    """The body is not a /get_reward request; the message names the field (answer 422)."""


@dataclass(frozen=True)
class RewardRequestItem:
    completion: str  # the response alone: the prompt is cut off the query when it is a prefix of it
    reference: ReferenceSpec | None
    label_error: str | None  # why this sample cannot be evaluated (it gets the fallback reward)


def parse_get_reward_request(body: Any) -> list[RewardRequestItem]:
    if not isinstance(body, Mapping):
        raise GetRewardRequestError("body must be a JSON object with `query`, `prompts` and `labels`")
    queries = _string_list(body, "query", required=True)
    prompts = _string_list(body, "prompts", required=False)
    labels = body.get("labels")
    if labels is None:
        raise GetRewardRequestError("`labels` is missing; pass --label_key so each sample carries its reference "
                                    "source or problem id")
    if not isinstance(labels, list):
        raise GetRewardRequestError("`labels` must be a list")
    for name, values in (("prompts", prompts), ("labels", labels)):
        if values is not None and len(values) != len(queries):
            raise GetRewardRequestError(f"`{name}` has {len(values)} items but `query` has {len(queries)}")
    items = []
    for i, query in enumerate(queries):
        try:
            reference, label_error = parse_reference_label(labels[i]), None
        except ValueError as exc:
            reference, label_error = None, f"labels[{i}]: {exc}"
        items.append(RewardRequestItem(_response_part(query, prompts[i] if prompts else None), reference,
                                       label_error))
    return items


def _string_list(body: Mapping, name: str, *, required: bool) -> list[str] | None:
    values = body.get(name)
    if values is None and not required:
        return None
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise GetRewardRequestError(f"`{name}` must be a list of strings")
    return values


def _response_part(query: str, prompt: str | None) -> str:
    # The prompt often shows the reference (class Model) and sometimes an example ModelNew:
    # only the response may be searched for the candidate.
    if prompt:
        at = query.find(prompt)
        if at >= 0:
            return query[at + len(prompt):]
    return query


def response_from_outcomes(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    metrics = [o.metrics() for o in outcomes]
    names = (*LOGGED_COMPONENTS, "fallback")
    return {
        "rewards": [o.reward for o in outcomes],
        "scores": [1.0 if o.components.get("correct") else 0.0 for o in outcomes],
        "extra_logs": {f"{LOG_PREFIX}{name}": [m[name] for m in metrics] for name in names},
    }


async def score_request(body: Any, client: AsyncKernelJudgeClient | None = None, *,
                        options: EvalOptions | None = None, timeout_s: float = 600.0,
                        fallback_reward: float = DEFAULT_FALLBACK_REWARD) -> dict[str, Any]:
    """Score a /get_reward body through the service (OpenRLHF file mode); raises only for a malformed body."""
    items = parse_get_reward_request(body)
    judge = client or AsyncKernelJudgeClient()
    try:
        outcomes = await score_batch(judge, [i.completion for i in items], [i.reference for i in items],
                                     options=options, timeout_s=timeout_s, fallback_reward=fallback_reward,
                                     label_errors=[i.label_error for i in items])
    finally:
        if client is None:
            await judge.aclose()
    log_fallbacks(outcomes, "openrlhf")
    return response_from_outcomes(outcomes)
