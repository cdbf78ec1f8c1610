"""Probe trials' inputs: sets drawn by the problem's own get_inputs(), then changed to expose reduced
precision and skipped elements. Runs in the judge (the reference's sandbox).

Only floating tensors change (index tensors, masks, shapes are left alone), exact zeros stay zero
(triangular or masked inputs keep their structure) and signs are kept (positive inputs stay
positive). The judge keeps a probe only where the reference stays finite and its own error against
float64 stays sane (worker/engine/probes.py judges the candidate against both):

- scaled: each float32/float64 input times the power of two that brings its RMS to 2^-21. A power
  of two changes no rounding in float32 (nothing under- or overflows there), so where the reference's
  outputs scale bit for bit (the judge checks) the reference's and an honest kernel's relative errors
  are what they are at the problem's scale; half precision keeps only about 3 bits in that range (its
  subnormals), which no reduction averages away.
- offset: each input plus 4 times its RMS (its non-zero elements). bfloat16 keeps about 4 bits of the
  values' spread beside it (differences, shift-invariant softmax/log-sum-exp lose the rest); float32
  loses 2, and a one-pass variance's cancellation grows only ~17x (a larger offset flagged honest
  E[x^2] - E[x]^2 kernels).
- spikes: each input scaled down by 2^-40 (a silent background: distinct values, no ties, no new
  zeros, but below float32's resolution of the spikes, so an honest sum that drops it after a spike
  loses nothing), with a few elements at secret positions set to 4-5x its RMS (sign kept, all
  different, mirrored in a symmetric matrix). The spikes alone carry the output, so a reduction that
  skips one of them, or rounds them to half precision, moves visibly instead of averaging away.
  Positions lean towards the first and last index of each dimension, where skipping kernels usually
  cut, and the last non-zero element is always one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

SCALED_RMS_LOG2 = -21
OFFSET_RMS = 4.0
SPIKE_BACKGROUND = 2.0 ** -40
SPIKE_RMS = 4.0
SPIKES_PER_TENSOR = 16
PROBE_KINDS = ("scaled", "offset", "spikes")
_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_WIDE_FLOATS = (torch.float32, torch.float64)


@dataclass
class ProbeInputs:
    kind: str
    args: list
    description: str  # what was done to the inputs, for the report (never the spikes' positions)


def probe_inputs(args: list, generator: torch.Generator) -> list[ProbeInputs]:
    """Every probe for one fresh input set; a probe that changes no tensor is left out."""
    probes = []
    for kind, change in (("scaled", _scaled), ("offset", _offset), ("spikes", _spiked)):
        changed, notes = [], []
        for arg in args:
            new = change(arg, generator) if _eligible(arg, kind) else None
            changed.append(arg if new is None else new[0])
            if new is not None:
                notes.append(new[1])
        if notes:
            probes.append(ProbeInputs(kind, changed, "; ".join(sorted(set(notes)))))
    return probes


def _eligible(arg: object, kind: str) -> bool:
    # A 0-d tensor is a hyperparameter (a margin, an eps), not data.
    if not isinstance(arg, torch.Tensor) or arg.dim() == 0 or arg.numel() == 0:
        return False
    return arg.dtype in (_WIDE_FLOATS if kind == "scaled" else _FLOATS)


def _rms(tensor: torch.Tensor) -> float:
    values = tensor[torch.isfinite(tensor)].double()
    return float(values.square().mean().sqrt()) if values.numel() else 0.0


def _scaled(arg: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, str] | None:
    rms = _rms(arg)
    if rms == 0.0:
        return None
    power = SCALED_RMS_LOG2 - round(math.log2(rms))
    return arg * 2.0 ** power, f"floating inputs scaled by powers of two to an RMS near 2^{SCALED_RMS_LOG2}"


def _offset(arg: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, str] | None:
    rms = _rms(arg)
    if rms == 0.0:
        return None
    return torch.where(arg != 0, arg + OFFSET_RMS * rms, arg), \
        f"floating inputs offset by {OFFSET_RMS:g}x their RMS (non-zero elements)"


def _spiked(arg: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, str] | None:
    rms = _rms(arg)
    candidates = (arg != 0) & torch.isfinite(arg)
    if rms == 0.0 or not bool(candidates.any()):
        return None
    out = arg * SPIKE_BACKGROUND
    symmetric = arg.dim() >= 2 and arg.shape[-1] == arg.shape[-2] and torch.equal(arg, arg.transpose(-1, -2))
    positions = _positions(arg.shape, candidates, generator)
    for number, index in enumerate(positions):
        # All magnitudes different: an arg-max over spikes has one answer.
        magnitude = rms * (SPIKE_RMS + (number + float(torch.rand((), generator=generator))) / len(positions))
        value = math.copysign(magnitude, float(arg[index]))
        out[index] = value
        if symmetric:
            out[index[:-2] + (index[-1], index[-2])] = value
    return out, (f"floating inputs scaled by 2^{int(math.log2(SPIKE_BACKGROUND))} with a few elements at secret "
                 f"positions set to {SPIKE_RMS:g}-{SPIKE_RMS + 1:g}x their RMS")


def _positions(shape: torch.Size, allowed: torch.Tensor, generator: torch.Generator) -> list[tuple[int, ...]]:
    """Distinct positions of allowed elements: the last one, then up to SPIKES_PER_TENSOR more (one per
    8 elements in small tensors, which stay mostly quiet), each index drawn per dimension as the first
    (1 in 5), the last (1 in 4) or any (the rest)."""
    last = int(torch.nonzero(allowed.reshape(-1))[-1].item())
    found = [tuple(int(i) for i in torch.unravel_index(torch.tensor(last), shape))]
    wanted = 1 + min(SPIKES_PER_TENSOR, allowed.numel() // 8)
    for _ in range(SPIKES_PER_TENSOR * 4):
        if len(found) >= wanted:
            break
        index = tuple(_draw_index(size, generator) for size in shape)
        if index not in found and bool(allowed[index]):
            found.append(index)
    return found


def _draw_index(size: int, generator: torch.Generator) -> int:
    u = float(torch.rand((), generator=generator))
    if u < 0.2:
        return 0
    if u < 0.45:
        return size - 1
    return int(torch.randint(0, size, (), generator=generator))
