"""Probe trials, judged inside the problem's judge: is the candidate's error on inputs that expose
reduced precision or skipped elements far beyond the reference's own error on the same inputs?

The inputs come from sandbox_side/judging/probe_inputs.py (scaled, rounding, spikes, structured). Each probe is judged
against its float64 truth, with the reference's RMS error there as the yardstick: an honest kernel
(tiling, tree, Kahan or sequential sums, one-pass variances, fused epilogues, fast math at the
problem's dtype) stays within a small factor of it (measured on CPU: at most ~30x, PyTorch's own
channels-last batch norm on the rounding probe, mostly below 2x), while half precision, bfloat16 and
skipped elements put the candidate hundreds to millions of times beyond it on at least one probe.

Outcomes, from the evidence:
- flag (KJ-R12): error beyond PROBE_RATIO times the reference's, beyond PROBE_ULPS ulps of the output's
  scale, and GROWTH times the candidate's own ratio on the problem's inputs (its error grows far beyond
  the reference's there): it computes in lower precision than the problem's dtype. An honest kernel whose
  ratio is high on the problem's inputs already (a long sequential sum against a tree-summing reference) is
  judged there, by KJ-R12 on the problem's trials; the scaled probe reproduces that ratio exactly.
  A reduced output (a loss, a mean, a norm; see precision.reduction_length) is judged instead against
  what an honest float32 reduction of its length stays within (HONEST_REDUCTION_FACTOR times
  precision.honest_reduction_ulps): a sequential sum's error is already hundreds of times a tree-summing
  reference's on the problem's inputs, so its growth says nothing, and bfloat16 internals whose ratio is
  as high there went unflagged when their ratio grew less than GROWTH times on a probe.
- fail (correctness): on the spikes or structured probe, the same and beyond FAIL_RTOLS relative
  tolerances, or an integer output that differs (spikes): elements that carry the output were skipped
  (or rounded away), or read with a stride.
- ok otherwise. Candidate values that are NaN or Inf where the truth is finite (a hand-written tanh
  overflowing on large inputs) are counted and left out: they are not evidence of either.
"""

from __future__ import annotations

import math

import torch

from contract.results import ProbeTrialReport
from sandbox_side.judging.correctness import Outputs, chunks, tolerance_for
from sandbox_side.judging.precision import (
    HONEST_REDUCTION_FACTOR,
    ErrorSums,
    error_sums,
    honest_reduction_ulps,
)

PROBE_RATIO = 256.0
PROBE_ULPS = 256.0
GROWTH = 4.0
FAIL_RTOLS = 16.0
# A probe is kept only where the reference's relative error against float64 stays within this factor
# of its error on the problem's own inputs (or within SANE_ULPS ulps): otherwise it is no yardstick.
SANE_FACTOR = 16.0
SANE_ULPS = 256.0

DESCRIPTIONS = {
    "scaled": "inputs scaled into half precision's subnormal range",
    "rounding": "inputs that half precision and bfloat16 all round toward zero",
    "spikes": "inputs with spikes at secret positions",
    "structured": "inputs whose values follow their rows, columns and flat index with periods 2, 3, 4 and 8",
}
# The probes whose far errors fail correctness: what they expose is elements left out, not precision.
SKIP_PROBES = ("spikes", "structured")


def reference_unusable(kind: str, ref: Outputs, truth: Outputs, trial_refs: list[Outputs],
                       trial_truths: list[Outputs]) -> str | None:
    """Why the reference's output on a probe is no yardstick, or None when it is one. Integer outputs
    (indices) are compared exactly on the spikes probe only: its values have no ties."""
    if not any(t.is_floating_point() for t in ref.tensors):
        return None if kind == "spikes" else "the output has no floating-point value to measure"
    probe = error_sums([ref], [truth])
    if not probe.count or probe.scale == 0.0:
        return "the reference's output has no finite non-zero floating value on these inputs"
    base = error_sums(trial_refs, trial_truths)
    relative = probe.rms_error / probe.scale
    usual = base.rms_error / base.scale if base.count and base.scale else 0.0
    if relative > max(SANE_FACTOR * usual, SANE_ULPS * probe.eps):
        return (f"the reference's own relative error against float64 grows to {relative:.3g} on these inputs "
                f"({usual:.3g} on the problem's)")
    return None


def scales_exactly(scaled: Outputs, unscaled: Outputs) -> bool:
    """The reference's floating outputs on inputs scaled by powers of two are its outputs on the same
    inputs unscaled times one power of two each, bit for bit: it rounds on the scaled probe exactly as on
    the problem's scale, so an honest kernel's error ratio there is its usual one. A model that adds a
    bias, an eps or a nonlinearity to its inputs does not, and the scaled probe says nothing about it."""
    for s, u in zip(scaled.tensors, unscaled.tensors, strict=True):
        if not s.is_floating_point():
            continue
        if s.shape != u.shape or s.dtype != u.dtype:
            return False
        factor = None
        for s_part, u_part in chunks(s, u):
            if not torch.equal(s_part == 0, u_part == 0) or not torch.equal(torch.isfinite(s_part),
                                                                             torch.isfinite(u_part)):
                return False
            both = (u_part != 0) & torch.isfinite(u_part)
            ratios = torch.unique(s_part[both].double() / u_part[both].double())
            if ratios.numel() > 1 or (ratios.numel() and factor is not None and float(ratios[0]) != factor):
                return False
            if ratios.numel():
                factor = float(ratios[0])
        if factor is not None and (factor <= 0 or math.frexp(factor)[0] != 0.5):
            return False
    return True


