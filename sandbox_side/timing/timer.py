"""Timing loop, the same for reference and candidate: a fixed number of calls chosen by the supervisor.

What a GPU sample measures: the device time of one forward call on cold L2, from a CUDA event
recorded just before the call to one recorded just after it, on the current stream. Before each
call the L2 cache is flushed by zeroing a buffer larger than it. The loop is pipelined the way
triton.testing.do_bench's is: call i is queued (its flush, events and kernels) while the device still
runs call i-1, and only then does the host wait for call i-1's end event. The host's launch work for
a call (Python, argument binding: 60-130 us for a Triton launch, more on a loaded host) is thus
hidden behind the previous call's device work and the flush, as do_bench hides it, instead of behind
the flush alone: with a synchronisation after every call, a Triton launch slower than the flush
(85 us) added its excess to every sample, and a host slowed by a batch's builds moved one honest
Triton GEMM's speedup by 8% in one of five evaluations. A launch-bound call (host time beyond its
device time) still counts its launch gaps, as it does under do_bench. Inputs
rotate through a pool of distinct input sets, and before each call the supervisor's secret order may
switch the set to another of its variants (InputVariants: the same buffers, values changed at secret
positions), so no call sees the inputs the previous call on its buffers saw: a cache keyed on the
buffers or on a few sampled values returns a stale output, and the outputs of a secret sample of calls
are kept for the judge to check against the reference's for the same variant (KJ-R02). The variant's
writes and a kept call's copies are queued on the same stream, so they take effect in call order.
The block ends with a device-wide synchronisation, so work that escaped onto another stream is in
the block's time on the supervisor's clock (KJ-R03 rejects such work by the kernel trace).

CPU: a host clock around each call.

Clock and sync functions are bound here at import time, before user code is loaded, so a
candidate that rebinds torch.cuda.synchronize or time.perf_counter does not change them. A
candidate that reaches into this module instead (it shares the process) can still forge what it
reports: the supervisor never believes these samples alone, but checks them against its own
clock around each block of calls (worker/engine/timing/clock_check.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

_perf_counter = time.perf_counter
# torch's CUDA bindings, bound before any user code runs (None in a torch built without CUDA: used on a GPU only).
_EventBase: Any = getattr(torch._C, "_CudaEventBase", None)
_cuda_sync: Any = getattr(torch._C, "_cuda_synchronize", None)
_current_stream = torch.cuda.current_stream
_Event = torch.cuda.Event
_index_copy = torch.Tensor.index_copy_

WARMUP_RUNS = 3
L2_FLUSH_MIN_BYTES = 256 * 1024 * 1024


@dataclass
class TimingSamples:
    device_ms: list[float] = field(default_factory=list)
    warmup_runs: int = 0
    # Copies of the outputs of the calls the supervisor asked to keep, in call order (re-checked by the judge).
    kept: list[object] = field(default_factory=list)


class InputVariants:
    """Variants of the timing pool's input sets, written into the pool's own buffers before a call.

    Per slot, per changed input: flat positions (secret, chosen by the judge) and a table of values, one
    row per variant (row 0: the set's own values). Switching variants writes one row at those positions:
    a few device writes queued before the call's L2 flush, outside the timed window."""

    def __init__(self, pool: list[list], slots: list[list[tuple[int, torch.Tensor, torch.Tensor]]]) -> None:
        if len(slots) != len(pool):
            raise ValueError(f"variants for {len(slots)} input sets, the pool holds {len(pool)}")
        self.writes: list[list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]] = []
        self.counts: list[int] = []
        for args, changes in zip(pool, slots, strict=True):
            writes, count = [], None
            for arg, positions, table in changes:
                target = args[arg]
                if type(target) is not torch.Tensor or not target.is_contiguous() or table.dim() != 2 \
                        or table.dtype != target.dtype or positions.dim() != 1 or table.shape[1] != positions.numel() \
                        or (positions.numel() and int(positions.max()) >= target.numel()):
                    raise ValueError(f"malformed variants for input {arg}")
                count = table.shape[0] if count is None else count
                if table.shape[0] != count:
                    raise ValueError("every changed input of a set needs the same number of variants")
                writes.append((target.view(-1), positions.to(target.device), table.to(target.device)))
            self.writes.append(writes)
            self.counts.append(count or 1)

    def apply(self, slot: int, variant: int) -> None:
        for flat, positions, table in self.writes[slot]:
            _index_copy(flat, 0, positions, table[variant])


class _Queued:
    """One call queued on the device (or already run on the host): its output, and its time once done."""

    def __init__(self, out: object, events: tuple[Any, Any] | None = None, host_ms: float = 0.0) -> None:
        self.out = out
        self.events = events
        self.host_ms = host_ms

    def elapsed_ms(self) -> float:
        """Waits for the call's end event (GPU) and returns its milliseconds."""
        if self.events is None:
            return self.host_ms
        start, end = self.events
        _EventBase.synchronize(end)
        return _EventBase.elapsed_time(start, end)


