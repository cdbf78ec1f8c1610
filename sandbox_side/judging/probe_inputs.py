"""Probe trials' inputs: sets drawn by the problem's own get_inputs(), then changed to expose reduced
precision and skipped elements. Runs in the judge (the reference's sandbox).

Only floating tensors change (index tensors, masks, shapes are left alone), exact zeros stay zero
(triangular or masked inputs keep their structure) and signs are kept (positive inputs stay
positive). The judge keeps a probe only where the reference stays finite and its own error against
float64 stays sane (sandbox_side/judging/probes.py judges the candidate against both):

- scaled: each float32/float64 input times the power of two that brings its RMS to 2^-21. A power
  of two changes no rounding in float32 (nothing under- or overflows there), so where the reference's
  outputs scale bit for bit (the judge checks) the reference's and an honest kernel's relative errors
  are what they are at the problem's scale; half precision keeps only about 3 bits in that range (its
  subnormals), which no reduction averages away.
- rounding: each float32/float64 value moved within its bfloat16 rounding cell (by less than 0.8%) to
  13/32 of the cell from its end toward zero: bfloat16, half precision and TF32 then all round every
  value toward zero, an error proportional to the value, which no sum or mean averages away (on randn
  inputs their random rounding errors do). float32 rounds these values as any others: the data and an
  honest algorithm's behaviour on it (one-pass variances) are those of the problem, except for one: a
  long sequential float32 sum of positive values, once its running total's ulp reaches the values'
  bfloat16 cells, rounds them all the same way too (over 65536 values of [0, 1): ~760 times a tree
  sum's error, 2.8 times honest_reduction_ulps, against 22 times on the problem's inputs); reduced
  outputs are judged against that bound (sandbox_side/judging/probes.py), not against their own ratio's growth.
- spikes: a few elements of each input, at secret positions, set to 16 times its RMS, or twice its largest
  magnitude if that is less (sign kept, all different, mirrored in a symmetric matrix), the rest left as
  drawn. A reduction that skips one of
  them moves far more than its rounding explains. Positions lean towards the first and last index of
  each dimension, where skipping kernels usually cut, and the last non-zero element is always one.
- structured: every floating value multiplied by a weight between 1 and 1 + STRUCTURE_AMPLITUDE that
  follows its indices with periods 2, 3, 4 and 8 at secret phases, along every dimension, along the flat
  (contiguous) index and along the rows of the tensor seen as (numel / last, last). A kernel that reads
  every k-th row, column or element (k = 2, 3, 4, 6, 8, 12, 16, 24) samples weights whose mean differs
  from the whole tensor's by at least 0.0227 of the amplitude over the number of index spaces, whatever
  the phases (where no two spaces share residues only in part: sizes that are multiples of the periods,
  or one or two dimensions): its result moves far beyond its rounding. Random spikes cannot do this: a uniform subsample
  reads them as uniformly as it reads the rest. Positive values get the weight, negative ones its
  complement (2 + STRUCTURE_AMPLITUDE - weight), so that inputs of either sign or both carry the pattern.

(An offset probe, x + c*RMS, and spikes on a near-silent background were tried and dropped: both change
the conditioning of what follows, e.g. a convolution's bias then a group norm, and flagged honest float32
kernels whose variance or sums are computed in one pass.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import cast

import torch

SCALED_RMS_LOG2 = -21
# Where in its bfloat16 cell each value is put, from the cell's lower end (toward zero), in cell widths:
# below half, so bfloat16 rounds it down by that much; 13/32 of a bfloat16 cell is 3.25 half-precision
# cells, so half precision (and TF32) rounds it down too, by a quarter of its own cell.
ROUNDING_POSITION = 13 / 32
BFLOAT16_BITS = 8  # significant bits, the implicit one included
SPIKE_RMS = 16.0
# ...but never beyond this many times the largest magnitude drawn: inputs of a bounded range (uniform in
# [-100, 100], say) stay near it (16x their RMS put exp(-x) beyond a double's range in Numba's simulator).
SPIKE_MAX = 2.0
SPIKES_PER_TENSOR = 16
# The structured probe's periods and their weights in the pattern (which is the sum of the weights of the
# periods at whose phase an index lies, over the sum of all: in [0, 1]). Chosen by exhaustive search so
# that for every stride k in 2, 3, 4, 6, 8, 12, 16, 24, every phase, and up to three index spaces that see
# the same residues (the columns and the flat index of rows whose length k divides), the pattern's mean
# over the elements a k-strided read visits differs from its overall mean by at least 0.0227.
STRUCTURE_PERIODS = {2: 2.0, 3: 3.0, 4: 4.0, 8: 2.0}
STRUCTURE_AMPLITUDE = 2.0
PROBE_KINDS = ("scaled", "rounding", "spikes", "structured")
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
    for kind, change in (("scaled", _scaled), ("rounding", _rounding), ("spikes", _spiked),
                         ("structured", None)):
        if change is None:  # drawn after the others' draws, so theirs stay what they were
            change = _structured(_phases(generator))
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
    return arg.dtype in (_FLOATS if kind in ("spikes", "structured") else _WIDE_FLOATS)


def _rms(tensor: torch.Tensor) -> float:
    values = tensor[torch.isfinite(tensor)].double()
    return float(values.square().mean().sqrt()) if values.numel() else 0.0


def _scaled(arg: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, str] | None:
    rms = _rms(arg)
    if rms == 0.0:
        return None
    power = SCALED_RMS_LOG2 - round(math.log2(rms))
    return arg * 2.0 ** power, f"floating inputs scaled by powers of two to an RMS near 2^{SCALED_RMS_LOG2}"


def _rounding(arg: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, str] | None:
    magnitude = arg.abs()
    normal = torch.isfinite(arg) & (magnitude > 0)
    if not bool(normal.any()):
        return None
    _, exponent = torch.frexp(torch.where(normal, magnitude, torch.ones_like(magnitude)))
    cell = torch.ldexp(torch.ones_like(magnitude), exponent - BFLOAT16_BITS)
    moved = (torch.floor(magnitude / cell) + ROUNDING_POSITION) * cell
    return torch.where(normal, torch.copysign(moved, arg), arg), \
        "floating inputs moved within their bfloat16 rounding cells (by less than 0.8%) so that half and bfloat16 " \
        "round every one of them toward zero"


def _spiked(arg: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, str] | None:
    rms = _rms(arg)
    candidates = (arg != 0) & torch.isfinite(arg)
    if rms == 0.0 or not bool(candidates.any()):
        return None
    height = min(SPIKE_RMS * rms, SPIKE_MAX * float(arg[candidates].abs().max()))
    out = arg.clone()
    symmetric = arg.dim() >= 2 and arg.shape[-1] == arg.shape[-2] and torch.equal(arg, arg.transpose(-1, -2))
    positions = _positions(arg.shape, candidates, generator)
    for number, index in enumerate(positions):
        # All magnitudes different: an arg-max over spikes has one answer.
        magnitude = height * (1 + (number + float(torch.rand((), generator=generator))) / (16 * len(positions)))
        value = math.copysign(magnitude, float(arg[index]))
        out[index] = value
        if symmetric:
            out[index[:-2] + (index[-1], index[-2])] = value
    return out, (f"a few elements of the floating inputs, at secret positions, set to {SPIKE_RMS:g}x their RMS "
                 f"(at most {SPIKE_MAX:g}x their largest magnitude)")


def _phases(generator: torch.Generator) -> dict[int, int]:
    """One secret phase per period, shared by every index space and every input of the probe: where two
    spaces coincide modulo a period (the columns and the flat index of rows whose length it divides) their
    patterns coincide too and add up, never cancel; inputs that go together (predictions and targets)
    keep their pairing."""
    return {period: int(torch.randint(0, period, (), generator=generator)) for period in STRUCTURE_PERIODS}


def _pattern_table(phases: dict[int, int], device: torch.device | None) -> torch.Tensor:
    """The pattern (in [0, 1]) of an index, by its residue modulo the periods' common multiple."""
    period = math.lcm(*STRUCTURE_PERIODS)
    table = [sum(weight for p, weight in STRUCTURE_PERIODS.items() if (i - phases[p]) % p == 0) for i in range(period)]
    return torch.tensor(table, dtype=torch.float64, device=device) / sum(STRUCTURE_PERIODS.values())


