"""Shared pieces of the trainer adapters: completion text, batch scoring, logging the fallbacks.

A sample's reward is its `Outcome` (contract/outcomes.py: the verdict's reward, or the adapter's fallback
reward with the reason); a dataset label is read by contract/get_reward.py's `parse_reference_label`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from contract.get_reward import ReferenceSpec
from contract.http_objects import SubmitItem
from contract.outcomes import (
    Outcome,
    outcome_from_failure,
    outcome_from_job,
)
from contract.requests import EvalOptions
from kerneljudge.client import AsyncKernelJudgeClient, KernelJudgeClient
from kerneljudge.errors import KernelJudgeError

log = logging.getLogger("kerneljudge.adapters")




def completion_text(completion: Any) -> str:
    """Plain text of a completion: a string, or a chat message list (the assistant messages' content).

    Messages are dicts or message objects with `role`/`content` attributes (verifiers' pydantic
    `AssistantMessage`); content is a string or a list of text parts (dicts or objects).
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Mapping) or _is_message_object(completion):
        completion = [completion]
    if isinstance(completion, Sequence):
        texts = []
        for message in completion:
            if (isinstance(message, Mapping) or _is_message_object(message)) \
                    and _field(message, "role", "assistant") == "assistant":
                texts.append(_content_text(_field(message, "content", None)))
        return "\n".join(texts)
    raise ValueError(f"completion of type {type(completion).__name__} is neither text nor chat messages")


def _is_message_object(value: Any) -> bool:
    return not isinstance(value, (str, bytes, Sequence)) and hasattr(value, "role") and hasattr(value, "content")


def _field(item: Any, name: str, default: Any) -> Any:
    if isinstance(item, Mapping):
        return item.get(name, default)
    return getattr(item, name, default)


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):  # multi-part content: [{"type": "text", "text": ...}, ...]
        return "".join(_field(p, "text", "") or "" for p in content if _field(p, "type", None) == "text")
    return ""


def log_fallbacks(outcomes: Sequence[Outcome], adapter: str) -> None:
    failed = [o for o in outcomes if o.fallback]
    if failed:
        log.warning("%s: %d of %d samples got the fallback reward; first reason: %s", adapter, len(failed),
                    len(outcomes), failed[0].reason)


async def score_batch(
    client: AsyncKernelJudgeClient,
    completions: Sequence[str],
    references: Sequence[ReferenceSpec | None],
    *,
    options: EvalOptions | None,
    timeout_s: float,
    fallback_reward: float,
    label_errors: Sequence[str | None] | None = None,
) -> list[Outcome]:
    """Submit every sample with a usable reference, wait until done or `timeout_s`; never raises."""
    outcomes: list[Outcome | None] = [None] * len(completions)
    to_submit: list[tuple[int, SubmitItem]] = []
    for i, (text, ref) in enumerate(zip(completions, references, strict=True)):
        problem = label_errors[i] if label_errors else None
        if problem or ref is None:
            outcomes[i] = outcome_from_failure(problem or "no reference for this sample", fallback_reward)
            continue
        to_submit.append((i, SubmitItem(reference=ref.reference, problem_id=ref.problem_id, completion=text,
                                        options=options)))
    if to_submit:
        try:
            await _submit_and_wait(client, to_submit, outcomes, timeout_s, fallback_reward)
        except (KernelJudgeError, OSError) as exc:
            log.exception("kerneljudge request failed")
            for i, _ in to_submit:
                if outcomes[i] is None:
                    outcomes[i] = outcome_from_failure(f"service error: {exc}", fallback_reward)
    return [o if o is not None else outcome_from_failure("no answer", fallback_reward) for o in outcomes]


async def _submit_and_wait(client: AsyncKernelJudgeClient, to_submit: list[tuple[int, SubmitItem]],
                           outcomes: list[Outcome | None], timeout_s: float, fallback_reward: float) -> None:
    loop_clock = client.clock  # one deadline for both phases, on the client's clock
    deadline = loop_clock() + timeout_s
    entries = await client.submit_many([item for _, item in to_submit], timeout=timeout_s)
    job_positions: dict[str, int] = {}
    for entry in entries:
        position = to_submit[entry.index][0]
        if entry.job is None:
            reason = f"rejected by the server: {entry.error.message if entry.error else 'no reason'}"
            outcomes[position] = outcome_from_failure(reason, fallback_reward)
        else:
            job_positions[entry.job.id] = position
    if job_positions:
        remaining = max(0.001, deadline - loop_clock())
        for job in await client.wait_many(list(job_positions), timeout=remaining):
            outcomes[job_positions[job.id]] = outcome_from_job(job, fallback_reward)


def score_one(client: KernelJudgeClient, completion: str, reference: ReferenceSpec, *,
              options: EvalOptions | None, timeout_s: float, fallback_reward: float) -> Outcome:
    """Blocking single-sample scoring (for per-sample trainer hooks); never raises."""
    try:
        job = client.submit_and_wait(reference.reference, problem_id=reference.problem_id, completion=completion,
                                     options=options, timeout=timeout_s)
        return outcome_from_job(job, fallback_reward)
    except (KernelJudgeError, OSError) as exc:
        log.warning("kerneljudge request failed: %s", exc)
        return outcome_from_failure(f"service error: {exc}", fallback_reward)
