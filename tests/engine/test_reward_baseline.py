"""Choosing the reward's baseline: every preset reads the `speedup` component, which is the
eager or the compile speedup as the job asks."""

from __future__ import annotations

import math

import pytest

from worker.engine.verdict import reward


def test_the_compile_baseline_feeds_the_presets_speedup():
    speedup, note = reward.reward_speedup("compile", eager=4.0, compiled=1.5)
    assert speedup == 1.5 and note is None
    comps = reward.components(compiled=True, correct=True, speedup=speedup, compile_speedup=1.5)
    assert reward.compute_reward("log_speedup", comps) == pytest.approx((math.log2(1.5) + 1) / 4)
    assert reward.compute_reward("binary_fast", reward.components(
        compiled=True, correct=True, speedup=reward.reward_speedup("compile", 2.0, 0.8)[0])) == 0.0


def test_eager_is_the_default_and_a_missing_compile_baseline_falls_back_with_a_note():
    assert reward.reward_speedup("eager", 3.0, 1.2) == (3.0, None)
    speedup, note = reward.reward_speedup("compile", 3.0, None, "torch.compile failed: X")
    assert speedup == 3.0 and note is not None and note.model_dump() == {"requested": "compile", "used": "eager", "why": "torch.compile failed: X"}
    assert reward.reward_speedup("compile", None, None) == (None, None), "not timed: nothing to reward"


def test_custom_weights_may_use_the_compile_speedup():
    comps = reward.components(compiled=True, correct=True, speedup=2.0, compile_speedup=1.25)
    assert reward.compute_reward("custom", comps, weights={"compile_speedup": 1.0}) == 1.25
    assert reward.components(compiled=True, correct=False, speedup=2.0, compile_speedup=1.25)["compile_speedup"] == 0


def test_the_baselines_and_their_default_are_declared_once():
    """contract.results declares them; the request, the result and `kerneljudge eval` take them from there."""
    import argparse
    from typing import get_args

    from contract.requests import DEFAULT_REWARD_BASELINE, REWARD_BASELINES, EvalOptions
    from contract.results import EvalResult
    from worker.engine.eval_cli import add_arguments

    assert REWARD_BASELINES == ("eager", "compile") and DEFAULT_REWARD_BASELINE == "eager"
    for model in (EvalOptions, EvalResult):
        declared = model.model_fields["reward_baseline"]
        assert get_args(declared.annotation) == REWARD_BASELINES and declared.default == DEFAULT_REWARD_BASELINE
    assert EvalOptions().reward_baseline == DEFAULT_REWARD_BASELINE
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    option = next(action for action in parser._actions if action.dest == "reward_baseline")
    assert tuple(option.choices) == REWARD_BASELINES and option.default == DEFAULT_REWARD_BASELINE


@pytest.mark.parametrize(("asked", "device", "compile_baseline"), [
    ({"reward_baseline": "compile"}, "cuda", True),
    ({}, "cpu", False),
    ({"compile_baseline": True}, "cpu", True),
    ({"compile_baseline": False, "reward_baseline": "eager"}, "cuda", False),
])
def test_a_result_says_which_baseline_its_job_asked_for(asked, device, compile_baseline):
    from contract.requests import EvalOptions
    from worker.engine.verdict.result_builder import ResultBuilder

    options = EvalOptions(device=device, **asked)
    result = ResultBuilder(options).finish()
    assert result.reward_baseline == options.reward_baseline == asked.get("reward_baseline", "eager")
    assert result.compile_baseline is compile_baseline
