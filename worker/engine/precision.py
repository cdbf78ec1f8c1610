"""Precision: errors of the reference and of the candidate against a float64 run of the reference.

Both are RMS errors over every finite output value of every trial. A candidate passing the tolerance
with operands rounded to half precision (an fp16 GEMM on an fp32 problem) shows an error thousands of
times the reference's; reordered arithmetic (tiling, tree reductions, fused epilogues) stays within a
small factor. The rule (KJ-R12) needs both a large ratio and an error well above the dtype's rounding
noise, so exact references (a ReLU, error 0) do not turn rounding differences into flags.
"""

from __future__ import annotations

import math

import torch

from ..models import PrecisionReport
from .correctness import Outputs

MAX_RATIO = 64.0
# Errors below this many units in the last place of the outputs' RMS are rounding noise.
NOISE_ULPS = 1024


def _sums(outputs: list[Outputs], truths: list[Outputs]) -> tuple[float, float, int, float] | None:
    """(sum of squared errors, sum of squared truths, count, eps) over floating outputs."""
    sq_err = sq_truth = 0.0
    count, eps = 0, 0.0
    for out, truth in zip(outputs, truths, strict=True):
        for o, t in zip(out.tensors, truth.tensors, strict=True):
            if not o.is_floating_point() or o.dtype == torch.float64 or o.shape != t.shape:
                continue
            o64, t64 = o.double(), t.double()
            finite = torch.isfinite(o64) & torch.isfinite(t64)
            sq_err += float(((o64 - t64)[finite] ** 2).sum())
            sq_truth += float((t64[finite] ** 2).sum())
            count += int(finite.sum())
            eps = max(eps, torch.finfo(o.dtype).eps)
    return (sq_err, sq_truth, count, eps) if count else None


def precision_check(ref_trials: list[Outputs], cand_trials: list[Outputs], truths: list[Outputs]) -> PrecisionReport:
    if len(truths) != len(ref_trials):
        return PrecisionReport(checked=False, message="no float64 ground truth")
    ref = _sums(ref_trials, truths)
    cand = _sums(cand_trials, truths)
    if ref is None or cand is None:
        return PrecisionReport(checked=False, message="no floating-point output below float64 to check")
    ref_err = math.sqrt(ref[0] / ref[2])
    cand_err = math.sqrt(cand[0] / cand[2])
    noise = NOISE_ULPS * ref[3] * math.sqrt(ref[1] / ref[2])
    ratio = cand_err / max(ref_err, ref[3] * math.sqrt(ref[1] / ref[2]), 1e-300)
    passed = not (ratio > MAX_RATIO and cand_err > noise)
    return PrecisionReport(
        checked=True, reference_error=ref_err, candidate_error=cand_err, ratio=round(ratio, 2), passed=passed,
        message=None if passed else (
            f"the candidate's RMS error against float64 is {cand_err:.3g}, {ratio:.0f}x the reference's "
            f"{ref_err:.3g}: it computes in lower precision than the problem's dtype"),
    )
