"""The problem set on CPU: honest Triton candidates pass, subtly wrong ones fail with details."""

from __future__ import annotations

import pytest

from contract.statuses import Backend, EvalStatus
from tests.problems_util import PROBLEM_NAMES, load_problem


@pytest.mark.parametrize("name", PROBLEM_NAMES)
def test_honest_triton_candidate_is_correct(run_eval, name):
    problem = load_problem(name).shrunk()
    result = run_eval(problem.reference, problem.triton_ok, trials=3)
    assert result.status == EvalStatus.ok, result.error
    assert result.correct and result.compiled
    assert result.backend == Backend.triton
    assert len(result.correctness.trials) == 3
    assert all(t.passed and t.mismatch_fraction == 0.0 for t in result.correctness.trials)
    assert result.reward == pytest.approx(0.3)  # correct, not timed: the default preset's base


@pytest.mark.parametrize("name", PROBLEM_NAMES)
def test_subtly_wrong_triton_candidate_fails_with_useful_details(run_eval, name):
    problem = load_problem(name).shrunk()
    result = run_eval(problem.reference, problem.triton_wrong, trials=3)
    assert result.status == EvalStatus.incorrect
    assert result.compiled and not result.correct
    assert result.reward == 0.0 and result.speedup is None
    failed = [t for t in result.correctness.trials if not t.passed]
    assert failed, "at least one trial must fail"
    # The message says how far off it is, so an RL engineer can see what kind of bug it is.
    assert any(t.message and ("differ" in t.message or "NaN" in t.message or "Inf" in t.message
                              or "shape" in t.message) for t in failed)


def test_timing_on_cpu_is_labelled_host_clock_and_has_stats(run_eval, settings):
    settings.gpu_index = 1  # a lane's GPU: a CPU job names none
    problem = load_problem("elementwise").shrunk()
    result = run_eval(problem.reference, problem.triton_ok, trials=2, timing=True, timing_budget_s=0.5,
                      timing_min_runs=5)
    assert result.status == EvalStatus.ok
    timing = result.timing
    assert timing.method == "host_clock" and timing.device == "cpu"
    for stats in (timing.reference, timing.candidate):
        assert stats.n >= 5
        # Real, distinct measurements: not one sample repeated, not a zero clock.
        assert 0 < stats.min_ms < stats.max_ms
    # The speedup is the median over interleaved block pairs of their medians' ratio (timing_protocol).
    assert timing.pairs >= 2 and timing.clock_check.passed
    low, high = timing.speedup_ci95
    assert low <= timing.speedup <= high
    assert result.speedup == timing.speedup
    assert set(result.stages) >= {"validate", "reference", "candidate", "compare", "timing"}
    assert result.environment.torch and result.environment.sandbox.value == "bwrap"
    assert result.environment.gpu_index is None


def test_cuda_candidate_on_cpu_says_a_gpu_is_needed(run_eval):
    problem = load_problem("elementwise").shrunk()
    result = run_eval(problem.reference, problem.cuda_ok)
    assert result.status == EvalStatus.invalid_input
    assert result.error.kind == "gpu_required"
    assert "GPU" in result.error.message
