"""verifiers reward function: `vf.Rubric(funcs=[kerneljudge_reward(...)])`.

The function is `async def kerneljudge(completion, answer, state=None, **kwargs) -> float`:
`completion` is a string or chat messages, `answer` (the dataset's answer column) is the
reference source or problem id. The components are stored in `state["kerneljudge"]` for
inspection. Service failures give `fallback_reward` and a log line, never an exception.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from contract.get_reward import parse_reference_label
from contract.outcomes import DEFAULT_FALLBACK_REWARD
from contract.requests import EvalOptions
from kerneljudge.adapters.common import completion_text, log_fallbacks, score_batch
from kerneljudge.client import AsyncKernelJudgeClient


def kerneljudge_reward(
    client: AsyncKernelJudgeClient | None = None,
    *,
    options: EvalOptions | dict[str, Any] | None = None,
    timeout_s: float = 600.0,
    fallback_reward: float = DEFAULT_FALLBACK_REWARD,
) -> Callable[..., Any]:
    opts = EvalOptions.model_validate(options) if isinstance(options, dict) else options
    judge = client or AsyncKernelJudgeClient()

    async def kerneljudge(completion: Any, answer: Any, state: dict | None = None, **kwargs: Any) -> float:
        problem = None
        try:
            text = completion_text(completion)
            reference = parse_reference_label(answer)
        except ValueError as exc:
            text, reference, problem = "", None, str(exc)
        outcome = (await score_batch(judge, [text], [reference], options=opts, timeout_s=timeout_s,
                                     fallback_reward=fallback_reward, label_errors=[problem]))[0]
        log_fallbacks([outcome], "verifiers")
        if state is not None:
            state["kerneljudge"] = {**outcome.metrics(), "status": outcome.status, "reason": outcome.reason}
        return outcome.reward

    return kerneljudge
