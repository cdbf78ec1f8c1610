"""Inputs with a doubled leading dimension, to expose kernels that hard-code the problem's shape.

Runs in the reference's sandbox. A variant joins two fresh input sets drawn by the problem's
own get_inputs() along dimension 0, so its values keep the problem's distribution. Doubling
keeps every power-of-two divisibility of the original size: a kernel that assumes its size is
a multiple of its block still passes; one that hard-codes the size (or the grid) does not.
Which inputs share the batch dimension is not declared by KernelBench problems, so plans are
tried in order and the first one the reference accepts is used.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class ShapePlan:
    widened: list[int]  # positions of the inputs whose dimension 0 is doubled
    args: list


def _tensor_positions(args: list) -> list[int]:
    return [i for i, arg in enumerate(args) if isinstance(arg, torch.Tensor) and arg.dim() > 0]


def _joinable(first: torch.Tensor, second: torch.Tensor) -> bool:
    return first.shape[1:] == second.shape[1:] and first.dtype == second.dtype and first.shape[0] > 0


def wider_batch_plans(first: list, second: list) -> list[ShapePlan]:
    """Plans to try, most natural first: every input with the first input's leading size, then
    the first tensor input alone (e.g. only A of A @ B when A and B are square)."""
    positions = _tensor_positions(first)
    if not positions or len(first) != len(second):
        return []
    lead = first[positions[0]].shape[0]
    batch = [i for i in positions if first[i].shape[0] == lead]
    candidates = [batch] if len(batch) == 1 else [batch, batch[:1]]
    plans = []
    for widened in candidates:
        if not all(isinstance(second[i], torch.Tensor) and _joinable(first[i], second[i]) for i in widened):
            continue
        args = list(first)
        for i in widened:
            args[i] = torch.cat([first[i], second[i]], dim=0)
        plans.append(ShapePlan(widened=widened, args=args))
    return plans


def input_bytes(args: list) -> int:
    return sum(a.numel() * a.element_size() for a in args if isinstance(a, torch.Tensor))


def input_shapes(args: list) -> list[list[int] | None]:
    return [list(a.shape) if isinstance(a, torch.Tensor) else None for a in args]
