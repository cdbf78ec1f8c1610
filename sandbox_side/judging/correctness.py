"""Stage: compare candidate outputs with reference outputs, inside the problem's judge.

The judge imports this module from the supervisor's package, mounted read-only. A candidate's
outputs reach it as raw tensor bytes in a sealed memory file (sandbox_side/runtime/wire.py), taken (as a
private copy-on-write mapping) only where shape and dtype are the expected ones: no object of the candidate's, with
overridden comparisons, ever reaches this code.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch

from contract.results import TrialResult

# dtype -> (atol, rtol), used when the request does not set tolerances.
DEFAULT_TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float32: (1e-4, 1e-4),
    torch.float64: (1e-7, 1e-7),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (1e-2, 1e-2),
}
FALLBACK_TOLERANCE = (1e-4, 1e-4)
# Comparisons walk outputs in flat slices of this many elements, so their float64 copies and masks
# stay bounded (a 20 GiB output is compared in 128 MiB steps, not with 80 GiB of temporaries).
CHUNK_ELEMENTS = 1 << 24
# The doubled-batch trial: how many times the reference's own worst error against float64 at that
# shape a candidate may add to the tolerance (see compare_at_new_shape).
SHAPE_ERROR_FACTOR = 16
# A doubled-batch trial that fails with every value within this fraction of the output's scale of the
# float64 truth (|c - t| <= fraction * (|t| + RMS of t)) is a precision difference at that shape (fp32-weak
# arithmetic, e.g. a one-pass variance), not a shape-specialised kernel: KernelBench's own tolerance (1e-2)
# would accept it. A kernel that hard-codes its shape leaves values unwritten, computes the other half with
# the first half's sizes or fails: errors at the scale of the output (see precision_difference).
PRECISION_CLASS_FRACTION = 1e-2
# Where the reference rounds at its output's scale (rounds_at_scale), a floating output's absolute tolerance is at
# least this many times its relative tolerance times the output's RMS. A long reduction's honest rounding error is
# set by its partial sums, which sit at the output's scale, not at the value's own: where terms cancel to a small
# value, an honest float32 GEMM of K = 131072 (one sequential accumulator a thread) was off by 0.03 on outputs of
# RMS 362 (8.6e-5 of it, on an H100), beyond 1e-4 + 1e-4|t| on 2% of its values. Measured on CPU (sequential
# float32 sums of K products, K = 1024 to 524288): the honest worst stays below 9.1e-5 of the RMS, operands
# rounded to float16 reach 1.0e-3 to 1.3e-3 at every K.
SCALE_TOLERANCE_FACTOR = 2.0
# rounds_at_scale: the reference's mean error against float64 on its values below SMALL_FRACTION of the output's
# RMS, against its mean error on values above the RMS. Measured on CPU: 0.38-0.90 for GEMMs (K = 64 to 131072),
# row and column sums, a convolution, a convolution then GELU; 0.0003-0.06 for elementwise outputs (exp, a
# product, an affine map), softmax, layer norm, a convolution then ReLU (its zeros are exact) and cumsum (torch
# sums it in double). An elementwise output with a wide range (exp of wide inputs) thus keeps its elementwise
# tolerance on its small values: the output's RMS would otherwise let a candidate zero them.
SMALL_FRACTION = 0.1
AT_SCALE_RATIO = 0.25
AT_SCALE_MIN_VALUES = 8


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


def chunks(*tensors: torch.Tensor) -> Iterator[tuple[torch.Tensor, ...]]:
    """Matching flat slices of tensors of one shape (views of contiguous tensors: no copy)."""
    flats = [t.reshape(-1) for t in tensors]
    total = flats[0].numel() if flats else 0
    for start in range(0, total, CHUNK_ELEMENTS):
        yield tuple(flat[start:start + CHUNK_ELEMENTS] for flat in flats)


def tolerance_for(dtype: torch.dtype, atol: float | None, rtol: float | None) -> tuple[float, float]:
    default_atol, default_rtol = DEFAULT_TOLERANCES.get(dtype, FALLBACK_TOLERANCE)
    return (default_atol if atol is None else atol, default_rtol if rtol is None else rtol)


def rounds_at_scale(refs: list[Outputs], truths: list[Outputs]) -> list[bool]:
    """Per output, whether the reference's own error against float64 (over every trial) is as large on its small
    values as on its large ones: a reduction whose terms cancel, where any honest kernel's error is set by the
    output's scale. False where it cannot tell (no truth, too few small or large values, an exact reference)."""
    if not refs or len(truths) != len(refs):
        return []
    flags = []
    for index, first in enumerate(refs[0].tensors):
        small_error = large_error = 0.0
        small = large = 0
        for ref, truth in zip(refs, truths, strict=True):
            if index >= len(ref.tensors) or index >= len(truth.tensors):
                continue
            r, t = ref.tensors[index], truth.tensors[index]
            if not r.is_floating_point() or r.shape != t.shape or not r.numel():
                continue
            rms = finite_rms(t)
            for r_part, t_part in chunks(r, t):  # a second walk: the float64 copies stay one chunk large
                ok = torch.isfinite(r_part) & torch.isfinite(t_part)
                t64 = t_part[ok].double()
                error, size = (r_part[ok].double() - t64).abs(), t64.abs()
                below, above = size < SMALL_FRACTION * rms, size > rms
                small_error, small = small_error + float(error[below].sum()), small + int(below.sum())
                large_error, large = large_error + float(error[above].sum()), large + int(above.sum())
        enough = first.is_floating_point() and min(small, large) >= AT_SCALE_MIN_VALUES and large_error > 0
        flags.append(enough and small_error / small >= AT_SCALE_RATIO * large_error / large)
    return flags


