"""The `/get_reward` contract (OpenRLHF's remote reward), one implementation for the service's
`POST /get_reward` (app/routes_reward.py) and OpenRLHF's file mode (kerneljudge/adapters/openrlhf.py).

Labels. `labels[i]` names the reference: its source, a registered problem id, or
{"reference"|"problem_id": ...} as JSON (`parse_reference_label`; every trainer adapter reads labels so).
The answer's fields and how OpenRLHF reads them are described in kerneljudge/adapters/openrlhf.py.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, overload

from pydantic import BaseModel, Field

from contract.outcomes import LOGGED_COMPONENTS, Outcome


@dataclass(frozen=True)
class ReferenceSpec:
    """What to compare against: a reference source, or the id of a problem registered on the server."""

    reference: str | None = None
    problem_id: str | None = None


def parse_reference_label(label: Any) -> ReferenceSpec:
    """Read a dataset label: {"reference": src} / {"problem_id": id}, its JSON string, a source, or an id.

    A plain string with a newline (or a `class Model`) is a reference source; a single token is a problem id.
    """
    if isinstance(label, str):
        stripped = label.strip()
        if stripped.startswith("{"):
            try:
                label = json.loads(stripped)
            except ValueError:
                raise ValueError("label looks like JSON but does not parse; send {\"reference\": ...} or "
                                 "{\"problem_id\": ...}") from None
        elif "\n" in stripped or "class Model" in stripped:
            return ReferenceSpec(reference=label)
        elif stripped and len(stripped.split()) == 1:
            return ReferenceSpec(problem_id=stripped)
        else:
            raise ValueError("label is empty or is neither a reference source nor a problem id")
    if isinstance(label, Mapping):
        reference, problem_id = label.get("reference"), label.get("problem_id")
        if isinstance(reference, str) and reference.strip() and problem_id is None:
            return ReferenceSpec(reference=reference)
        if isinstance(problem_id, str) and problem_id.strip() and reference is None:
            return ReferenceSpec(problem_id=problem_id.strip())
        raise ValueError("label must give exactly one of `reference` (source) or `problem_id` (a string)")
    raise ValueError(f"label of type {type(label).__name__} is not usable; give a reference source or problem id")


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
