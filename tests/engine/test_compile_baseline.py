"""The torch.compile baseline on CPU: measured by the judge, cached with the problem's entry,
rewarded when asked for, and never in the way of an eager verdict when torch.compile fails."""

from __future__ import annotations

import math

from tests.engine.conftest import HONEST_SILU, SILU_REFERENCE
from worker.models import EvalStatus

# Small timing so that the Triton interpreter's candidate stays quick.
TIMING = {"timing": True, "timing_budget_s": 0.2, "timing_min_runs": 3, "timing_max_runs": 5, "trials": 2}

# A toolchain Inductor cannot use: torch.compile fails at the first call, eager is unaffected.
UNCOMPILABLE_REFERENCE = ("import torch._inductor.config\n"
                          "torch._inductor.config.cpp.cxx = ('/nonexistent/c++',)\n" + SILU_REFERENCE)


def test_the_compile_baseline_is_measured_once_per_problem_and_can_be_rewarded(run_eval):
    first = run_eval(SILU_REFERENCE, HONEST_SILU, seed=4101, compile_baseline=True, **TIMING)
    assert first.status == EvalStatus.ok, first.error
    assert first.extra["compile_baseline"] == {"compiled_for_this_job": True, "available": True,
                                               "judge_compiles": 1,
                                               "compile_s": first.extra["compile_baseline"]["compile_s"]}
    assert first.extra["compile_baseline"]["compile_s"] > 0
    timing = first.timing
    assert timing is not None and timing.compile_baseline_missing is None
    assert timing.compile_reference is not None and timing.compile_reference_median_ms > 0
    assert timing.compile_speedup == timing.compile_reference_median_ms / timing.candidate.median_ms
    assert timing.compile_speedup_ci95 is not None and timing.compile_reference_age_s is not None
    assert first.reward_components["compile_speedup"] == timing.compile_speedup
    assert first.reward_components["speedup"] == first.speedup, "the eager baseline is the default"

    second = run_eval(SILU_REFERENCE, HONEST_SILU, seed=4101, compile_baseline=True, reward_preset="log_speedup",
                      reward_baseline="compile", **TIMING)
    assert second.status == EvalStatus.ok, second.error
    assert second.extra["reference_cache"] == "hit"
    assert second.extra["compile_baseline"]["compiled_for_this_job"] is False
    assert second.extra["compile_baseline"]["judge_compiles"] == 1, "the judge compiled once for both jobs"
    assert second.timing is not None and second.timing.compile_speedup is not None
    s = second.timing.compile_speedup
    assert second.reward_components["speedup"] == s
    assert math.isclose(second.reward, max(0.0, min(math.log2(s) + 1.0, 4.0)) / 4.0)
    assert "reward_baseline" not in second.extra


def test_a_reference_torch_compile_cannot_compile_still_gets_an_eager_verdict(run_eval):
    result = run_eval(UNCOMPILABLE_REFERENCE, HONEST_SILU, seed=4102, compile_baseline=True,
                      reward_baseline="compile", **TIMING)
    assert result.status == EvalStatus.ok, result.error
    assert result.timing is not None and result.timing.speedup > 0
    assert result.timing.compile_speedup is None and result.timing.compile_reference is None
    assert "torch.compile failed" in result.timing.compile_baseline_missing
    assert "InvalidCxxCompiler" in result.timing.compile_baseline_missing
    assert result.extra["compile_baseline"]["available"] is False
    # The reward falls back to the eager speedup and says why.
    assert result.reward_components["speedup"] == result.speedup
    assert result.extra["reward_baseline"]["used"] == "eager"


def test_the_compile_baseline_is_off_by_default_on_cpu(run_eval):
    result = run_eval(SILU_REFERENCE, HONEST_SILU, seed=4103, **TIMING)
    assert result.status == EvalStatus.ok, result.error
    assert "compile_baseline" not in result.extra
    assert result.timing is not None and result.timing.compile_speedup is None
    assert "off by default on cpu" in result.timing.compile_baseline_missing


def test_a_compiled_reference_that_disagrees_with_the_eager_one_is_no_baseline():
    import torch

    from worker.engine import correctness
    from worker.engine.sandbox_runtime.compile_baseline import compile_reference
    from worker.engine.sandbox_runtime.loader import to_storable

    class CompilesDifferently(torch.nn.Module):
        def forward(self, x):
            return x * 2 if torch.compiler.is_compiling() else x * torch.sigmoid(x)

    model, args = CompilesDifferently(), [torch.randn(64)]
    expected = correctness.Outputs(**to_storable(model(*args)))

    def matches(stored: dict) -> str | None:
        result = correctness.compare(0, expected, correctness.Outputs(**stored), None, None)
        return None if result.passed else result.message

    outcome = compile_reference(model, args, torch.device("cpu"), lambda: None, matches)
    assert outcome.model is None and outcome.compile_s > 0
    assert outcome.reason.startswith("the compiled reference does not match the eager one on trial 0")


def test_the_worker_switch_and_a_judge_broken_by_compile_turn_the_baseline_off():
    from tests.engine.test_reference_cache import _cache, _entry, _key
    from worker.engine.compile_baseline import off_reason
    from worker.engine.settings import EngineSettings
    from worker.models import EvalOptions

    cache, settings = _cache(), EngineSettings()
    entry = _entry(_key())
    cuda = EvalOptions(device="cuda")
    assert off_reason(cuda, settings, cache, entry) is None, "on by default on cuda"
    assert off_reason(EvalOptions(device="cuda", compile_baseline=False), settings, cache, entry) is not None
    cache.compile_failures[entry.key] = "torch.compile of the reference broke the judge (crashed): ..."
    assert off_reason(cuda, settings, cache, entry).startswith("torch.compile of the reference broke the judge")
    settings.compile_baseline = False
    assert "KERNELJUDGE_COMPILE_BASELINE" in off_reason(cuda, settings, cache, entry)
