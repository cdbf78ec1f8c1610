"""Runtime verification on CPU: what the supervisor observes catches what the source hides."""

from __future__ import annotations

import textwrap

import pytest

from contract.statuses import EvalStatus
from tests.engine.conftest import HONEST_SILU, SILU_KERNEL, SILU_REFERENCE, TRITON_HEADER, triton_candidate
from tests.engine.test_failures import LAUNCH, NO_STATIC_POLICY


def _rules(result) -> set[str]:
    return {hit.rule for hit in result.rules}


def test_honest_candidate_runs_only_its_own_kernel(run_eval):
    result = run_eval(SILU_REFERENCE, HONEST_SILU)
    assert result.status == EvalStatus.ok
    assert not result.rules
    coverage = result.coverage
    assert [(k.name, k.launches) for k in coverage.own_kernels] == [("silu_kernel", 1)]
    # Allocation is plumbing: nothing is left to PyTorch compute.
    assert coverage.share == 1.0 and coverage.library_ms == 0.0 and not coverage.library_kernels
    assert coverage.method == "interpreter_and_aten_trace" and coverage.own_ms > 0
    assert result.reward_components["coverage"] == 1.0


HIDDEN_TABLE = triton_candidate(LAUNCH + "return OPS['act'](y * 0 + x)", extra="OPS = {'act': torch.nn.functional.silu}\n")


def test_pytorch_compute_hidden_behind_a_table_lowers_coverage_under_partial(run_eval):
    result = run_eval(SILU_REFERENCE, HIDDEN_TABLE, policy=NO_STATIC_POLICY)
    assert result.status == EvalStatus.ok and not result.flagged, result.rules
    coverage = result.coverage
    assert {k.name for k in coverage.library_kernels} == {"aten::silu", "aten::mul", "aten::add"}
    assert coverage.library_ms > 0.0 and coverage.share < 1.0
    assert result.reward_components["coverage"] == coverage.share
    # default preset, not timed: the correctness part only, scaled by coverage
    assert result.reward == pytest.approx(0.3 * coverage.share)


def test_pytorch_compute_is_rejected_under_the_full_profile_with_the_operators_as_evidence(run_eval):
    policy = NO_STATIC_POLICY.model_copy(update={"profile": "full"})
    result = run_eval(SILU_REFERENCE, HIDDEN_TABLE, policy=policy)
    assert result.status == EvalStatus.rejected
    hit = next(h for h in result.rules if h.rule == "KJ-R11-library-compute")
    assert "aten::silu" in hit.evidence and " ms (" in hit.evidence
    assert result.reward == 0.0


def test_a_kernel_defined_but_never_launched_is_rejected_at_run_time(run_eval):
    decoy = triton_candidate("return x * torch.sigmoid(x)")
    result = run_eval(SILU_REFERENCE, decoy)
    assert result.status == EvalStatus.rejected
    hit = next(h for h in result.rules if h.rule == "KJ-R10-no-own-kernel")
    assert "never launched: silu_kernel" in hit.evidence and "aten::sigmoid" in hit.evidence
    assert result.coverage.own_kernels_not_launched == ["silu_kernel"]


def test_a_kernel_kept_on_self_and_aliased_counts_as_launched(run_eval):
    candidate = TRITON_HEADER + SILU_KERNEL + textwrap.dedent('''
        class ModelNew(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.kernel = silu_kernel

            def forward(self, x):
                y = torch.empty_like(x)
                launch = self.kernel
                launch[(triton.cdiv(x.numel(), 256),)](x, y, x.numel(), BLOCK=256)
                return y
    ''')
    result = run_eval(SILU_REFERENCE, candidate)
    assert result.status == EvalStatus.ok and not result.rules, result.rules
    assert result.coverage.share == 1.0


def test_an_explicit_pytorch_backend_needs_no_own_kernel(run_eval):
    plain = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x * torch.sigmoid(x)\n"
    result = run_eval(SILU_REFERENCE, plain, backend="pytorch")
    assert result.status == EvalStatus.ok and not result.rules, result.rules


def test_rebinding_the_timer_is_rejected(run_eval):
    candidate = triton_candidate(LAUNCH + "return y", extra="import time\ntime.perf_counter = lambda: 0.0\n")
    result = run_eval(SILU_REFERENCE, candidate, policy=NO_STATIC_POLICY)
    assert result.status == EvalStatus.rejected
    hit = next(h for h in result.rules if h.rule == "KJ-R01-tampered-harness")
    assert "time.perf_counter" in hit.evidence


def test_a_kernel_registered_for_an_operator_the_harness_calls_is_rejected(run_eval):
    # The timer's L2 flush is a zero_: a candidate that registers its own zero_ (here one that still zeroes, on
    # this CPU) has replaced it for the harness too. With the static rules off, the runtime watch sees it.
    override = ("_aten = torch.library.Library('aten', 'IMPL')\n"
                "_aten.impl('zero_', lambda self: self.fill_(0), 'CPU')\n")
    result = run_eval(SILU_REFERENCE, triton_candidate(LAUNCH + "return y", extra=override), policy=NO_STATIC_POLICY)
    assert result.status == EvalStatus.rejected
    hit = next(h for h in result.rules if h.rule == "KJ-R01-tampered-harness")
    assert "aten::zero_" in hit.evidence


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
    # The probe trials (calls 4 and on) and the doubled-batch trial would catch the replay first
    # (KJ-R15, KJ-R09); off here, so that the check on timed outputs is what is tested.
    policy = NO_STATIC_POLICY.model_copy(update={"disabled_rules": [*NO_STATIC_POLICY.disabled_rules, "KJ-R09",
                                                                    "KJ-R15"]})
    result = run_eval(SILU_REFERENCE, candidate, trials=3, timing=True, timing_budget_s=0.3, timing_min_runs=4,
                      policy=policy)
    assert result.status == EvalStatus.rejected
    assert "KJ-R02-timed-outputs-wrong" in _rules(result)
    assert result.reward == 0.0
