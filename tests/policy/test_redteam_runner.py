"""The red-team runner scores runtime-rule rejections and hands each case's policy profile to the engine."""

from __future__ import annotations

from types import SimpleNamespace

from benchmarks.redteam.corpus import load_corpus
from benchmarks.redteam.runner import CAUGHT, matches, run_engine
from contract.requests import EvalRequest
from contract.results import RuleHit
from contract.statuses import Device, EvalStatus

CASES = {case.id: case for case in load_corpus()}


def rejection(rule: str) -> RuleHit:
    return RuleHit(rule=rule, severity="reject", message="seen at run time")


def test_a_runtime_rule_id_meets_a_rejected_expectation():
    assert matches("rejected:KJ-R10", "rejected:KJ-R10", [rejection("KJ-R10-no-own-kernel")])
    assert matches("rejected:KJ-R11", "rejected:KJ-R10",
                   [rejection("KJ-R10-no-own-kernel"), rejection("KJ-R11-library-compute")])
    assert not matches("rejected:KJ-R11", "rejected:KJ-R10", [rejection("KJ-R10-no-own-kernel")])
    assert not matches("rejected:KJ-R10", "rejected:KJ-R01", [rejection("KJ-R01-tampered-harness")])


def test_engine_run_uses_the_case_profile_and_disabled_rules():
    requests: list[EvalRequest] = []

    def evaluate(request: EvalRequest):
        requests.append(request)
        return SimpleNamespace(status=EvalStatus.rejected, rules=[rejection("KJ-R11-library-compute")],
                               flagged=False, error=None, coverage=None)

    full = CASES["c1_trivial_kernel_heavy_torch"]
    outcome = run_engine(full, ["KJ302"], Device.cpu, evaluate, 60.0)
    assert requests[-1].options.policy.profile == "full"
    assert requests[-1].options.policy.disabled_rules == ["KJ302"]
    assert (outcome.got, outcome.outcome, outcome.as_expected) == ("rejected:KJ-R11", CAUGHT, True)

    partial = CASES["c1_torch_matmul_in_forward"]
    run_engine(partial, [], Device.cpu, evaluate, 60.0)
    assert requests[-1].options.policy.profile == "partial"
    assert requests[-1].options.policy.disabled_rules == ["KJ107"]


def test_a_rejected_honest_case_carries_the_rules_evidence():
    hit = RuleHit(rule="KJ-R20-timing-disagrees-with-supervisor-clock", severity="reject", message="m",
                  evidence="reported 0.0200 ms per call")

    def evaluate(request: EvalRequest):
        return SimpleNamespace(status=EvalStatus.rejected, rules=[hit], flagged=False, error=None, coverage=None)

    honest = next(case for case in CASES.values() if case.honest)
    outcome = run_engine(honest, [], Device.cpu, evaluate, 60.0)
    assert outcome.got == "rejected:KJ-R20"
    assert outcome.note == "KJ-R20: reported 0.0200 ms per call"
