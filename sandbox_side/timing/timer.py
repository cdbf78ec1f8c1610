"""Timing loop, the same for reference and candidate: a fixed number of calls chosen by the supervisor.

What a GPU sample measures: the device time of one forward call on cold L2, from a CUDA event
recorded just before the call to one recorded just after it, on the current stream. Before each
call the L2 cache is flushed by zeroing a buffer larger than it. A block's calls are queued one after
another with no synchronisation between them, as triton.testing.do_bench queues its repetitions: the
device synchronises once, at the block's end, and the events are read then. The host's work for a
call (its launches: 60-130 us for a Triton launch, more on a loaded host; the variant's writes; the
events) is thus hidden behind the device work queued ahead of it whenever the call is device-bound,
as under do_bench. With a synchronisation after every call only the flush (85 us) covered it: a
Triton launch slower than that added its excess to every sample, and a host slowed by a batch's
builds moved one honest Triton GEMM's speedup by 8% in one of five evaluations. A launch-bound call
(host time beyond its device time) still counts its launch gaps, as it does under do_bench.

Between two calls a spacer holds the stream on the device (a spin, launched right after the call's end event)
for about as long as the host takes to queue the next call's variant writes and flush, which must come before
the flush (the writes touch most of an input's cache lines). Without it a launch-bound call, whose device has
caught up with the host, left the device idle while the host queued them, and that idle time lay outside its
samples; a device-bound call's device never waited. The supervisor's clock check
(worker/engine/timing/clock_check.py) compares exactly that time outside the samples between reference and
candidate, so an honest launch-bound candidate against a device-bound reference showed 50-100 us per call more
and was rejected (KJ-R20: two honest multi-stream Triton candidates, every time, on an idle H200). The spacer
is device time outside the samples on both sides alike, so the two differ again only by the spacer's own
launch (a few us), as long as both sides get one size: the supervisor sends it with each block (spacer.py says
why, and how it is sized from the covers each block reports); without one (a standalone caller), the timer
sizes it from this process's recent covers. The call's head start (the flush's time, in which the host
launches the call's kernels) is kept as under do_bench.
Inputs rotate through a pool of distinct input sets, and before each call the supervisor's secret order may
switch the set to another of its variants (InputVariants: the same buffers, values changed at secret
positions), so no call sees the inputs the previous call on its buffers saw: a cache keyed on the
buffers or on a few sampled values returns a stale output, and the outputs of a secret sample of calls
are kept for the judge to check against the reference's for the same variant (KJ-R02). The variant's
writes and a kept call's copies are queued on the call's stream, so they take effect in call order.
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

import statistics
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from sandbox_side.timing.spacer import SPACER_FIRST_MS, SPACER_HISTORY, clamp_ms, spacer_ms

_perf_counter = time.perf_counter
# torch's CUDA bindings, bound before any user code runs (None in a torch built without CUDA: used on a GPU only).
_EventBase: Any = getattr(torch._C, "_CudaEventBase", None)
_cuda_sync: Any = getattr(torch._C, "_cuda_synchronize", None)
_current_stream = torch.cuda.current_stream
_Event = torch.cuda.Event
_index_copy = torch.Tensor.index_copy_
# torch.cuda._sleep looks torch._C._cuda_sleep up per call: bound here, before user code.
_device_sleep = getattr(torch._C, "_cuda_sleep", torch.cuda._sleep)

WARMUP_RUNS = 3
L2_FLUSH_MIN_BYTES = 256 * 1024 * 1024
# Device sleeps are given in cycles: these assume a 2 GHz SM clock (a slower clock only holds longer).
SLEEP_CYCLES_PER_MS = 2_000_000


@dataclass
class TimingSamples:
    device_ms: list[float] = field(default_factory=list)
    warmup_runs: int = 0
    # Copies of the outputs of the calls the supervisor asked to keep, in call order (re-checked by the judge).
    kept: list[object] = field(default_factory=list)
    # GPU: the host's time per call to queue the block (first call queued to last end event recorded). Over
    # the device's time per call (sample and flush), the calls were launch-bound: their samples hold launch gaps.
    queue_ms_per_call: float | None = None
    # GPU: the median host time (ms) from a spacer's launch to the next call's flush (what a spacer covers): the
    # supervisor sizes the next blocks' spacer from both sides' (spacer.py).
    cover_ms: float | None = None


class InputVariants:
    """Variants of the timing pool's input sets, written into the pool's own buffers before a call.

    Per slot, per changed input: flat positions (secret, chosen by the judge) and a table of values, one
    row per variant (row 0: the set's own values). Switching variants writes one row at those positions:
    a few device writes queued before the call's L2 flush, outside the timed window."""

    def __init__(self, pool: list[list], slots: list[list[tuple[int, torch.Tensor, torch.Tensor]]]) -> None:
        if len(slots) != len(pool):
            raise ValueError(f"variants for {len(slots)} input sets, the pool holds {len(pool)}")
        self.writes: list[list[list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]]] = []
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
            self.counts.append(count or 1)
            # One (buffer, positions, row) per changed input and variant, made once: the timed loop's host
            # work between two calls is a single index_copy_ per input.
            self.writes.append([[(flat, positions, table[variant]) for flat, positions, table in writes]
                                for variant in range(count or 1)] if writes else [])

    def apply(self, slot: int, variant: int) -> None:
        if self.writes[slot]:
            for flat, positions, row in self.writes[slot][variant]:
                _index_copy(flat, 0, positions, row)


