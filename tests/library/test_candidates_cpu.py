"""Every library problem on CPU through the real engine: the honest Triton and Numba candidates are
`ok`, the subtly wrong ones `incorrect` (sizes shrunk to the problem's cpu_sizes, two trials, no
timing; Triton under its interpreter, Numba under its CUDA simulator)."""

from __future__ import annotations

import pytest

from contract.statuses import Backend, EvalStatus
from problem_library.catalog import get_problem, load_library, problem_names


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


WITH_NUMBA = [p.name for p in load_library() if "numba_ok" in p.kinds]


@pytest.mark.parametrize("name", WITH_NUMBA)
def test_honest_numba_candidate_is_ok_and_its_kernel_is_seen_running(evaluate_on_cpu, name):
    result = evaluate_on_cpu(get_problem(name), "numba_ok")
    assert result.status == EvalStatus.ok, (result.error, result.rules)
    assert result.correct and result.backend == Backend.numba
    assert [trial.passed for trial in result.correctness.trials] == [True, True]
    # The simulator's launches are the evidence: the candidate's own kernel did all the compute.
    coverage = result.coverage
    assert coverage.method == "interpreter_and_aten_trace"
    assert coverage.share == 1.0 and not coverage.own_kernels_not_launched, coverage
    assert [k.name for k in coverage.own_kernels] and all(k.name.endswith("_kernel") for k in coverage.own_kernels)


@pytest.mark.parametrize("name", WITH_NUMBA)
def test_wrong_numba_candidate_is_incorrect(evaluate_on_cpu, name):
    result = evaluate_on_cpu(get_problem(name), "numba_wrong")
    assert result.status == EvalStatus.incorrect, (result.error, result.rules)
    assert result.compiled and not result.correct and result.reward == 0.0
    assert any(not trial.passed for trial in result.correctness.trials)
