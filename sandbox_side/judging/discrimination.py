"""Correctness on a degenerate reference: outputs that move less than the tolerance between trials.

A constant passes `allclose` there, so the candidate must also stay close against the reference's
own trial-to-trial spread D (the largest max-abs difference between two trials' outputs). For any
constant c and trials i, j: |c - r_i| + |c - r_j| >= |r_i - r_j|, so some trial's error is at least
D/2; requiring every error to be at most D/4 fails every constant, while an honest kernel's rounding
error is far below the spread. A reference whose spread is itself at rounding level (softmax over a
dimension of size 1) has nothing to discriminate and is only reported.

With the float64 ground truth of each trial the rule reads the truth, not the reference: the spread is
the truth's, the candidate's error is against the truth, and a truth that moves no more than the
reference's own rounding error (GroupNorm then a mean: zero in exact arithmetic, fp32 rounding noise
in the reference) means the output does not depend on the inputs. Measured on the GPU: two honest
kernels for such problems were failed when the rule asked them to reproduce the reference's noise.
"""

from __future__ import annotations

import torch

from contract.results import DiscriminationReport
from sandbox_side.judging.correctness import Outputs, worst_abs_difference

SPREAD_FRACTION = 0.25
# A spread within this many units in the last place of the outputs' magnitude is rounding noise.
CONSTANT_ULPS = 16
# A float64 truth moving less than this many times the reference's own error only moves by rounding;
# above it, the limit (a quarter of the spread) leaves an honest kernel 4x the reference's error.
TRUTH_SIGNAL_FACTOR = 16
NOT_INPUT_DEPENDENT = ("the reference's output does not depend on its inputs; nothing to discriminate "
                       "(a property of the problem)")


def _noise_floor(outputs: Outputs) -> float:
    floor = 0.0
    for t in outputs.tensors:
        if t.is_floating_point() and t.numel():
            finite = t[torch.isfinite(t)]
            if finite.numel():
                floor = max(floor, CONSTANT_ULPS * torch.finfo(t.dtype).eps * float(finite.double().abs().max()))
    return floor


def _spread(trials: list[Outputs]) -> float:
    return max((worst_abs_difference(a, b) for i, a in enumerate(trials) for b in trials[i + 1:]), default=0.0)


def _worst_error(expected: list[Outputs], got: list[Outputs]) -> float:
    return max((worst_abs_difference(e, g) for e, g in zip(expected, got, strict=True)), default=0.0)


def discriminate(ref_trials: list[Outputs], cand_trials: list[Outputs], perturbed: bool,
                 truths: list[Outputs] | None = None) -> DiscriminationReport:
    if truths and len(truths) == len(ref_trials):
        spread, error = _spread(truths), _worst_error(truths, cand_trials)
        rounding = _worst_error(truths, ref_trials)
        constant = spread <= max(TRUTH_SIGNAL_FACTOR * rounding, _noise_floor(ref_trials[0]))
        against = "float64 truth"
    else:
        spread, error = _spread(ref_trials), _worst_error(ref_trials, cand_trials)
        constant = spread <= _noise_floor(ref_trials[0])
        against = "reference"
    limit = SPREAD_FRACTION * spread
    if constant:
        return DiscriminationReport(spread=spread, max_error=error, limit=limit, passed=True, perturbed_inputs=perturbed,
                                    message=NOT_INPUT_DEPENDENT)
    passed = error <= limit
    return DiscriminationReport(
        spread=spread, max_error=error, limit=limit, passed=passed, perturbed_inputs=perturbed,
        message=None if passed else (
            f"the {against}'s outputs move only {spread:.3g} between trials, and the candidate's error "
            f"{error:.3g} is above a quarter of that ({limit:.3g}): it does not follow its inputs"),
    )
