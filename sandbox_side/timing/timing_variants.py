"""Variants of the timing pool's input sets, made in the judge: values changed at secret positions.

A candidate that keeps its outputs across timed calls, keyed on its inputs' buffers and a few sampled
values, returns the stored output whenever the key repeats; the timing pool's buffers are the same in
every block, so only its values can tell the calls apart. So each input set gets a few variants: for
each floating-point input, a secret set of flat positions (about a sixteenth of the elements per variant,
at most MAX_POSITIONS) split into one group per variant; variant v takes, in group v, the values a fresh
draw of the problem's own `get_inputs()` has there (the same distribution, dtype and structure: exact
zeros of both draws stay zero), and keeps the set's own values elsewhere. Variant 0 is the set itself.
Before each timed call the timer writes the chosen variant's values at those positions into the set's
buffers (timer.InputVariants: one row of a small table, outside the timed window), in an order the
supervisor draws and sends with each block; the judge holds the reference's outputs for every variant
and checks the kept outputs of a secret sample of calls against them (KJ-R02). A key that does not read
the changed positions cannot tell the variants apart, and at most one variant's group is read by any one
sampled position: the stored output is then another variant's, and wrong.

A variant is kept only where the reference runs on it, stays finite where it was finite on the set itself,
and its output moves beyond the tolerance (a variant the output does not see could not expose a stale one).
"""

from __future__ import annotations

import torch

# Changed elements per variant and input: a sixteenth of the input, at most this many.
SHARE = 16
MAX_POSITIONS = 1 << 18


def changeable(base: object, fresh: object) -> bool:
    """A floating-point input, not a 0-d hyperparameter, laid out densely, of the same shape in both draws."""
    return (type(base) is torch.Tensor and type(fresh) is torch.Tensor and base.is_floating_point()
            and base.dim() >= 1 and base.numel() > 0 and base.is_contiguous()
            and base.dtype == fresh.dtype and base.shape == fresh.shape)


def make_tables(base: list, fresh: list, count: int, generator: torch.Generator) -> list[tuple[int, torch.Tensor,
                                                                                                  torch.Tensor]]:
    """(input index, flat positions, values table with `count` + 1 rows) for each changeable input (CPU)."""
    changes = []
    for index, (arg, other) in enumerate(zip(base, fresh, strict=False)):
        if not changeable(arg, other):
            continue
        flat, new = arg.detach().cpu().reshape(-1), other.detach().cpu().reshape(-1)
        per_variant = max(1, min(flat.numel() // SHARE, MAX_POSITIONS))
        wanted = per_variant * count
        # Candidates drawn with replacement (no permutation of a large input), kept where the draws differ.
        drawn = torch.randint(flat.numel(), (2 * wanted,), generator=generator).unique()
        drawn = drawn[new[drawn] != flat[drawn]]
        if drawn.numel() == 0:
            continue
        positions = drawn[torch.randperm(drawn.numel(), generator=generator)[:wanted]].sort().values
        # Each position belongs to one variant's group (a secret permutation of the groups over them).
        group = torch.randperm(positions.numel(), generator=generator) % count
        table = flat[positions].unsqueeze(0).repeat(count + 1, 1)
        for variant in range(1, count + 1):
            mine = group == variant - 1
            table[variant, mine] = new[positions[mine]]
        changes.append((index, positions, table))
    return changes


def variant_args(base: list, changes: list[tuple[int, torch.Tensor, torch.Tensor]], variant: int) -> list:
    """A copy of the input set as variant `variant` (on its own device)."""
    args = [arg.clone() if isinstance(arg, torch.Tensor) else arg for arg in base]
    for index, positions, table in changes:
        target = args[index]
        target.view(-1)[positions.to(target.device)] = table[variant].to(target.device)
    return args


def select_rows(changes: list[tuple[int, torch.Tensor, torch.Tensor]], rows: list[int]) -> list:
    """The tables with only the variants in `rows` kept (row 0 always first)."""
    index = torch.tensor(rows, dtype=torch.long)
    return [(arg, positions, table.index_select(0, index)) for arg, positions, table in changes]