def judge_probe(kind: str, inputs: str, ref: Outputs, cand: Outputs, truth: Outputs, rtol: float | None,
                usual_ratio: float | None = None, reduction: int | None = None) -> ProbeTrialReport:
    """`usual_ratio`: the candidate's error ratio to the reference's on the problem's own trials;
    `reduction`: the output's reduction length (precision.reduction_length), None when it is no reduction."""
    report = ProbeTrialReport(kind=kind, inputs=inputs, ran=True, outcome="ok")
    shapes = _structure_difference(ref, cand)
    if shapes:
        report.outcome, report.message = "fail", f"on {DESCRIPTIONS[kind]}: {shapes}"
        return report
    ref_sums, cand_sums = error_sums([ref], [truth]), error_sums([cand], [truth])
    report.non_finite = cand_sums.non_finite
    report.index_mismatches = _integer_mismatches(ref, cand) if kind == "spikes" else 0
    if cand_sums.count and cand_sums.scale > 0.0:
        _fill_errors(report, ref_sums, cand_sums)
    ratio = report.ratio or 0.0
    far = ratio > PROBE_RATIO and (report.ulps or 0.0) > PROBE_ULPS
    if reduction is None:
        grown = ratio > GROWTH * (usual_ratio or 0.0)
        beyond_honest = ""
    else:
        report.honest_ulps = round(HONEST_REDUCTION_FACTOR * honest_reduction_ulps(reduction), 1)
        grown = (report.ulps or 0.0) > report.honest_ulps
        beyond_honest = (f", and {report.ulps or 0.0:.0f} ulps of the output where an honest float32 reduction of "
                         f"{reduction} values stays within {report.honest_ulps / HONEST_REDUCTION_FACTOR:.0f}")
    fail_at = FAIL_RTOLS * _relative_tolerance(ref, rtol)
    usual = f" (on the problem's own inputs {usual_ratio:.3g}x)" if usual_ratio is not None else ""
    errors = (f"the candidate's RMS error against float64 is {report.candidate_error:.3g} "
              f"({report.relative_error:.2g} of the output's scale), {ratio:.0f}x the reference's "
              f"{report.reference_error:.3g}{usual}{beyond_honest}" if far else "")
    if report.index_mismatches:
        report.outcome = "fail"
        report.message = (f"on {DESCRIPTIONS[kind]}, {report.index_mismatches} integer output values differ from "
                          "the reference: it skips input elements")
    elif far and kind in SKIP_PROBES and (report.relative_error or 0.0) > fail_at:
        report.outcome = "fail"
        how = ("it skips input elements (or rounds the ones that carry the output far below the problem's "
               "precision)" if kind == "spikes" else
               "it reads its inputs with a stride (or otherwise leaves out elements that carry the output)")
        report.message = f"on {DESCRIPTIONS[kind]}, {errors}: {how}"
    elif far and grown:
        report.outcome = "flag"
        report.message = f"on {DESCRIPTIONS[kind]}, {errors}: it computes in lower precision than the problem's dtype"
    if report.non_finite and report.outcome == "ok":
        report.message = (f"{report.non_finite} values NaN or Inf where the truth is finite (left out: a numerically "
                          "fragile formula on these inputs is not held against the candidate)")
    return report


def skipped(kind: str, inputs: str, why: str) -> ProbeTrialReport:
    return ProbeTrialReport(kind=kind, inputs=inputs, ran=False, message=why)


def unreadable(kind: str, inputs: str, why: str) -> ProbeTrialReport:
    return ProbeTrialReport(kind=kind, inputs=inputs, ran=True, outcome="fail",
                            message=f"on {DESCRIPTIONS[kind]}: the candidate's output could not be read ({why})")


def _fill_errors(report: ProbeTrialReport, ref: ErrorSums, cand: ErrorSums) -> None:
    report.reference_error = ref.rms_error
    report.candidate_error = cand.rms_error
    report.ratio = round(cand.rms_error / max(ref.rms_error, cand.ulp, 1e-300), 2)
    report.ulps = round(cand.rms_error / max(cand.ulp, 1e-300), 2)
    report.relative_error = cand.rms_error / cand.scale


def _relative_tolerance(ref: Outputs, rtol: float | None) -> float:
    dtype = next((t.dtype for t in ref.tensors if t.is_floating_point()), torch.float32)
    return tolerance_for(dtype, None, rtol)[1]


def _structure_difference(ref: Outputs, cand: Outputs) -> str | None:
    if ref.kind != cand.kind or len(ref.tensors) != len(cand.tensors):
        return "the output's structure differs from the reference's"
    for r, c in zip(ref.tensors, cand.tensors, strict=True):
        if r.shape != c.shape or r.dtype != c.dtype:
            return f"output {tuple(c.shape)} {c.dtype} where the reference returns {tuple(r.shape)} {r.dtype}"
    return None


def _integer_mismatches(ref: Outputs, cand: Outputs) -> int:
    found = 0
    for r, c in zip(ref.tensors, cand.tensors, strict=True):
        if r.is_floating_point() or r.is_complex():
            continue
        for r_part, c_part in chunks(r, c):
            found += int((r_part != c_part).sum())
    return found
