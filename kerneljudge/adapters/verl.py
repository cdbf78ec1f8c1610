"""veRL custom reward: `custom_reward_function.path=.../kerneljudge/adapters/verl.py`, name `compute_score`.

`compute_score(data_source, solution_str, ground_truth, extra_info=None) -> dict` with `score` (the
verdict's reward, or `fallback_reward`) and numeric components: format, compiled, correct, speedup,
fallback. `ground_truth` is the reference source or a problem id (or {"reference"|"problem_id": ...}).
`extra_info` may carry `kerneljudge_options` (EvalOptions fields) for this sample.
The server is configured by KERNELJUDGE_URL / KERNELJUDGE_API_KEY, the per-sample deadline by
KERNELJUDGE_TIMEOUT_S (default 600) and the fallback by KERNELJUDGE_FALLBACK_REWARD (default 0).
"""

from __future__ import annotations

import os
from typing import Any

from pydantic import ValidationError

from contract.get_reward import parse_reference_label
from contract.outcomes import DEFAULT_FALLBACK_REWARD, Outcome, outcome_from_failure
from contract.requests import EvalOptions
from kerneljudge.adapters.common import score_one
from kerneljudge.client import KernelJudgeClient

_clients: dict[tuple[str | None, str | None], KernelJudgeClient] = {}


def _client() -> KernelJudgeClient:
    # One client per process (veRL may call from several worker processes), reused across calls.
    key = (os.environ.get("KERNELJUDGE_URL"), os.environ.get("KERNELJUDGE_API_KEY"))
    if key not in _clients:
        _clients[key] = KernelJudgeClient()
    return _clients[key]


def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None,
                  *, client: KernelJudgeClient | None = None) -> dict[str, float]:
    fallback = float(os.environ.get("KERNELJUDGE_FALLBACK_REWARD", DEFAULT_FALLBACK_REWARD))
    timeout_s = float(os.environ.get("KERNELJUDGE_TIMEOUT_S", "600"))
    outcome = _score(solution_str, ground_truth, extra_info or {}, client, fallback, timeout_s)
    if outcome.fallback:
        import logging

        logging.getLogger("kerneljudge.adapters").warning("verl (%s): fallback reward: %s", data_source,
                                                          outcome.reason)
    return {"score": outcome.reward, **outcome.metrics()}


def _score(solution_str: str, ground_truth: Any, extra_info: dict, client: KernelJudgeClient | None,
           fallback: float, timeout_s: float) -> Outcome:
    try:
        reference = parse_reference_label(ground_truth)
        options = EvalOptions.model_validate(extra_info["kerneljudge_options"]) \
            if extra_info.get("kerneljudge_options") else None
    except (ValueError, ValidationError) as exc:
        return outcome_from_failure(f"bad ground_truth or extra_info: {exc}", fallback)
    if not isinstance(solution_str, str):
        return outcome_from_failure("solution_str is not a string", fallback)
    return score_one(client or _client(), solution_str, reference, options=options, timeout_s=timeout_s,
                     fallback_reward=fallback)
