"""Notice when user code rebinds the functions a fair evaluation depends on.

The timer binds its own references first, so rebinding cannot change the numbers; this
records the attempt so the supervisor can reject the candidate for it.
"""

from __future__ import annotations

import builtins
import time

import torch

# (owner, attribute) pairs watched for rebinding.
WATCHED = [
    (time, "perf_counter"), (time, "time"), (time, "monotonic"), (time, "perf_counter_ns"),
    (torch, "allclose"), (torch, "equal"), (torch, "isclose"), (torch, "save"), (torch, "load"),
    (torch.Tensor, "__eq__"), (torch.Tensor, "clone"), (torch.Tensor, "cpu"), (torch.Tensor, "detach"),
    (torch.cuda, "synchronize"), (torch.cuda, "Event"), (torch.cuda.Event, "record"),
    (torch.cuda.Event, "elapsed_time"), (torch.cuda.Event, "synchronize"),
    (torch._C, "_cuda_synchronize"), (builtins, "print"), (builtins, "open"),
    (builtins, "isinstance"), (builtins, "type"),
]


class IntegrityWatch:
    def __init__(self) -> None:
        self._baseline = {self._name(o, a): getattr(o, a, None) for o, a in WATCHED}

    @staticmethod
    def _name(owner: object, attribute: str) -> str:
        return f"{getattr(owner, '__name__', type(owner).__name__)}.{attribute}"

    def changed(self) -> list[str]:
        return [
            self._name(o, a) for o, a in WATCHED
            if getattr(o, a, None) is not self._baseline[self._name(o, a)]
        ]
