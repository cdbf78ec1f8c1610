"""OpenRLHF remote reward: the one implementation of the `/get_reward` contract (no torch).

Two callers share it: the service's `POST /get_reward` (app/routes_reward.py) and OpenRLHF's
file mode (`score_request`, used by examples/openrlhf_reward_func.py), so both answer alike.

Request. OpenRLHF posts `{"query": [...], "prompts": [...], "labels": [...]}` to `--remote_rm_url`
(or calls `reward_func(queries, prompts, labels)` of a .py file). `query[i]` is prompt + response,
`labels[i]` comes from `--label_key` and names the reference: its source, a registered problem id,
or {"reference"|"problem_id": ...} as JSON.

Answer (`GetRewardResponse`), one entry per query:
  rewards     the verdict's reward under the chosen preset, or the fallback reward (0.0) when the
              service produced no verdict (bad label, failed job, deadline passed)
  scores      1.0 for a correct kernel, else 0.0, whatever the preset: OpenRLHF's dynamic
              filtering drops a prompt whose samples' scores are all 0 or all 1
  extra_logs  numeric lists OpenRLHF logs per sample: kerneljudge/format, /compiled, /correct,
              /speedup, /fallback (1.0 where the fallback reward was given)
  reasons     why a sample got the fallback reward (null otherwise); not read by OpenRLHF
  job_ids     the evaluation of each sample (null when none was created); not read by OpenRLHF

How OpenRLHF reads it (OpenRLHF/OpenRLHF main): openrlhf/utils/agent.py,
SingleTurnAgentExecutor.execute, sends one sample per request and takes `rewards`,
`scores or rewards` and `extra_logs` from the answer; trainer/ppo_utils/samples_generator.py
(_process_response_into_experience) turns each into a tensor of the sample; the dynamic filter
(trainer/ppo_utils/dynamic_filtering.py) reads `scores`. Plain JSON lists suit every reader: a
one-element tensor holding 0.0 would be falsy in `scores or rewards` and be replaced by the reward.
tests/client/openrlhf_reader.py re-implements that reader to test both callers against it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, overload

from pydantic import BaseModel, Field

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
LOG_KEYS = tuple(f"{LOG_PREFIX}{name}" for name in (*LOGGED_COMPONENTS, "fallback"))


class GetRewardRequestError(ValueError):
    """The body is not a /get_reward request; `field` names the culprit (the service answers 422)."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


class GetRewardResponse(BaseModel):
    """The answer to one /get_reward request (see the module docstring)."""

    rewards: list[float]
    scores: list[float] = Field(description="1.0 for a correct kernel, else 0.0, whatever the preset "
                                            "(OpenRLHF's dynamic filtering reads it).")
    extra_logs: dict[str, list[float]] = Field(
        description="Per item, numeric only (OpenRLHF turns them into tensors and logs them): "
                    + ", ".join(LOG_KEYS) + " (1.0 when the fallback reward was given).")
    reasons: list[str | None] = Field(description="Why an item got the fallback reward (null when it did not).")
    job_ids: list[str | None] = Field(description="The evaluation of each item (null when none was created).")


@dataclass(frozen=True)
class RewardRequestItem:
    completion: str  # the response alone: the prompt is cut off the query when the query contains it
    reference: ReferenceSpec | None
    label_error: str | None  # why this sample cannot be evaluated (it gets the fallback reward)


def parse_get_reward_request(body: Any) -> list[RewardRequestItem]:
    if not isinstance(body, Mapping):
        raise GetRewardRequestError("body", "body must be a JSON object with `query`, `prompts` and `labels`")
    queries = _string_list(body, "query", required=True)
    prompts = _string_list(body, "prompts", required=False)
    labels = body.get("labels")
    if labels is None:
        raise GetRewardRequestError("labels", "`labels` is missing; pass --label_key so each sample carries its "
                                              "reference source or problem id")
    if not isinstance(labels, list):
        raise GetRewardRequestError("labels", "`labels` must be a list")
    for name, values in (("prompts", prompts), ("labels", labels)):
        if values is not None and len(values) != len(queries):
            raise GetRewardRequestError(name, f"`{name}` has {len(values)} items but `query` has {len(queries)}")
    items = []
    for i, query in enumerate(queries):
        try:
            reference, label_error = parse_reference_label(labels[i]), None
        except ValueError as exc:
            reference, label_error = None, f"labels[{i}]: {exc}"
        items.append(RewardRequestItem(_response_part(query, prompts[i] if prompts else None), reference,
                                       label_error))
    return items


@overload
def _string_list(body: Mapping, name: str, *, required: Literal[True]) -> list[str]: ...


@overload
def _string_list(body: Mapping, name: str, *, required: Literal[False]) -> list[str] | None: ...


def _string_list(body: Mapping, name: str, *, required: bool) -> list[str] | None:
    values = body.get(name)
    if values is None and not required:
        return None
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise GetRewardRequestError(name, f"`{name}` must be a list of strings")
    return values


def _response_part(query: str, prompt: str | None) -> str:
    # The prompt often shows the reference (class Model) and sometimes an example ModelNew:
    # only the response may be searched for the candidate. OpenRLHF decodes prompt + response
    # tokens, which may add special tokens before the prompt, so the prompt is found, not matched.
    if prompt:
        at = query.find(prompt)
        if at >= 0:
            return query[at + len(prompt):]
    return query


def response_from_outcomes(outcomes: Sequence[Outcome]) -> GetRewardResponse:
    metrics = [o.metrics() for o in outcomes]
    return GetRewardResponse(
        rewards=[float(o.reward) for o in outcomes],
        scores=[1.0 if o.correct else 0.0 for o in outcomes],
        extra_logs={f"{LOG_PREFIX}{name}": [m[name] for m in metrics] for name in (*LOGGED_COMPONENTS, "fallback")},
        reasons=[o.reason for o in outcomes],
        job_ids=[o.job_id for o in outcomes],
    )


async def score_request(body: Any, client: AsyncKernelJudgeClient | None = None, *,
                        options: EvalOptions | None = None, timeout_s: float = 600.0,
                        fallback_reward: float = DEFAULT_FALLBACK_REWARD) -> dict[str, Any]:
    """Score a /get_reward body through the service (OpenRLHF file mode); raises only for a malformed body.

    Returns the answer as plain JSON data, exactly what POST /get_reward sends.
    """
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
    return response_from_outcomes(outcomes).model_dump()
