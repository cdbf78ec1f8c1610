"""Which PyTorch (ATen) operators a forward call dispatches, and how long each took.

A candidate must do its work in its own kernels; PyTorch compute reached at run time (through
a lookup table, a C++ extension calling ATen, ...) shows up here even when the source hides
it from the static policy. Bound at import, before user code loads.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from torch.utils._python_dispatch import TorchDispatchMode

from .timer import DeviceClock


class OpCensus(TorchDispatchMode):
    """Counts every operator and marks each one's start and end on the device's clock.
    Operators an operator calls internally run with the mode off, so nothing is counted twice."""

    def __init__(self, clock: DeviceClock) -> None:
        super().__init__()
        self.counts: Counter[str] = Counter()
        self.clock = clock
        self._spans: list[tuple[str, object, object]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func.overloadpacket)
        self.counts[name] += 1
        start = self.clock.mark()
        out = func(*args, **(kwargs or {}))
        self._spans.append((name, start, self.clock.mark()))
        return out

    def op_ms(self) -> dict[str, float]:
        """Time per operator, summed over its calls (the clock must have settled)."""
        totals: defaultdict[str, float] = defaultdict(float)
        for name, start, end in self._spans:
            totals[name] += self.clock.elapsed_ms(start, end)
        return dict(totals)
