"""Inputs after each candidate call, compared with the supervisor's own copies of them."""

from __future__ import annotations

import torch

from contract.results import InputCheckReport

MAX_FINDINGS = 10


def check_inputs(original_trials: list[list], entries: list[dict]) -> InputCheckReport:
    """`original_trials`: each trial's inputs as drawn; `entries`: the candidate's trial outputs,
    each with `inputs_after` (the inputs as forward left them) and `aliases`."""
    report = InputCheckReport()
    for trial, (original, entry) in enumerate(zip(original_trials, entries, strict=False)):
        after = entry.get("inputs_after") if isinstance(entry, dict) else None
        if not isinstance(after, list):
            continue
        for index, (before, now) in enumerate(zip(original, after, strict=False)):
            if type(before) is not torch.Tensor or type(now) is not torch.Tensor:
                continue
            finding = _difference(before, now)
            if finding:
                report.mutated.append(f"trial {trial}, input {index}: {finding}")
        for alias in entry.get("aliases") or []:
            report.aliased.append(f"trial {trial}: {alias}")
    report.mutated = report.mutated[:MAX_FINDINGS]
    report.aliased = report.aliased[:MAX_FINDINGS]
    return report


def _difference(before: torch.Tensor, now: torch.Tensor) -> str | None:
    if before.shape != now.shape or before.dtype != now.dtype:
        return f"now shape {tuple(now.shape)} {now.dtype}, was {tuple(before.shape)} {before.dtype}"
    if before.is_floating_point() or before.is_complex():
        same = (before == now) | (torch.isnan(before) & torch.isnan(now))
    else:
        same = before == now
    changed = int((~same).sum())
    if not changed:
        return None
    detail = f"{changed} of {before.numel()} values changed"
    if before.is_floating_point():
        diff = (before.double() - now.double()).abs()
        finite = torch.isfinite(diff)
        if finite.any():
            detail += f" (max change {float(diff[finite].max()):.3g})"
    return detail