def finite_rms(values: torch.Tensor) -> float:
    """The RMS of a tensor's finite values, walked in chunks."""
    squares, count = 0.0, 0
    for (part,) in chunks(values):
        finite = part[torch.isfinite(part)].double()
        squares, count = squares + float(finite.abs().square().sum()), count + finite.numel()
    return (squares / count) ** 0.5 if count else 0.0


def compare(trial: int, ref: Outputs, cand: Outputs, atol: float | None, rtol: float | None,
            at_scale: Sequence[bool] = ()) -> TrialResult:
    """`at_scale`: per output, whether its absolute tolerance reaches SCALE_TOLERANCE_FACTOR x rtol x its RMS
    (rounds_at_scale, decided once from the reference's trials)."""
    if ref.kind != cand.kind or len(ref.tensors) != len(cand.tensors):
        return TrialResult(
            trial=trial, passed=False,
            message=f"output structure differs: reference returns {_describe(ref)}, candidate {_describe(cand)}",
        )
    worst_abs = worst_rel = 0.0
    mismatched = total = 0
    scale_notes: list[str] = []
    for index, (r, c) in enumerate(zip(ref.tensors, cand.tensors, strict=True)):
        label = f"output {index}" if ref.kind == "tuple" else "output"
        if r.shape != c.shape:
            return TrialResult(trial=trial, passed=False,
                               message=f"{label} shape {tuple(c.shape)} != expected {tuple(r.shape)}")
        if r.dtype != c.dtype:
            return TrialResult(trial=trial, passed=False,
                               message=f"{label} dtype {c.dtype} != expected {r.dtype}")
        a_tol, r_tol = tolerance_for(r.dtype, atol, rtol)
        floating = r.is_floating_point() or r.is_complex()
        nan_mismatches, inf_differ = 0, False
        beyond = 0
        for r_part, c_part in chunks(r, c):
            if floating:
                r_nan, c_nan = torch.isnan(r_part), torch.isnan(c_part)
                nan_mismatches += int((r_nan != c_nan).sum())
                r_inf, c_inf = torch.isinf(r_part), torch.isinf(c_part)
                inf_differ = inf_differ or not torch.equal(r_inf, c_inf) or not torch.equal(r_part[r_inf],
                                                                                          c_part[c_inf])
                finite = ~(r_nan | r_inf)
                r64, c64 = r_part[finite].double(), c_part[finite].double()
            else:
                r64, c64 = r_part.double(), c_part.double()
            diff = (r64 - c64).abs()
            beyond += int((diff > a_tol + r_tol * r64.abs()).sum())
            if diff.numel():
                worst_abs = max(worst_abs, float(diff.max()))
                worst_rel = max(worst_rel, float((diff / r64.abs().clamp_min(1e-12)).max()))
        if nan_mismatches:
            return TrialResult(trial=trial, passed=False,
                               message=f"{label} has NaN at {nan_mismatches} positions where the reference does "
                                       "not (or the reverse)")
        if inf_differ:
            return TrialResult(trial=trial, passed=False, message=f"{label} has Inf values that differ")
        rms = finite_rms(r) if beyond and floating and index < len(at_scale) and at_scale[index] else 0.0
        if SCALE_TOLERANCE_FACTOR * r_tol * rms > a_tol:
            # Only on a failure: walked again, with the absolute tolerance at the output's scale.
            still = _beyond(r, c, SCALE_TOLERANCE_FACTOR * r_tol * rms, r_tol)
            if beyond > still:
                scale_notes.append(f"{label}: {beyond - still} values beyond atol {a_tol:g} + rtol {r_tol:g} x |expected| "
                                   f"are within {SCALE_TOLERANCE_FACTOR:g} x rtol of the output's RMS ({rms:.3g}) (the "
                                   "reference's own rounding is at that scale too: a reduction whose terms cancel)")
            beyond = still
        mismatched += beyond
        total += r.numel()
    fraction = mismatched / total if total else 0.0
    passed = mismatched == 0
    message = ("; ".join(scale_notes) or None) if passed else (
        f"{mismatched} of {total} values differ beyond tolerance (max abs error {worst_abs:.3g}, "
        f"max rel error {worst_rel:.3g})"
    )
    return TrialResult(trial=trial, passed=passed, max_abs_error=worst_abs, max_rel_error=worst_rel,
                       mismatch_fraction=fraction, message=message)


