"""Correctness on a degenerate reference: outputs that move less than the tolerance between trials.

A constant passes `allclose` there, so the candidate must also stay close against the reference's
own trial-to-trial spread D (the largest max-abs difference between two trials' outputs). For any
constant c and trials i, j: |c - r_i| + |c - r_j| >= |r_i - r_j|, so some trial's error is at least
D/2; requiring every error to be at most D/4 fails every constant, while an honest kernel's rounding
error is far below the spread. A reference whose spread is itself at rounding level (softmax over a
dimension of size 1) has nothing to discriminate and is only reported.
"""

from __future__ import annotations

import torch

from .correctness import Outputs
from .models import DiscriminationReport

SPREAD_FRACTION = 0.25
# A spread within this many units in the last place of the outputs' magnitude is rounding noise.
CONSTANT_ULPS = 16


def _max_abs_diff(a: Outputs, b: Outputs) -> float:
    worst = 0.0
    for x, y in zip(a.tensors, b.tensors, strict=True):
        if x.shape != y.shape or not x.numel():
            continue
        x64, y64 = x.double(), y.double()
        finite = torch.isfinite(x64) & torch.isfinite(y64)
        if finite.any():
            worst = max(worst, float((x64[finite] - y64[finite]).abs().max()))
    return worst


def _noise_floor(outputs: Outputs) -> float:
    floor = 0.0
    for t in outputs.tensors:
        if t.is_floating_point() and t.numel():
            finite = t[torch.isfinite(t)]
            if finite.numel():
                floor = max(floor, CONSTANT_ULPS * torch.finfo(t.dtype).eps * float(finite.double().abs().max()))
    return floor


def discriminate(ref_trials: list[Outputs], cand_trials: list[Outputs], perturbed: bool) -> DiscriminationReport:
    spread = max((_max_abs_diff(a, b) for i, a in enumerate(ref_trials) for b in ref_trials[i + 1:]), default=0.0)
    error = max((_max_abs_diff(r, c) for r, c in zip(ref_trials, cand_trials, strict=True)), default=0.0)
    limit = SPREAD_FRACTION * spread
    if spread <= _noise_floor(ref_trials[0]):
        return DiscriminationReport(spread=spread, max_error=error, limit=limit, passed=True, perturbed_inputs=perturbed,
                                    message="the reference's output does not depend on its inputs; "
                                            "nothing to discriminate (a property of the problem)")
    passed = error <= limit
    return DiscriminationReport(
        spread=spread, max_error=error, limit=limit, passed=passed, perturbed_inputs=perturbed,
        message=None if passed else (
            f"the reference's outputs move only {spread:.3g} between trials, and the candidate's error "
            f"{error:.3g} is above a quarter of that ({limit:.3g}): it does not follow its inputs"),
    )
