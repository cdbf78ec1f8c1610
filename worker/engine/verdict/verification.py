"""Runtime verification: rules judged from what the supervisor observed while the
candidate ran (its claims are cross-checked, never trusted alone)."""

from __future__ import annotations

from dataclasses import dataclass, field

from contract.requests import PolicyConfig
from contract.results import (
    ClockCheckReport,
    CoverageReport,
    InputCheckReport,
    PrecisionReport,
    ProbeTrialReport,
    RuleHit,
)
from worker.engine.policy.registry import is_disabled
from worker.engine.timing import clock_check
from worker.engine.verdict.attribution import Attribution
from worker.engine.verdict.physics import Assessment

SHAPE_RULE = "KJ-R09-shape-specialised"
TAMPER_RULE = "KJ-R01-tampered-harness"
STREAM_RULE = "KJ-R03-work-outside-timed-stream"
# Switches the probe trials off for a job (their precision flags are KJ-R12 hits, their coverage
# failures fail correctness; see sandbox_side/judging/probes.py).
PROBE_RULE = "KJ-R15-probe-trials"

# A reported median below this share of the GPU time the kernel trace saw one call's kernels busy, by
# more than the noise measured in the same job (and at least the minimum gap), is rejected (KJ-R04): the
# timed window holds the call's kernels on a cold L2, so an honest median is never below their busy time.
CLOCK_RATIO = 0.5
CLOCK_MIN_GAP_MS = 0.001
NOISE_SIGMAS = 3.0
MAX_EVIDENCE_NAMES = 4


@dataclass
class Observations:
    tampered: list[str] = field(default_factory=list)
    timed_outputs_ok: bool = True
    timed_outputs_message: str | None = None
    candidate_device_median_ms: float | None = None
    candidate_device_std_ms: float = 0.0
    speedup: float | None = None
    # Kernel attribution of one forward call (None: not measured).
    attribution: Attribution | None = None
    # Whether the candidate must launch kernels of its own (not for an explicit `pytorch` backend).
    own_kernels_required: bool = True
    profile: str = "partial"
    precision: PrecisionReport | None = None
    probes: list[ProbeTrialReport] = field(default_factory=list)
    inputs: InputCheckReport | None = None
    # The physics rule's verdict on the candidate (KJ-R06, worker/engine/verdict/physics.py; None: not assessed).
    physics: Assessment | None = None
    # Why the doubled-batch trial failed with a shape-class difference (None: passed, skipped, not run, or
    # a precision-class difference, below).
    shape_trial_failure: str | None = None
    # What the doubled-batch trial saw when it failed with a precision-class difference: every value near the
    # float64 truth, some beyond the tolerance (correctness.precision_difference): KJ-R12, not KJ-R09.
    shape_trial_precision: str | None = None
    device: str = "cpu"
    # The candidate's samples against the supervisor's clock (None: not timed).
    clock_check: ClockCheckReport | None = None


def _names(names: list[str]) -> str:
    more = f" and {len(names) - MAX_EVIDENCE_NAMES} more" if len(names) > MAX_EVIDENCE_NAMES else ""
    return ", ".join(names[:MAX_EVIDENCE_NAMES]) + more


def runtime_rules(obs: Observations, policy: PolicyConfig) -> list[RuleHit]:
    hits: list[RuleHit] = []
    if obs.tampered:
        hits.append(RuleHit(
            rule=TAMPER_RULE, severity="reject",
            message="the candidate rebound functions the evaluation relies on (timers, sync, comparison)",
            evidence=", ".join(sorted(set(obs.tampered))),
        ))
    if not obs.timed_outputs_ok:
        hits.append(RuleHit(
            rule="KJ-R02-timed-outputs-wrong", severity="reject",
            message="outputs produced during timing do not match the reference for the same inputs "
                    "(cached or replayed results, or behaviour that changes once timing starts)",
            evidence=obs.timed_outputs_message,
        ))
    hits.extend(_stream_and_clock_rules(obs))
    hits.extend(clock_check.rule_hits(obs.clock_check))
    if obs.speedup is not None and obs.speedup > policy.max_speedup:
        hits.append(RuleHit(
            rule="KJ-R05-implausible-speedup", severity="flag",
            message=f"speedup {obs.speedup:.1f}x is above the configured ceiling {policy.max_speedup:g}x",
        ))
    physics_hit = obs.physics.hit() if obs.physics is not None else None
    if physics_hit is not None:
        hits.append(physics_hit)
    hits.extend(_attribution_rules(obs))
    hits.extend(_numeric_rules(obs))
    if obs.shape_trial_failure:
        hits.append(RuleHit(
            rule=SHAPE_RULE, severity="flag",
            message="the candidate is correct on the problem's shapes but not on a doubled batch (a wrong output "
                    "shape or dtype, a failure, NaN or Inf where the float64 truth has none, or an error at the scale "
                    "of the output): it is shape-specialised (disable KJ-R09 to allow shape-specialised kernels)",
            evidence=obs.shape_trial_failure,
        ))
    return [hit for hit in hits if not is_disabled(hit.rule, policy.disabled_rules)]


