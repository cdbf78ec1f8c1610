"""Every library problem on CPU through the real engine: the honest Triton candidate is `ok`, the
subtly wrong one is `incorrect` (sizes shrunk to the problem's cpu_sizes, two trials, no timing)."""

from __future__ import annotations

import pytest

from worker.models import Backend, EvalStatus
from worker.problem_library.catalog import get_problem, problem_names


@pytest.mark.parametrize("name", problem_names())
def test_honest_triton_candidate_is_ok(evaluate_on_cpu, name):
    result = evaluate_on_cpu(get_problem(name), "triton_ok")
    assert result.status == EvalStatus.ok, (result.error, result.rules)
    assert result.correct and result.backend == Backend.triton
    assert [trial.passed for trial in result.correctness.trials] == [True, True]


@pytest.mark.parametrize("name", problem_names())
def test_wrong_triton_candidate_is_incorrect(evaluate_on_cpu, name):
    result = evaluate_on_cpu(get_problem(name), "triton_wrong")
    assert result.status == EvalStatus.incorrect, (result.error, result.rules)
    assert result.compiled and not result.correct and result.reward == 0.0
    assert any(not trial.passed for trial in result.correctness.trials)