class _GpuTimer:
    """The flush buffer, a reusable pool of event pairs (one pair per call of a block), and the spacer's size
    with the host times it is sized from (kept across blocks: a block's first spacer needs them)."""

    def __init__(self, device: torch.device) -> None:
        props = torch.cuda.get_device_properties(device)
        l2_bytes = int(getattr(props, "L2_cache_size", 0) or 0)
        self.flush = torch.empty(max(4 * l2_bytes, L2_FLUSH_MIN_BYTES), dtype=torch.uint8, device=device)
        self.events: list[tuple[Any, Any]] = []
        self.covers: deque[float] = deque(maxlen=SPACER_HISTORY)
        self.spacer_cycles = int(SPACER_FIRST_MS * SLEEP_CYCLES_PER_MS)

    def covered(self, *host_ms: float) -> None:
        """More host times between a spacer's launch and the next flush's; the next spacer's size."""
        self.covers.extend(host_ms)
        self.spacer_cycles = int(spacer_ms(self.covers) * SLEEP_CYCLES_PER_MS)

    def pairs(self, count: int) -> list[tuple[Any, Any]]:
        while len(self.events) < count:
            self.events.append((_Event(enable_timing=True), _Event(enable_timing=True)))
        return self.events[:count]


_gpu_timers: dict[torch.device, _GpuTimer] = {}


def _gpu_timer(device: torch.device) -> _GpuTimer:
    """One flush buffer per process, not one per timing pass."""
    if device not in _gpu_timers:
        _gpu_timers[device] = _GpuTimer(device)
    return _gpu_timers[device]


def _snapshot(out: object) -> object:
    if type(out) is torch.Tensor:
        return torch.Tensor.clone(out)
    if isinstance(out, (tuple, list)):
        return type(out)(_snapshot(item) for item in out)
    return out


def time_model(model: Callable[..., object], pool: list[list], device: torch.device, *, runs: int,
               warmup: int = WARMUP_RUNS, keep: frozenset[int] | set[int] = frozenset(),
               order: list[int] | None = None, variants: InputVariants | None = None,
               spacer_ms: float | None = None) -> TimingSamples:
    """Time `runs` calls of `model` over the input pool, after `warmup` untimed calls.

    The supervisor times one block of calls per request and alternates the reference's blocks with the
    candidate's (worker/engine/timing/timing_protocol.py); its own clock around each request is the evidence
    the samples reported here are checked against (worker/engine/timing/clock_check.py).

    `order` (the supervisor's, one entry per call, warm-up calls first): call i uses input set
    `order[i] % len(pool)` in its variant `order[i] // len(pool)`, written into the set's buffers just
    before the call (`variants`); without it, call i uses set i % len(pool) as it is. `keep`: indices of
    timed calls whose output is copied (after the call's timed window) for the judge to re-check: an
    output buffer reused across calls must still hold that call's answer. `spacer_ms`: the supervisor's spacer
    for every call of the block, the same for both sides of its window (spacer.py); None: this process's own."""
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

    total = warmup + runs
    with torch.no_grad():
        if device.type == "cuda":
            gpu = _gpu_timer(device)
            pairs = gpu.pairs(total)
            fixed_cycles = None if spacer_ms is None else int(clamp_ms(spacer_ms) * SLEEP_CYCLES_PER_MS)
            covers: list[float] = []
            queued_from = _perf_counter()
            kept_out: list[object] = []  # the previous call's output, when it is kept
            for i in range(total):
                if i:
                    # First after the previous call's end event: the spacer, over the host's work below.
                    _device_sleep(gpu.spacer_cycles if fixed_cycles is None else fixed_cycles)
                    covered_from = _perf_counter()
                    if kept_out:
                        result.kept.append(_snapshot(kept_out.pop()))  # before the next call's writes
                args = inputs(i, warmup if i >= warmup else 0)
                start, end = pairs[i]
                stream = _current_stream()
                gpu.flush.zero_()
                if i:
                    covers.append((_perf_counter() - covered_from) * 1e3)  # under the flush's device time
                    if fixed_cycles is None:  # sized as it goes; a given size needs no work between calls
                        gpu.covered(covers[-1])
                _EventBase.record(start, stream)
                out = model(*args)
                _EventBase.record(end, stream)
                if i - warmup in keep:
                    kept_out.append(out)
            if kept_out:
                result.kept.append(_snapshot(kept_out.pop()))
            if fixed_cycles is not None:
                gpu.covered(*covers)
            result.queue_ms_per_call = (_perf_counter() - queued_from) * 1e3 / total
            result.cover_ms = statistics.median(covers) if covers else None
            _cuda_sync()
            device_ms = [_EventBase.elapsed_time(start, end) for start, end in pairs]
        else:
            device_ms = []
            for i in range(total):
                args = inputs(i, warmup if i >= warmup else 0)
                t0 = _perf_counter()
                out = model(*args)
                device_ms.append((_perf_counter() - t0) * 1e3)
                if i - warmup in keep:
                    result.kept.append(_snapshot(out))
    result.warmup_runs, result.device_ms = warmup, device_ms[warmup:]
    return result