def _stream_and_clock_rules(obs: Observations) -> list[RuleHit]:
    if obs.device != "cuda":  # on CPU the host clock is the measurement itself
        return []
    hits = []
    attribution = obs.attribution
    escapes = _stream_escapes(attribution.report) if attribution else []
    if escapes:
        hits.append(RuleHit(
            rule=STREAM_RULE, severity="reject",
            message="work on another stream was not ordered inside forward: it escapes the timer. Make side "
                    "streams wait for the current stream before they start (side.wait_stream(current)) and "
                    "join them back before forward returns (current.wait_stream(side)); leave the current "
                    "stream as forward found it",
            evidence="; ".join(escapes),
        ))
    # The reported (event-timed) median against the GPU time the profiler saw the forward's kernels
    # take: both are device clocks, so CPU load and other jobs on the host do not move the check. It
    # resolves microseconds, where the supervisor's clock (KJ-R20, clock_check) cannot.
    dev = obs.candidate_device_median_ms
    if attribution and dev is not None:
        gpu = attribution.forward_gpu_ms
        if trace_disagrees(dev, obs.candidate_device_std_ms, gpu):
            hits.append(RuleHit(
                rule="KJ-R04-timing-disagrees-with-wall-clock", severity="reject",
                message="the candidate's reported time is far below the GPU time its kernels took: its timing "
                        "samples were forged",
                evidence=f"reported median {dev:.4f} ms, kernels busy {gpu:.4f} ms in a traced call"
                         + (" with the device held alone" if attribution.traced_alone else ""),
            ))
    return hits


def trace_disagrees(median_ms: float, std_ms: float, traced_gpu_ms: float) -> bool:
    """KJ-R04's test: the timed median far below the GPU time one traced call's kernels were busy."""
    return traced_gpu_ms > 0 and median_ms < CLOCK_RATIO * traced_gpu_ms \
        and traced_gpu_ms - median_ms > max(CLOCK_MIN_GAP_MS, NOISE_SIGMAS * std_ms)


def _stream_escapes(report: CoverageReport) -> list[str]:
    """What the kernel trace shows escaping the timed stream (see worker/engine/verdict/attribution.py)."""
    found = []
    if report.escaped_kernels:
        found.append(f"still running after forward returned: {_names(report.escaped_kernels)}")
    if report.unordered_kernels:
        found.append(f"started before the current stream's earlier work finished (no wait on it): "
                     f"{_names(report.unordered_kernels)}")
    if report.current_stream_switched:
        found.append("forward returned with another stream made current")
    return found


def _attribution_rules(obs: Observations) -> list[RuleHit]:
    attribution = obs.attribution
    if attribution is None or not obs.own_kernels_required:
        return []
    report = attribution.report
    hits = []
    if not report.own_kernels:
        unlaunched = f"; defined but never launched: {_names(report.own_kernels_not_launched)}" \
            if report.own_kernels_not_launched else ""
        ran = _names([k.name for k in attribution.library_records]) or "none"
        hits.append(RuleHit(
            rule="KJ-R10-no-own-kernel", severity="reject",
            message="forward launched no kernel of the candidate's own: PyTorch or a library did all the work",
            evidence=f"kernels that ran: {ran}{unlaunched}",
        ))
    elif obs.profile == "full" and attribution.library_records:
        hits.append(RuleHit(
            rule="KJ-R11-library-compute", severity="reject",
            message="under the `full` profile every compute kernel must be the candidate's own; PyTorch "
                    "or a vendor library computed part of the output (allocation, views and copies are fine)",
            evidence=_names([f"{k.name} [{k.op or 'no ATen op'}] {k.ms:.3f} ms ({k.share:.0%})"
                             for k in attribution.library_records]),
        ))
    return hits


def _numeric_rules(obs: Observations) -> list[RuleHit]:
    hits = []
    evidence = []
    if obs.precision and obs.precision.checked and obs.precision.passed is False:
        evidence.append(f"the problem's trials: RMS error vs float64: candidate {obs.precision.candidate_error:.3g}, "
                        f"reference {obs.precision.reference_error:.3g} ({obs.precision.ratio:g}x)")
    evidence += [f"probe '{p.kind}' ({p.inputs}): RMS error vs float64: candidate {p.candidate_error:.3g}, "
                 f"reference {p.reference_error:.3g} ({p.ratio:g}x)" for p in obs.probes if p.outcome == "flag"]
    if obs.shape_trial_precision:
        evidence.append(f"the doubled-batch trial (a precision loss at another shape, not a shape-specialised "
                        f"kernel), {obs.shape_trial_precision}")
    if evidence:
        hits.append(RuleHit(
            rule="KJ-R12-precision-loss", severity="flag",
            message="the candidate's error against a float64 run is far above the reference's own error on the "
                    "same inputs: it computes in lower precision than the problem asks for",
            evidence="; ".join(evidence),
        ))
    if obs.inputs and obs.inputs.mutated:
        hits.append(RuleHit(
            rule="KJ-R13-input-mutated", severity="flag",
            message="forward changed its inputs; outputs must not depend on clobbering them",
            evidence=_names(obs.inputs.mutated),
        ))
    if obs.inputs and obs.inputs.aliased:
        hits.append(RuleHit(
            rule="KJ-R14-output-aliases-input", severity="flag",
            message="forward returned an input's memory as its output",
            evidence=_names(obs.inputs.aliased),
        ))
    return hits