class _GpuIteration:
    def __init__(self, device: torch.device) -> None:
        props = torch.cuda.get_device_properties(device)
        l2_bytes = int(getattr(props, "L2_cache_size", 0) or 0)
        self.flush = torch.empty(max(4 * l2_bytes, L2_FLUSH_MIN_BYTES), dtype=torch.uint8, device=device)
        # Two pairs in turn: call i records into one while call i-1's pair is still to be read.
        self.pairs = [(_Event(enable_timing=True), _Event(enable_timing=True)) for _ in range(2)]
        self.turn = 0

    def queue(self, call: Callable[[], object]) -> _Queued:
        """Queues one call on cold L2 between two events, without waiting for the device."""
        stream = _current_stream()
        start, end = self.pairs[self.turn]
        self.turn ^= 1
        self.flush.zero_()
        _EventBase.record(start, stream)
        out = call()
        _EventBase.record(end, stream)
        return _Queued(out, (start, end))

    def finish(self) -> None:
        _cuda_sync()


_gpu_iterations: dict[torch.device, _GpuIteration] = {}


def _gpu_iteration(device: torch.device) -> _GpuIteration:
    """One flush buffer per process, not one per timing pass."""
    if device not in _gpu_iterations:
        _gpu_iterations[device] = _GpuIteration(device)
    return _gpu_iterations[device]


class _CpuIteration:
    def queue(self, call: Callable[[], object]) -> _Queued:
        t0 = _perf_counter()
        out = call()
        return _Queued(out, host_ms=(_perf_counter() - t0) * 1e3)

    def finish(self) -> None:
        pass


def _snapshot(out: object) -> object:
    if type(out) is torch.Tensor:
        return torch.Tensor.clone(out)
    if isinstance(out, (tuple, list)):
        return type(out)(_snapshot(item) for item in out)
    return out


def _call_with(model: Callable[..., object], args: list) -> Callable[[], object]:
    """One call of `model` on `args`, made before the clock starts (the timed part is the call alone)."""
    return lambda: model(*args)


def time_model(model: Callable[..., object], pool: list[list], device: torch.device, *, runs: int,
               warmup: int = WARMUP_RUNS, keep: frozenset[int] | set[int] = frozenset(),
               order: list[int] | None = None, variants: InputVariants | None = None) -> TimingSamples:
    """Time `runs` calls of `model` over the input pool, after `warmup` untimed calls.

    The supervisor times one block of calls per request and alternates the reference's blocks with the
    candidate's (worker/engine/timing/timing_protocol.py); its own clock around each request is the evidence
    the samples reported here are checked against (worker/engine/timing/clock_check.py).

    `order` (the supervisor's, one entry per call, warm-up calls first): call i uses input set
    `order[i] % len(pool)` in its variant `order[i] // len(pool)`, written into the set's buffers just
    before the call (`variants`); without it, call i uses set i % len(pool) as it is. `keep`: indices of
    timed calls whose output is copied (after the call's timed window) for the judge to re-check: an
    output buffer reused across calls must still hold that call's answer."""
    iteration = _gpu_iteration(device) if device.type == "cuda" else _CpuIteration()
    result = TimingSamples()
    size = len(pool)
    warmup, runs = max(int(warmup), 0), max(int(runs), 1)
    if order is not None and len(order) != warmup + runs:
        raise ValueError(f"an order of {len(order)} calls for {warmup + runs}")

    def inputs(index: int, first: int) -> list:
        if order is None:
            return pool[(index - first) % size]
        slot, variant = order[index] % size, order[index] // size
        if variants is not None:
            variants.apply(slot, variant)
        elif variant:
            raise ValueError("a variant was asked for and there are none")
        return pool[slot]

    previous: _Queued | None = None
    with torch.no_grad():
        for i in range(warmup + runs):
            current = iteration.queue(_call_with(model, inputs(i, warmup if i >= warmup else 0)))
            if i - warmup in keep:
                result.kept.append(_snapshot(current.out))  # queued behind the call, outside its events
            # Call i is queued: only now wait for call i-1 (see the module docstring).
            if previous is not None:
                _record(result, previous, warmup=i - 1 < warmup)
            previous = current
        if previous is not None:
            _record(result, previous, warmup=warmup + runs - 1 < warmup)
        iteration.finish()
    return result


def _record(result: TimingSamples, done: _Queued, *, warmup: bool) -> None:
    device_ms = done.elapsed_ms()
    if warmup:
        result.warmup_runs += 1
    else:
        result.device_ms.append(device_ms)