def _beyond(ref: torch.Tensor, cand: torch.Tensor, atol: float, rtol: float) -> int:
    """How many finite values of a floating output differ beyond atol + rtol * |expected|."""
    count = 0
    for r_part, c_part in chunks(ref, cand):
        finite = torch.isfinite(r_part)
        r64, c64 = r_part[finite].double(), c_part[finite].double()
        count += int(((r64 - c64).abs() > atol + rtol * r64.abs()).sum())
    return count


def compare_with_truth(trial: int, ref: Outputs, cand: Outputs, truth: Outputs | None, atol: float | None,
                       rtol: float | None, at_scale: Sequence[bool] = ()) -> TrialResult:
    """Compare with the reference; a candidate outside the tolerance of the reference but within it
    of the float64 ground truth is right: the reference's own rounding was the larger error."""
    result = compare(trial, ref, cand, atol, rtol, at_scale)
    if result.passed or truth is None or len(truth.tensors) != len(ref.tensors):
        return result
    against_truth = compare(trial, _rounded(truth, ref), cand, atol, rtol, at_scale)
    if not against_truth.passed:
        return result
    against_truth.message = (f"within tolerance of the float64 ground truth, not of the reference "
                             f"(max abs error {result.max_abs_error:.3g} against the reference)")
    return against_truth


