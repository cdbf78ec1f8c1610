"""The torch.compile baseline, inside the judge: compile the reference once and check it.

The judge compiles its own reference model with `torch.compile` in its default mode, runs the
compiled model once on the first correctness trial's inputs (which is where the compile cost is
paid) and compares that output with the eager reference's, with the job's tolerances. A compile
error or a mismatch is not the candidate's business: it is recorded as the reason there is no
compile baseline, and the judge goes on serving its eager reference. Never run in a candidate's
process.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from sandbox_side.runtime.loader import fresh_on, to_storable

MAX_REASON_CHARS = 500
_perf_counter = time.perf_counter


@dataclass
class CompiledReference:
    model: Callable[..., object] | None
    compile_s: float
    reason: str | None  # why there is no compile baseline; None when `model` is usable


def _short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return text if len(text) <= MAX_REASON_CHARS else text[:MAX_REASON_CHARS] + " ..."


def compile_reference(model: Callable[..., object], args: list, device: torch.device, sync: Callable[[], None],
                      matches: Callable[[dict], str | None]) -> CompiledReference:
    """`matches(stored_outputs)` returns None when the compiled output agrees with the eager one,
    else what differs."""
    start = _perf_counter()
    try:
        compiled = torch.compile(model)  # the default mode: what papers report as "torch.compile"
        with torch.no_grad():
            out = compiled(*fresh_on(args, device))
        sync()
        stored = to_storable(out)
    except Exception as exc:  # noqa: BLE001 - any compile or run failure means: no compile baseline
        return CompiledReference(None, round(_perf_counter() - start, 3), f"torch.compile failed: {_short(exc)}")
    compile_s = round(_perf_counter() - start, 3)
    mismatch = matches(stored)
    if mismatch is not None:
        return CompiledReference(None, compile_s, "the compiled reference does not match the eager one on "
                                                  f"trial 0: {mismatch[:MAX_REASON_CHARS]}")
    return CompiledReference(compiled, compile_s, None)
