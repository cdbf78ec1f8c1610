"""Numba @cuda.jit candidates on a GPU (run on the device machine: pytest -m gpu).

Needs numba and numba-cuda in the environment and the CUDA toolkit (NVVM, NVRTC) under CUDA_HOME.
"""

from __future__ import annotations

import pytest

from contract.statuses import Backend, EvalStatus
from problem_library.catalog import get_problem

pytestmark = pytest.mark.gpu


def test_honest_numba_candidate_is_timed_and_its_kernel_attributed_as_own(run_eval):
    problem = get_problem("elementwise")
    result = run_eval(problem.reference, problem.candidate("numba_ok"), device="cuda", timing=True,
                      timing_budget_s=1.0)
    assert result.status == EvalStatus.ok, (result.error, result.rules)
    assert result.backend == Backend.numba and result.timing.candidate.n >= 10
    # CUPTI saw the Numba kernel (its trace name is Numba's module::name[abi:...] form) as the
    # candidate's own, on the timed stream, doing all of the compute.
    coverage = result.coverage
    assert coverage.method == "cupti_kernel_trace"
    assert any("silu_affine_kernel" in kernel.name for kernel in coverage.own_kernels), coverage
    assert coverage.share == 1.0 and not coverage.own_kernels_not_launched, coverage
    assert not coverage.off_stream_kernels and not coverage.escaped_kernels, coverage
    assert not result.rules, result.rules


@pytest.mark.parametrize("name", ["silu", "reduction"])
def test_numba_library_candidates_on_the_gpu(run_eval, name):
    problem = get_problem(name)
    honest = run_eval(problem.reference, problem.candidate("numba_ok"), device="cuda",
                      policy={"profile": problem.profile})
    assert honest.status == EvalStatus.ok, (honest.error, honest.rules)
    assert honest.coverage.share == 1.0, honest.coverage
    wrong = run_eval(problem.reference, problem.candidate("numba_wrong"), device="cuda",
                     policy={"profile": problem.profile})
    assert wrong.status == EvalStatus.incorrect, (wrong.error, wrong.rules)
