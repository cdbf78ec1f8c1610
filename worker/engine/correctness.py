"""Stage: compare candidate outputs with reference outputs, inside the problem's judge.

The judge imports this module from the supervisor's package, mounted read-only. A candidate's
outputs reach it as raw tensor bytes over a pipe (sandbox_runtime/wire.py), read into fresh
storage only where shape and dtype are the expected ones: no object of the candidate's, with
overridden comparisons, ever reaches this code.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..models import TrialResult

# dtype -> (atol, rtol), used when the request does not set tolerances.
DEFAULT_TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float32: (1e-4, 1e-4),
    torch.float64: (1e-7, 1e-7),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (1e-2, 1e-2),
}
FALLBACK_TOLERANCE = (1e-4, 1e-4)


class MalformedOutputs(Exception):
    """A set of outputs is not made of plain tensors in the expected structure."""


@dataclass
class Outputs:
    kind: str  # "tensor" or "tuple"
    tensors: list[torch.Tensor]


def parse_outputs(entry: object) -> Outputs:
    if not isinstance(entry, dict) or entry.get("kind") not in ("tensor", "tuple"):
        raise MalformedOutputs("malformed output entry")
    tensors = entry.get("tensors")
    if not isinstance(tensors, list) or not all(type(t) is torch.Tensor for t in tensors):
        raise MalformedOutputs("output entry holds something other than plain tensors")
    return Outputs(entry["kind"], tensors)


def tolerance_for(dtype: torch.dtype, atol: float | None, rtol: float | None) -> tuple[float, float]:
    default_atol, default_rtol = DEFAULT_TOLERANCES.get(dtype, FALLBACK_TOLERANCE)
    return (default_atol if atol is None else atol, default_rtol if rtol is None else rtol)


def compare(trial: int, ref: Outputs, cand: Outputs, atol: float | None, rtol: float | None) -> TrialResult:
    if ref.kind != cand.kind or len(ref.tensors) != len(cand.tensors):
        return TrialResult(
            trial=trial, passed=False,
            message=f"output structure differs: reference returns {_describe(ref)}, candidate {_describe(cand)}",
        )
    worst_abs = worst_rel = 0.0
    mismatched = total = 0
    for index, (r, c) in enumerate(zip(ref.tensors, cand.tensors, strict=True)):
        label = f"output {index}" if ref.kind == "tuple" else "output"
        if r.shape != c.shape:
            return TrialResult(trial=trial, passed=False,
                               message=f"{label} shape {tuple(c.shape)} != expected {tuple(r.shape)}")
        if r.dtype != c.dtype:
            return TrialResult(trial=trial, passed=False,
                               message=f"{label} dtype {c.dtype} != expected {r.dtype}")
        a_tol, r_tol = tolerance_for(r.dtype, atol, rtol)
        if r.is_floating_point() or r.is_complex():
            r_nan, c_nan = torch.isnan(r), torch.isnan(c)
            if not torch.equal(r_nan, c_nan):
                return TrialResult(trial=trial, passed=False,
                                   message=f"{label} has NaN at {int((r_nan != c_nan).sum())} positions where "
                                           "the reference does not (or the reverse)")
            r_inf, c_inf = torch.isinf(r), torch.isinf(c)
            if not torch.equal(r_inf, c_inf) or not torch.equal(r[r_inf], c[c_inf]):
                return TrialResult(trial=trial, passed=False, message=f"{label} has Inf values that differ")
            finite = ~(r_nan | r_inf)
            r64, c64 = r[finite].double(), c[finite].double()
        else:
            r64, c64 = r.double(), c.double()
        diff = (r64 - c64).abs()
        bound = a_tol + r_tol * r64.abs()
        bad = diff > bound
        mismatched += int(bad.sum())
        total += r.numel()
        if diff.numel():
            worst_abs = max(worst_abs, float(diff.max()))
            worst_rel = max(worst_rel, float((diff / r64.abs().clamp_min(1e-12)).max()))
    fraction = mismatched / total if total else 0.0
    passed = mismatched == 0
    message = None if passed else (
        f"{mismatched} of {total} values differ beyond tolerance (max abs error {worst_abs:.3g}, "
        f"max rel error {worst_rel:.3g})"
    )
    return TrialResult(trial=trial, passed=passed, max_abs_error=worst_abs, max_rel_error=worst_rel,
                       mismatch_fraction=fraction, message=message)


def compare_with_truth(trial: int, ref: Outputs, cand: Outputs, truth: Outputs | None, atol: float | None,
                       rtol: float | None) -> TrialResult:
    """Compare with the reference; a candidate outside the tolerance of the reference but within it
    of the float64 ground truth is right: the reference's own rounding was the larger error."""
    result = compare(trial, ref, cand, atol, rtol)
    if result.passed or truth is None or len(truth.tensors) != len(ref.tensors):
        return result
    rounded = Outputs(truth.kind, [t.to(r.dtype) if t.shape == r.shape else t
                                   for t, r in zip(truth.tensors, ref.tensors, strict=True)])
    against_truth = compare(trial, rounded, cand, atol, rtol)
    if not against_truth.passed:
        return result
    against_truth.message = (f"within tolerance of the float64 ground truth, not of the reference "
                             f"(max abs error {result.max_abs_error:.3g} against the reference)")
    return against_truth


def tolerance_table(atol: float | None, rtol: float | None) -> dict[str, list[float]]:
    """The tolerance per dtype name, for the reference's sandbox (which cannot import this module)."""
    return {str(dtype): list(tolerance_for(dtype, atol, rtol)) for dtype in DEFAULT_TOLERANCES}


def _describe(outputs: Outputs) -> str:
    return "a tensor" if outputs.kind == "tensor" else f"a tuple of {len(outputs.tensors)} tensors"


def reference_is_degenerate(trials: list[Outputs], atol: float | None, rtol: float | None) -> bool:
    """True when every trial's reference output is (nearly) the same constant: a candidate
    returning that constant would pass without computing anything."""
    if len(trials) < 2:
        return False
    first = trials[0]
    for other in trials[1:]:
        if compare(0, first, other, atol, rtol).passed is False:
            return False
    return True


def tolerances_used(ref: Outputs, atol: float | None, rtol: float | None) -> tuple[float, float]:
    dtype = ref.tensors[0].dtype if ref.tensors else torch.float32
    return tolerance_for(dtype, atol, rtol)
