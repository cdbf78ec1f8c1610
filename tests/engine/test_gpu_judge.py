"""The judge and the warm pool on a GPU (run on the device machine: pytest -m gpu)."""

from __future__ import annotations

import pytest

from contract.statuses import EvalStatus
from tests.engine.conftest import HONEST_SILU, SILU_REFERENCE, triton_candidate
from tests.engine.test_failures import LAUNCH, NO_STATIC_POLICY
from tests.problems_util import load_problem

pytestmark = pytest.mark.gpu

BIG_SILU_REFERENCE = SILU_REFERENCE.replace("N = 1000", "N = 1 << 24")


def test_a_cached_judge_compares_on_the_gpu_and_keeps_verdicts_identical(run_eval):
    first = run_eval(BIG_SILU_REFERENCE, HONEST_SILU, device="cuda", seed=5, timing=True, timing_budget_s=0.5)
    second = run_eval(BIG_SILU_REFERENCE, HONEST_SILU, device="cuda", seed=5, timing=True, timing_budget_s=0.5)
    assert first.status == second.status == EvalStatus.ok, (first.error, second.error)
    assert second.extra.reference_cache == "hit"
    assert [t.max_abs_error for t in first.correctness.trials] == [t.max_abs_error for t in second.correctness.trials]
    # The reference is timed in every job, interleaved with the candidate, and both agree with the clock.
    assert second.timing.reference_age_s == 0 and second.timing.pairs >= 2
    assert first.timing.clock_check.passed and second.timing.clock_check.passed
    assert second.stages["reference"] < first.stages["reference"]


def test_a_candidate_that_breaks_its_cuda_context_does_not_touch_the_judge(run_eval):
    illegal = triton_candidate('''
        y = torch.empty_like(x)
        bad_kernel[(1,)](x, y, 1 << 40, BLOCK=256)
        return y
    ''', kernel='''
@triton.jit
def bad_kernel(x_ptr, y_ptr, offset, BLOCK: tl.constexpr):
    offs = offset + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs))
''')
    honest = run_eval(SILU_REFERENCE, HONEST_SILU, device="cuda", seed=9)
    broken = run_eval(SILU_REFERENCE, illegal, device="cuda", seed=9, policy=NO_STATIC_POLICY)
    again = run_eval(SILU_REFERENCE, HONEST_SILU, device="cuda", seed=9)
    assert broken.status in (EvalStatus.runtime_error, EvalStatus.incorrect)
    assert honest.status == again.status == EvalStatus.ok and again.extra.reference_cache == "hit"


def test_a_large_output_goes_through_the_pipes_and_a_wrong_cuda_candidate_fails(run_eval):
    problem = load_problem("elementwise")
    ok = run_eval(problem.reference, problem.triton_ok, device="cuda", timing=True, timing_budget_s=1.0)
    wrong = run_eval(problem.reference, problem.triton_wrong, device="cuda")
    assert ok.status == EvalStatus.ok, ok.error
    assert wrong.status == EvalStatus.incorrect
    assert ok.timing.candidate.n >= 10 and ok.extra.timing_runs.candidate == ok.timing.candidate.n


def test_replayed_outputs_during_timing_are_caught_on_the_gpu(run_eval):
    replay = triton_candidate('''
self.calls = getattr(self, "calls", 0) + 1
if self.calls > 3 and hasattr(self, "saved"):
    return self.saved
''' + LAUNCH + "self.saved = y\nreturn y")
    # The probe trials (calls 4 and on) and the doubled-batch trial would catch the replay first (KJ-R15,
    # KJ-R09): off here, as in tests/engine/test_runtime_rules.py, so that the check on timed outputs is tested.
    policy = NO_STATIC_POLICY.model_copy(update={"disabled_rules": [*NO_STATIC_POLICY.disabled_rules, "KJ-R09",
                                                                    "KJ-R15"]})
    result = run_eval(SILU_REFERENCE, replay, device="cuda", trials=3, timing=True, timing_budget_s=0.3,
                      timing_min_runs=4, policy=policy)
    assert result.status == EvalStatus.rejected
    assert any(hit.rule == "KJ-R02-timed-outputs-wrong" for hit in result.rules)
