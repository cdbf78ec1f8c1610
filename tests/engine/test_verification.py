"""The runtime rules on observations (worker/engine/verdict/verification.py): each fires on its evidence only."""

from __future__ import annotations

from contract.requests import PolicyConfig
from contract.results import (
    CoverageReport,
    InputCheckReport,
    KernelSummary,
    PrecisionReport,
    ProbeTrialReport,
)
from worker.engine.verdict.attribution import Attribution
from worker.engine.verdict.verification import STREAM_RULE, Observations, runtime_rules

OWN = KernelSummary(name="my_kernel", launches=1, ms=1.0, share=0.5)
LIBRARY = KernelSummary(name="sm90_xmma_gemm", launches=1, ms=1.0, share=0.5, op="aten::mm")


def _attribution(own=(OWN,), library=(), escaped=(), busy_ms=1.0) -> Attribution:
    report = CoverageReport(share=0.5, own_ms=1.0, library_ms=0.0, plumbing_ms=0.0, own_kernels=list(own),
                            library_kernels=list(library), escaped_kernels=list(escaped),
                            off_stream_kernels=list(escaped), method="cupti_kernel_trace")
    return Attribution(report=report, forward_gpu_ms=busy_ms, library_records=list(library))


def _rules(**fields) -> set[str]:
    policy = fields.pop("policy", PolicyConfig())
    return {hit.rule.split("-", 2)[1] for hit in runtime_rules(Observations(device="cuda", **fields), policy)}


def test_reported_time_far_below_the_kernels_gpu_time_is_flagged_beyond_noise():
    assert "R04" in _rules(attribution=_attribution(busy_ms=1.0), candidate_device_median_ms=0.1,
                           candidate_device_std_ms=0.01)
    # The same gap inside the noise measured in the job is not evidence.
    assert "R04" not in _rules(attribution=_attribution(busy_ms=1.0), candidate_device_median_ms=0.1,
                               candidate_device_std_ms=0.5)
    assert "R04" not in _rules(attribution=_attribution(busy_ms=1.0), candidate_device_median_ms=0.9)


def test_work_escaping_the_timed_stream_is_rejected_with_the_kernels_named():
    assert "R03" not in _rules(attribution=_attribution())
    escaped = _attribution(escaped=("side_kernel",))
    unordered = _attribution()
    unordered.report.unordered_kernels = ["early_kernel"]
    switched = _attribution()
    switched.report.current_stream_switched = True
    for attribution, evidence in ((escaped, "still running after forward returned: side_kernel"),
                                  (unordered, "no wait on it): early_kernel"),
                                  (switched, "another stream made current")):
        hits = runtime_rules(Observations(device="cuda", attribution=attribution), PolicyConfig())
        hit = next(h for h in hits if h.rule == STREAM_RULE)
        assert hit.severity == "reject" and evidence in hit.evidence


def test_no_own_kernel_is_rejected_in_both_profiles_and_library_compute_only_under_full():
    assert "R10" in _rules(attribution=_attribution(own=(), library=(LIBRARY,)))
    assert "R10" in _rules(attribution=_attribution(own=(), library=(LIBRARY,)), profile="full")
    assert _rules(attribution=_attribution(library=(LIBRARY,))) == set()
    assert "R11" in _rules(attribution=_attribution(library=(LIBRARY,)), profile="full")
    # An explicit `pytorch` backend evaluates PyTorch rewrites: no own kernel is needed.
    assert _rules(attribution=_attribution(own=()), own_kernels_required=False) == set()


def test_numeric_rules_fire_on_their_findings():
    worse = PrecisionReport(checked=True, reference_error=1e-7, candidate_error=1e-3, ratio=1e4, passed=False)
    assert "R12" in _rules(precision=worse)
    assert "R12" not in _rules(precision=worse.model_copy(update={"passed": True}))
    inputs = InputCheckReport(mutated=["trial 0, input 0: 4 of 4 values changed"], aliased=["trial 0: output 0 ..."])
    assert {"R13", "R14"} <= _rules(inputs=inputs)


def test_a_flagged_probe_trial_is_kj_r12_with_the_probe_and_both_errors_named():
    flagged = ProbeTrialReport(kind="rounding", inputs="values moved within their bfloat16 cells", ran=True,
                               outcome="flag", reference_error=1e-7, candidate_error=1e-3, ratio=1e4)
    hits = runtime_rules(Observations(device="cpu", probes=[flagged]), PolicyConfig())
    hit = next(h for h in hits if h.rule == "KJ-R12-precision-loss")
    assert hit.severity == "flag" and "probe 'rounding' (values moved within their bfloat16 cells)" in hit.evidence
    assert "candidate 0.001" in hit.evidence and "reference 1e-07" in hit.evidence
    passed = flagged.model_copy(update={"outcome": "ok"})
    assert "R12" not in _rules(probes=[passed])


def test_a_disabled_runtime_rule_does_not_fire():
    policy = PolicyConfig(disabled_rules=["KJ-R03"])
    assert "R03" not in _rules(attribution=_attribution(escaped=("k",)), policy=policy)
