"""Precision: errors of the reference and of the candidate against a float64 run of the reference.

Both are RMS errors over every finite output value of every trial. A candidate passing the tolerance
with operands rounded to half precision (an fp16 GEMM on an fp32 problem) shows an error thousands of
times the reference's; reordered arithmetic (tiling, tree reductions, fused epilogues) stays within a
small factor. The rule (KJ-R12) needs both a large ratio and an error well above the dtype's rounding
noise, so exact references (a ReLU, error 0) do not turn rounding differences into flags.

Reduced outputs (a loss, a mean, a norm: an output holding far fewer values than the inputs, each the
reduction of many) are held to what an honest float32 reduction of that length can do instead: the
reference's own error is no yardstick there, since it sums in a tree (error ~1 ulp) while an honest
sequential or per-thread sum is hundreds of times further off, and a lower-precision kernel hides among
them. `honest_reduction_ulps(n)` is log2(n) (a pairwise or tree sum's bound, in units of the sum) plus
sqrt(n) (a sequential float32 sum's statistical error, ~0.12 sqrt(n) ulps on random data, with margin);
n is the number of floating input values of one input set, an upper bound on any output value's length.
A reduced output is flagged beyond HONEST_REDUCTION_FACTOR times that (and still far beyond the
reference's error: MAX_RATIO on the problem's trials, probes.PROBE_RATIO on a probe). Measured on CPU (float64 truth; means of randn, rand, |randn|, randn^2, exp(randn),
smooth L1, MSE and IoU losses, 4096 to 2M inputs, 3 to 6 seeds; the problem's inputs and every probe):
tree, Kahan, per-lane (1024 accumulators) and blocked sums in random order stay below 0.25 of it; a
fully sequential float32 sum (one accumulator) below 1.3 on the problem's, scaled, spikes and
structured inputs of positive values, below 6 on centred ones (the scalar is then small against its
terms; its ratio to the reference stays under 64 there) except one spikes probe of 131072 values (12.6,
4762x the tree's error), and up to 15 on the rounding probe past ~30000 values of one sign: once its
total's ulp nears the values' bfloat16 cells it rounds them all the same way, as imprecise as bfloat16
there. Those sums are flagged (they were before this rule too, by the growth of their ratio). bfloat16 internals reach 33 to 900 on the rounding probe up to 500000 values (zero-mean
data: on the problem's inputs too), bfloat16 block sums 1.2 to 185; bfloat16 in a ratio of areas (an IoU
loss) stays at 0.01 to 2.6 everywhere, as accurate as an honest sequential sum: no error-based rule
tells it apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from contract.results import PrecisionReport
from sandbox_side.judging.correctness import Outputs, chunks

MAX_RATIO = 64.0
# Errors below this many units in the last place of the outputs' RMS are rounding noise.
NOISE_ULPS = 1024
# An output is a reduction when the inputs hold at least this many floating values per output value.
REDUCTION_MIN = 64
# A reduced output is held to this many times honest_reduction_ulps(n).
HONEST_REDUCTION_FACTOR = 8.0


def reduction_length(input_values: int, output_values: int) -> int | None:
    """The length an honest reduction is held to (the floating input values of one input set), or None
    when the output is no reduction (fewer than REDUCTION_MIN input values per output value)."""
    if output_values <= 0 or input_values < REDUCTION_MIN * output_values:
        return None
    return input_values


def honest_reduction_ulps(n: int) -> float:
    """The error, in ulps of the result, that an honest float32 reduction of n values stays within: a tree
    or pairwise sum's bound (log2 n) plus a sequential sum's statistical error with margin (sqrt n)."""
    return math.log2(max(n, 2)) + math.sqrt(n)


def noise_ulps(reduction: int | None) -> float:
    """The rounding-noise floor of KJ-R12 on the problem's trials, in ulps of the outputs' RMS."""
    if reduction is None:
        return float(NOISE_ULPS)
    return min(float(NOISE_ULPS), HONEST_REDUCTION_FACTOR * honest_reduction_ulps(reduction))


def floating_values(values: object) -> int:
    """How many floating values a list of inputs or outputs holds (nested lists and tuples included)."""
    if isinstance(values, torch.Tensor):
        return values.numel() if values.is_floating_point() else 0
    if isinstance(values, (list, tuple)):
        return sum(floating_values(v) for v in values)
    return 0


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


def precision_check(ref_trials: list[Outputs], cand_trials: list[Outputs], truths: list[Outputs],
                    reduction: int | None = None) -> PrecisionReport:
    """`reduction`: the output's reduction length (reduction_length), None when it is no reduction."""
    if len(truths) != len(ref_trials):
        return PrecisionReport(checked=False, message="no float64 ground truth")
    ref = error_sums(ref_trials, truths)
    cand = error_sums(cand_trials, truths)
    if not ref.count or not cand.count:
        return PrecisionReport(checked=False, message="no floating-point output below float64 to check")
    ref_err, cand_err = ref.rms_error, cand.rms_error
    floor_ulps = noise_ulps(reduction)
    ratio = cand_err / max(ref_err, ref.ulp, 1e-300)
    passed = not (ratio > MAX_RATIO and cand_err > floor_ulps * ref.ulp)
    beyond = (f", beyond the {floor_ulps:.0f} ulps an honest float32 reduction of {reduction} values stays within"
              if reduction is not None and floor_ulps < NOISE_ULPS else "")
    return PrecisionReport(
        checked=True, reference_error=ref_err, candidate_error=cand_err, ratio=round(ratio, 2), passed=passed,
        reduction_length=reduction, ulps=round(cand_err / max(ref.ulp, 1e-300), 2),
        message=None if passed else (
            f"the candidate's RMS error against float64 is {cand_err:.3g}, {ratio:.0f}x the reference's "
            f"{ref_err:.3g}{beyond}: it computes in lower precision than the problem's dtype"),
    )
