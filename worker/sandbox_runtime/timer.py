"""Timing loop, the same for reference and candidate.

GPU: CUDA events around each call, an L2 flush before each call (outside the events),
device-wide synchronisation around every iteration, inputs rotated through a pool of
distinct input sets so that no pointer or value repeats between consecutive calls.
CPU: a host clock around each call. Host-clock samples are always taken as well, so the
supervisor can see work that escaped the events (side streams).

Clock and sync functions are bound here at import time, before user code is loaded, so a
candidate that rebinds torch.cuda.synchronize or time.perf_counter does not change them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

_perf_counter = time.perf_counter
_monotonic = time.monotonic
_EventBase = getattr(torch._C, "_CudaEventBase", None)
_cuda_sync = getattr(torch._C, "_cuda_synchronize", None)
_current_stream = torch.cuda.current_stream
_Event = torch.cuda.Event

WARMUP_RUNS = 3
L2_FLUSH_MIN_BYTES = 256 * 1024 * 1024


@dataclass
class TimingSamples:
    device_ms: list[float] = field(default_factory=list)
    host_ms: list[float] = field(default_factory=list)
    warmup_runs: int = 0
    stopped_by: str = ""
    # Last output produced for each pool slot, re-checked against the reference outside.
    last_outputs: dict[int, object] = field(default_factory=dict)


class DeviceClock:
    """Marks on the device's timeline: CUDA events on the current stream, or the host clock."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def mark(self) -> object:
        if not self.cuda:
            return _perf_counter()
        event = _Event(enable_timing=True)
        _EventBase.record(event, _current_stream())
        return event

    def settle(self) -> None:
        if self.cuda:
            _cuda_sync()

    def elapsed_ms(self, start: object, end: object) -> float:
        """Valid after settle()."""
        return _EventBase.elapsed_time(start, end) if self.cuda else (end - start) * 1e3


class _RunningRse:
    """Relative standard error of the mean, updated per sample (Welford), so the stopping check
    costs the same at sample 10 as at sample 100,000."""

    def __init__(self) -> None:
        self.n = 0
        self.mean = 0.0
        self.m2 = 0.0

    def add(self, value: float) -> None:
        self.n += 1
        delta = value - self.mean
        self.mean += delta / self.n
        self.m2 += delta * (value - self.mean)

    def value(self) -> float:
        if self.n < 2 or self.mean <= 0:
            return math.inf
        return math.sqrt(self.m2 / (self.n - 1) / self.n) / self.mean


class _GpuIteration:
    def __init__(self, device: torch.device) -> None:
        props = torch.cuda.get_device_properties(device)
        l2_bytes = int(getattr(props, "L2_cache_size", 0) or 0)
        self.flush = torch.empty(max(4 * l2_bytes, L2_FLUSH_MIN_BYTES), dtype=torch.uint8, device=device)
        self.start = _Event(enable_timing=True)
        self.end = _Event(enable_timing=True)

    def run(self, call: Callable[[], object]) -> tuple[float, float, object]:
        self.flush.zero_()
        _cuda_sync()
        t0 = _perf_counter()
        stream = _current_stream()
        _EventBase.record(self.start, stream)
        out = call()
        _EventBase.record(self.end, stream)
        _cuda_sync()
        t1 = _perf_counter()
        return _EventBase.elapsed_time(self.start, self.end), (t1 - t0) * 1e3, out


class _CpuIteration:
    def run(self, call: Callable[[], object]) -> tuple[float, float, object]:
        t0 = _perf_counter()
        out = call()
        t1 = _perf_counter()
        ms = (t1 - t0) * 1e3
        return ms, ms, out


def _snapshot(out: object) -> object:
    if type(out) is torch.Tensor:
        return torch.Tensor.clone(out)
    if isinstance(out, (tuple, list)):
        return type(out)(_snapshot(item) for item in out)
    return out


def time_model(
    model: Callable[..., object],
    pool: list[list],
    device: torch.device,
    *,
    budget_s: float,
    min_runs: int,
    max_runs: int,
    target_rse: float,
    fixed_runs: int | None = None,
) -> TimingSamples:
    """Time `model` over the input pool; adaptive unless `fixed_runs` is given."""
    iteration = _GpuIteration(device) if device.type == "cuda" else _CpuIteration()
    result = TimingSamples()
    rse = _RunningRse()
    with torch.no_grad():
        for i in range(WARMUP_RUNS):
            args = pool[i % len(pool)]
            iteration.run(lambda a=args: model(*a))
            result.warmup_runs += 1
        deadline = _monotonic() + budget_s
        target = fixed_runs if fixed_runs is not None else max_runs
        i = 0
        while i < target:
            slot = i % len(pool)
            args = pool[slot]
            device_ms, host_ms, out = iteration.run(lambda a=args: model(*a))
            result.device_ms.append(device_ms)
            rse.add(device_ms)
            result.host_ms.append(host_ms)
            # A copy, taken after the timed region: an output buffer reused across calls
            # must still hold this slot's answer when it is checked.
            result.last_outputs[slot] = _snapshot(out)
            i += 1
            if fixed_runs is not None:
                continue
            if i >= min_runs and i % 5 == 0 and rse.value() < target_rse:
                result.stopped_by = "target_rse"
                break
            if _monotonic() > deadline and i >= min(min_runs, 3):
                result.stopped_by = "budget"
                break
        if not result.stopped_by:
            result.stopped_by = "fixed_runs" if fixed_runs is not None else "max_runs"
    return result
