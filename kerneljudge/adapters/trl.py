"""TRL `GRPOTrainer` reward function: `reward_funcs=[kerneljudge_reward(...)]`.

The function is `async def kerneljudge(prompts, completions, **kwargs) -> list[float]`.
`completions` are strings or chat message lists; the reference comes from a dataset column that
TRL passes through kwargs: `reference` (source) or `problem_id` (configurable with
`reference_column`). Components (mean per batch: kerneljudge/format, /compiled, /correct,
/speedup, /fallback) go to `metrics_hook(dict)` when given, and to TRL's `log_metric(name, value)`
when the trainer passes one in kwargs. Service failures give `fallback_reward` and a log line.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from contract.get_reward import ReferenceSpec, parse_reference_label
from contract.outcomes import DEFAULT_FALLBACK_REWARD, Outcome
from contract.requests import EvalOptions
from kerneljudge.adapters.common import completion_text, log_fallbacks, score_batch
from kerneljudge.client import AsyncKernelJudgeClient

MetricsHook = Callable[[dict[str, float]], None]


def kerneljudge_reward(
    client: AsyncKernelJudgeClient | None = None,
    *,
    options: EvalOptions | dict[str, Any] | None = None,
    reference_column: str | None = None,
    timeout_s: float = 600.0,
    fallback_reward: float = DEFAULT_FALLBACK_REWARD,
    metrics_hook: MetricsHook | None = None,
) -> Callable[..., Any]:
    """Build the reward function. Without `client`, one is made from KERNELJUDGE_URL / KERNELJUDGE_API_KEY."""
    opts = EvalOptions.model_validate(options) if isinstance(options, dict) else options
    judge = client or AsyncKernelJudgeClient()

    async def kerneljudge(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        texts: list[str] = []
        label_errors: list[str | None] = []
        for completion in completions:
            try:
                texts.append(completion_text(completion))
                label_errors.append(None)
            except ValueError as exc:
                texts.append("")
                label_errors.append(str(exc))
        references: list[ReferenceSpec | None] = []
        labels = _labels(kwargs, reference_column)
        if labels is None:
            wanted = reference_column or "reference` or `problem_id"
            labels, label_errors = [None] * len(texts), [f"no `{wanted}` column in the dataset batch"] * len(texts)
        for i, label in enumerate(labels):
            try:
                references.append(parse_reference_label(label))
            except ValueError as exc:
                references.append(None)
                label_errors[i] = label_errors[i] or f"reference column: {exc}"
        outcomes = await score_batch(judge, texts, references, options=opts, timeout_s=timeout_s,
                                     fallback_reward=fallback_reward, label_errors=label_errors)
        log_fallbacks(outcomes, "trl")
        _report(outcomes, metrics_hook, kwargs.get("log_metric"))
        return [o.reward for o in outcomes]

    return kerneljudge


def _labels(kwargs: dict[str, Any], column: str | None) -> list[Any] | None:
    columns = [column] if column else ["reference", "problem_id"]
    for name in columns:
        values = kwargs.get(name)
        if values is not None:
            if name == "problem_id":  # a bare id column: mark it so an id is never read as a source
                return [{"problem_id": v} if isinstance(v, str) else v for v in values]
            return list(values)
    return None


def _report(outcomes: list[Outcome], hook: MetricsHook | None, log_metric: Any) -> None:
    if not outcomes or (hook is None and not callable(log_metric)):
        return
    per_sample = [o.metrics() for o in outcomes]
    means = {f"kerneljudge/{name}": sum(m[name] for m in per_sample) / len(per_sample) for name in per_sample[0]}
    if hook is not None:
        hook(means)
    if callable(log_metric):
        for name, value in means.items():
            log_metric(name, value)
