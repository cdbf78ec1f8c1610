"""Runtime verification on CPU: what the supervisor observes catches what the source hides."""

from __future__ import annotations

from tests.engine.conftest import HONEST_SILU, SILU_REFERENCE, triton_candidate
from tests.engine.test_failures import LAUNCH, NO_STATIC_POLICY
from worker.models import EvalStatus


def _rules(result) -> set[str]:
    return {hit.rule for hit in result.rules}


def test_honest_candidate_dispatches_only_allocation_and_copies(run_eval):
    result = run_eval(SILU_REFERENCE, HONEST_SILU)
    assert result.status == EvalStatus.ok
    assert not result.rules
    assert set(result.extra["aten_ops"]) <= {"aten.empty_like", "aten.empty", "aten.new_empty", "aten.set_",
                                             "aten.copy_"}
    # Allocation and copies are the candidate's own time: nothing is left to PyTorch compute.
    assert result.coverage.share == 1.0 and result.coverage.pytorch_compute_ms == 0.0
    assert result.coverage.method == "host_clock_per_op" and result.coverage.forward_ms > 0
    assert result.reward_components["coverage"] == 1.0


def test_pytorch_compute_hidden_behind_a_table_is_flagged(run_eval):
    candidate = triton_candidate(LAUNCH + "return OPS['act'](y * 0 + x)",
                                 extra="OPS = {'act': torch.nn.functional.silu}\n")
    result = run_eval(SILU_REFERENCE, candidate, policy=NO_STATIC_POLICY)
    assert result.status == EvalStatus.ok and result.flagged
    assert "KJ-R08-pytorch-compute-at-runtime" in _rules(result)
    hit = next(h for h in result.rules if h.rule == "KJ-R08-pytorch-compute-at-runtime")
    assert "aten.silu x1 (" in hit.evidence and " ms)" in hit.evidence
    assert result.reward == 0.0
    coverage = result.coverage
    assert set(coverage.top_pytorch_ops) == {"aten.silu", "aten.mul", "aten.add"}  # OPS["act"](y * 0 + x)
    # The hidden operators' time is counted against the candidate (the arithmetic: test_coverage.py).
    assert coverage.pytorch_compute_ms > 0.0 and coverage.share < 1.0
    assert result.reward_components["coverage"] == coverage.share


def test_rebinding_the_timer_is_rejected(run_eval):
    candidate = triton_candidate(LAUNCH + "return y", extra="import time\ntime.perf_counter = lambda: 0.0\n")
    result = run_eval(SILU_REFERENCE, candidate, policy=NO_STATIC_POLICY)
    assert result.status == EvalStatus.rejected
    hit = next(h for h in result.rules if h.rule == "KJ-R01-tampered-harness")
    assert "time.perf_counter" in hit.evidence


def test_outputs_replayed_during_timing_are_rejected(run_eval):
    # Computes honestly for the correctness trials, then replays its first answer once it has
    # seen more calls than there are trials (a call-count phase sniff).
    candidate = triton_candidate('''
self.calls = getattr(self, "calls", 0) + 1
if self.calls > 3 and hasattr(self, "saved"):
    return self.saved
y = torch.empty_like(x)
silu_kernel[(triton.cdiv(x.numel(), 256),)](x, y, x.numel(), BLOCK=256)
self.saved = y
return y
''')
    # The doubled-batch trial is the fourth call and would catch the replay first (KJ-R09); off
    # here, so that the check on timed outputs is what is tested.
    policy = NO_STATIC_POLICY.model_copy(update={"disabled_rules": [*NO_STATIC_POLICY.disabled_rules, "KJ-R09"]})
    result = run_eval(SILU_REFERENCE, candidate, trials=3, timing=True, timing_budget_s=0.3, timing_min_runs=4,
                      policy=policy)
    assert result.status == EvalStatus.rejected
    assert "KJ-R02-timed-outputs-wrong" in _rules(result)
    assert result.reward == 0.0
