"""Timing the candidate cannot forge: its samples are checked against the supervisor's own clock.

The forging candidate is a red-team case: an honest Triton add whose import reaches the harness's timer
through `torch.sys.modules` and makes its clocks run a thousand times slow. Every static rule and the
harness-integrity rule (KJ-R01) are off for these jobs, so only the run-time evidence can catch it.
"""

from __future__ import annotations

import pytest

from benchmarks.redteam.corpus import load_corpus
from contract.requests import EvalOptions, EvalRequest, PolicyConfig
from contract.statuses import EvalStatus
from tests.engine.conftest import HONEST_SILU, SILU_REFERENCE, triton_candidate
from worker.engine import evaluate
from worker.engine.policy.registry import RULES
from worker.engine.timing import clock_check
from worker.engine.timing.clock_check import RULE

FORGERY = next(case for case in load_corpus() if case.id == "c3_clock_forgery_via_sys_modules")
ALL_STATIC_OFF = [rule.id for rule in RULES]


def _evaluate(settings, reference: str, candidate: str, *, device: str = "cpu", disabled: tuple = ()):
    options = EvalOptions(device=device, timing=True, timing_budget_s=0.5,
                          policy=PolicyConfig(disabled_rules=[*ALL_STATIC_OFF, *disabled]))
    return evaluate(EvalRequest(reference=reference, candidate=candidate, options=options), settings=settings)


def _assert_forgery_rejected_by_the_clock(result):
    assert result.status == EvalStatus.rejected, (result.status, result.error, result.rules)
    [hit] = [h for h in result.rules if h.rule == RULE]
    assert hit.severity == "reject" and "the supervisor's clock allows" in hit.evidence
    clock = result.timing.clock_check
    assert not clock.passed
    # The samples claimed a thousandth of the time: the supervisor's clock sees the real time.
    assert clock.supervisor_ms > 100 * clock.claimed_ms, clock
    assert result.reward == 0.0


def test_forged_clock_is_rejected_by_the_supervisors_clock_alone(settings):
    result = _evaluate(settings, FORGERY.reference_source, FORGERY.candidate_source, disabled=("KJ-R01",))
    _assert_forgery_rejected_by_the_clock(result)
    assert not any(h.rule.startswith("KJ-R01") for h in result.rules)
    # Measured twice, failed twice: the first window's check is in the result too.
    first = result.extra.clock_check_retried
    assert first is not None and not first.passed and first.supervisor_ms > 100 * first.claimed_ms


def test_an_honest_window_that_failed_the_clock_check_once_is_measured_again_and_passes(settings, monkeypatch):
    # Host noise on the candidate's side of one window (simulated: the first check says so) is no verdict.
    checks = []

    def first_fails(window, device):
        report = real_check(window, device)
        checks.append(report)
        return report.model_copy(update={"passed": False}) if len(checks) == 1 else report

    real_check = clock_check.check
    monkeypatch.setattr(clock_check, "check", first_fails)
    result = _evaluate(settings, SILU_REFERENCE, HONEST_SILU)
    assert result.status == EvalStatus.ok and not result.rules, (result.status, result.error, result.rules)
    assert len(checks) == 2 and result.extra.clock_check_retried is not None
    assert not result.extra.clock_check_retried.passed and result.timing.clock_check.passed
    assert result.timing.clock_check == checks[1]  # the figures are the second window's


def test_the_harness_watch_also_names_the_patched_timer_bindings(settings):
    result = _evaluate(settings, FORGERY.reference_source, FORGERY.candidate_source)
    assert result.status == EvalStatus.rejected and result.reward == 0.0
    [watch] = [h for h in result.rules if h.rule.startswith("KJ-R01")]
    assert watch.severity == "reject" and "sandbox_side.timing.timer._perf_counter" in watch.evidence
    assert result.timing is None  # rejected before timing: nothing a tampered process reports is timed


def test_an_honest_candidate_agrees_with_the_supervisors_clock(settings):
    result = _evaluate(settings, SILU_REFERENCE, HONEST_SILU)
    assert result.status == EvalStatus.ok, (result.error, result.rules)
    timing = result.timing
    assert timing.clock_check.passed and timing.pairs == timing.clock_check.pairs - 1 >= 2
    assert timing.speedup_ci95[0] <= timing.speedup <= timing.speedup_ci95[1]
    assert timing.reference.n == timing.candidate.n == result.extra.timing_runs.candidate
    assert not result.rules, result.rules


@pytest.mark.gpu
def test_forged_cuda_events_are_rejected_on_the_gpu(settings):
    # The add kernel runs a few microseconds: within what the supervisor's clock resolves per call, so on
    # a GPU the kernel trace's busy time is the evidence that catches it when the clock cannot.
    result = _evaluate(settings, FORGERY.reference_source, FORGERY.candidate_source, device="cuda",
                       disabled=("KJ-R01",))
    assert result.status == EvalStatus.rejected and result.reward == 0.0, (result.status, result.rules)
    hits = {h.rule.split("-", 2)[1] if h.rule.startswith("KJ-R") else h.rule: h for h in result.rules
            if h.severity == "reject"}
    assert hits.keys() & {"R20", "R04"}, result.rules
    if "R04" in hits:
        assert "kernels busy" in hits["R04"].evidence
    if "R20" in hits:
        assert not result.timing.clock_check.passed


# A device-bound reference (a SiLU over 128 MiB: a few hundred microseconds of device time, little host work)
# against an honest candidate whose host path per call is longer than its device time: its device waits for
# the host between calls, the reference's never does. Two honest multi-stream Triton candidates of the red
# team were rejected by the clock check (KJ-R20) every time in that position, until the timer's spacer.
BIG_SILU_REFERENCE = SILU_REFERENCE.replace("N = 1000", "N = 1 << 25")
SLOW_HOST_SILU = triton_candidate('''
    sum(range(20_000))  # a long host path per call (Python work, as a multi-stream candidate's stream set-up)
    y = torch.empty_like(x)
    n = x.numel()
    silu_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
    return y
''')


@pytest.mark.gpu
def test_an_honest_launch_bound_candidate_agrees_with_the_supervisors_clock_on_the_gpu(settings):
    options = EvalOptions(device="cuda", timing=True, timing_budget_s=0.5)
    result = evaluate(EvalRequest(reference=BIG_SILU_REFERENCE, candidate=SLOW_HOST_SILU, options=options),
                      settings=settings)
    assert result.status == EvalStatus.ok and not result.rules, (result.status, result.error, result.rules)
    clock = result.timing.clock_check
    assert clock.passed and result.extra.clock_check_retried is None, clock
    # The premise: the candidate's host queued its calls slower than its device ran them, the reference's faster.
    timing = result.timing
    assert timing.candidate_queue_ms is not None and timing.reference_queue_ms is not None
    assert timing.candidate_queue_ms > timing.candidate.median_ms, timing
    assert timing.reference_queue_ms < timing.reference.median_ms, timing
