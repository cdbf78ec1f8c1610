"""Which PyTorch (ATen) operators a forward call dispatches.

A candidate must do its work in its own kernels; PyTorch compute reached at run time (through
a lookup table, a C++ extension calling ATen, ...) shows up here even when the source hides
it from the static policy. Bound at import, before user code loads.
"""

from __future__ import annotations

from collections import Counter

from torch.utils._python_dispatch import TorchDispatchMode


class OpCensus(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.counts[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))
