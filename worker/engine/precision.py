"""Precision: errors of the reference and of the candidate against a float64 run of the reference.

Both are RMS errors over every finite output value of every trial. A candidate passing the tolerance
with operands rounded to half precision (an fp16 GEMM on an fp32 problem) shows an error thousands of
times the reference's; reordered arithmetic (tiling, tree reductions, fused epilogues) stays within a
small factor. The rule (KJ-R12) needs both a large ratio and an error well above the dtype's rounding
noise, so exact references (a ReLU, error 0) do not turn rounding differences into flags.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..models import PrecisionReport
from .correctness import Outputs, chunks

MAX_RATIO = 64.0
# Errors below this many units in the last place of the outputs' RMS are rounding noise.
NOISE_ULPS = 1024


@dataclass
class ErrorSums:
    """Squared errors against float64 over the finite values of floating outputs below float64."""

    sq_error: float = 0.0
    sq_truth: float = 0.0
    count: int = 0
    eps: float = 0.0  # the outputs' dtype's (the largest, if they differ)
    non_finite: int = 0  # values NaN or Inf where the truth is finite (left out of the sums)

    @property
    def rms_error(self) -> float:
        return math.sqrt(self.sq_error / self.count) if self.count else 0.0

    @property
    def scale(self) -> float:
        """RMS of the truth: the output's scale."""
        return math.sqrt(self.sq_truth / self.count) if self.count else 0.0

    @property
    def ulp(self) -> float:
        """One unit in the last place at the output's scale."""
        return self.eps * self.scale


def error_sums(outputs: list[Outputs], truths: list[Outputs]) -> ErrorSums:
    sums = ErrorSums()
    for out, truth in zip(outputs, truths, strict=True):
        for o, t in zip(out.tensors, truth.tensors, strict=True):
            if not o.is_floating_point() or o.dtype == torch.float64 or o.shape != t.shape:
                continue
            sums.eps = max(sums.eps, torch.finfo(o.dtype).eps)
            for o_part, t_part in chunks(o, t):
                o64, t64 = o_part.double(), t_part.double()
                truth_finite = torch.isfinite(t64)
                finite = torch.isfinite(o64) & truth_finite
                sums.sq_error += float(((o64 - t64)[finite] ** 2).sum())
                sums.sq_truth += float((t64[finite] ** 2).sum())
                sums.count += int(finite.sum())
                sums.non_finite += int((truth_finite & ~finite).sum())
    return sums


def precision_check(ref_trials: list[Outputs], cand_trials: list[Outputs], truths: list[Outputs]) -> PrecisionReport:
    if len(truths) != len(ref_trials):
        return PrecisionReport(checked=False, message="no float64 ground truth")
    ref = error_sums(ref_trials, truths)
    cand = error_sums(cand_trials, truths)
    if not ref.count or not cand.count:
        return PrecisionReport(checked=False, message="no floating-point output below float64 to check")
    ref_err, cand_err = ref.rms_error, cand.rms_error
    noise = NOISE_ULPS * ref.ulp
    ratio = cand_err / max(ref_err, ref.ulp, 1e-300)
    passed = not (ratio > MAX_RATIO and cand_err > noise)
    return PrecisionReport(
        checked=True, reference_error=ref_err, candidate_error=cand_err, ratio=round(ratio, 2), passed=passed,
        message=None if passed else (
            f"the candidate's RMS error against float64 is {cand_err:.3g}, {ratio:.0f}x the reference's "
            f"{ref_err:.3g}: it computes in lower precision than the problem's dtype"),
    )