def structure_weights(shape: torch.Size, phases: dict[int, int], symmetric: bool = False,
                      start: int = 0, stop: int | None = None, device: torch.device | None = None) -> torch.Tensor:
    """The structured probe's weights, in [1, 1 + STRUCTURE_AMPLITUDE] (float64), for the elements
    start..stop of a contiguous tensor of this shape, flat. Index spaces: each dimension, and, for two
    dimensions or more, the flat index and the row of the tensor seen as (numel / last, last), all with the
    same phases. A symmetric matrix gets no flat or row space: it stays symmetric."""
    stop = math.prod(shape) if stop is None else stop
    flat = torch.arange(start, stop, dtype=torch.int64, device=device)
    strides = [math.prod(shape[d + 1:]) for d in range(len(shape))]
    spaces = [(flat // strides[d]) % size for d, size in enumerate(shape)]
    if len(shape) >= 2 and not symmetric:
        spaces.append(flat)
    if len(shape) >= 3 and not symmetric:  # the rows of the tensor as a matrix (two dimensions: the first one's)
        spaces.append(flat // shape[-1])
    table = _pattern_table(phases, device)
    pattern = cast(torch.Tensor, sum(table[index % len(table)] for index in spaces)) / len(spaces)  # spaces: one or more
    return 1.0 + STRUCTURE_AMPLITUDE * pattern


_CHUNK = 1 << 22


def _structured(phases: dict[int, int]):
    def change(arg: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, str] | None:
        del generator  # the phases were drawn once for every input of the probe
        if arg.numel() < 2:
            return None
        symmetric = arg.dim() >= 2 and arg.shape[-1] == arg.shape[-2] and torch.equal(arg, arg.transpose(-1, -2))
        source = arg.contiguous().reshape(-1)
        out = torch.empty_like(source)
        for begin in range(0, source.numel(), _CHUNK):  # bounded temporaries, whatever the input's size
            part = source[begin:begin + _CHUNK].double()
            weights = structure_weights(arg.shape, phases, symmetric, begin, begin + part.numel(), part.device)
            # Negative values get the complement: the pattern shows in a mean of values of either sign.
            weights = torch.where(part > 0, weights, 2.0 + STRUCTURE_AMPLITUDE - weights)
            out[begin:begin + part.numel()] = (part * weights).to(arg.dtype)
        return out.reshape(arg.shape), \
            (f"floating inputs multiplied by weights between 1 and {1 + STRUCTURE_AMPLITUDE:g} that vary with "
             f"their rows, columns and flat index with periods {', '.join(map(str, STRUCTURE_PERIODS))} at "
             "secret phases")
    return change


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