def compare_at_new_shape(ref: Outputs, cand: Outputs, truth: Outputs | None, atol: float | None,
                         rtol: float | None, at_scale: Sequence[bool] = ()) -> TrialResult:
    """The doubled-batch trial, judged like every trial (compare_with_truth), then against the
    reference's own error at that shape: there the reference may round differently (cuDNN picks
    another algorithm for another batch), so a candidate within the tolerance widened by
    SHAPE_ERROR_FACTOR times the reference's worst error against float64 computes the new shape.
    A wrong shape, NaN or Inf where the truth has none, or an error beyond that does not."""
    result = compare_with_truth(0, ref, cand, truth, atol, rtol, at_scale)
    if result.passed or truth is None or len(truth.tensors) != len(ref.tensors) or result.max_abs_error is None:
        return result
    rounded = _rounded(truth, ref)
    reference_error = worst_abs_difference(ref, rounded)
    base_atol, base_rtol = tolerances_used(ref, atol, rtol)
    widened = compare(0, rounded, cand, base_atol + SHAPE_ERROR_FACTOR * reference_error, base_rtol, at_scale)
    own = f"the reference's own max abs error against float64 at this shape is {reference_error:.3g}"
    widened.message = (f"{own}; the candidate's is {widened.max_abs_error:.3g}, within {SHAPE_ERROR_FACTOR}x of it"
                       if widened.passed else f"{widened.message or result.message} against float64; {own}")
    return widened


def precision_difference(ref: Outputs, cand: Outputs, truth: Outputs | None) -> str | None:
    """What was seen when a failed doubled-batch trial is a precision-class difference, or None when it
    is not one (a wrong structure, shape or dtype, NaN or Inf where the truth is finite, an integer output
    that differs, an error at the output's scale, or no float64 truth to tell). Precision class: every
    value within PRECISION_CLASS_FRACTION of the output's scale of the float64 truth."""
    if truth is None or len(truth.tensors) != len(ref.tensors) or ref.kind != cand.kind \
            or len(ref.tensors) != len(cand.tensors):
        return None
    worst_abs = worst_scaled = 0.0
    scales = []
    for r, c, t in zip(ref.tensors, cand.tensors, truth.tensors, strict=True):
        if c.shape != r.shape or c.dtype != r.dtype or t.shape != r.shape:
            return None
        if not (r.is_floating_point() or r.is_complex()):
            if not torch.equal(c, t.to(c.dtype)):
                return None
            continue
        scale = finite_rms(t)
        scales.append(scale)
        for c_part, t_part in chunks(c, t):
            t64, c64 = t_part.double(), c_part.double()
            truth_finite = torch.isfinite(t64)
            if not bool(torch.isfinite(c64)[truth_finite].all()):
                return None
            diff = (c64 - t64)[truth_finite].abs()
            if diff.numel():
                worst_abs = max(worst_abs, float(diff.max()))
                worst_scaled = max(worst_scaled, float((diff / (t64[truth_finite].abs() + scale)
                                                        .clamp_min(1e-300)).max()))
    if worst_scaled > PRECISION_CLASS_FRACTION:
        return None
    return (f"yet every value is within {worst_scaled:.2g} of the output's scale of the float64 truth (output RMS "
            f"{max(scales, default=0.0):.3g}, max abs error {worst_abs:.3g}): a precision difference, not an error "
            f"at the scale of the output")


def worst_abs_difference(a: Outputs, b: Outputs) -> float:
    """The largest |a - b| over the finite values of same-shaped outputs."""
    worst = 0.0
    for x, y in zip(a.tensors, b.tensors, strict=True):
        if x.shape != y.shape or not x.numel():
            continue
        for x_part, y_part in chunks(x, y):
            x64, y64 = x_part.double(), y_part.double()
            finite = torch.isfinite(x64) & torch.isfinite(y64)
            if finite.any():
                worst = max(worst, float((x64[finite] - y64[finite]).abs().max()))
    return worst


def _rounded(truth: Outputs, ref: Outputs) -> Outputs:
    """The float64 truth in the reference's dtypes, to be compared like a reference."""
    return Outputs(truth.kind, [t.to(r.dtype) if t.shape == r.shape else t
                                for t, r in zip(truth.tensors, ref.tensors, strict=True)])


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
