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

from typing import Any

from contract.get_reward import (
    parse_get_reward_request,
    response_from_outcomes,
)
from contract.outcomes import DEFAULT_FALLBACK_REWARD
from contract.requests import EvalOptions
from kerneljudge.adapters.common import log_fallbacks, score_batch
from kerneljudge.client import AsyncKernelJudgeClient


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
