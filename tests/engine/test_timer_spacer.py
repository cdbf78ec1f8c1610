"""The timer's spacer between calls: a launch-bound call and a device-bound one leave the same time outside
their samples, which is what the supervisor's clock check compares (worker/engine/timing/clock_check.py)."""

from __future__ import annotations

import random
import statistics
import time
from collections import deque

import pytest
import torch

from sandbox_side.timing import spacer, timer, timing_variants
from worker.engine.timing.clock_check import FLOOR_MS
from worker.engine.timing.timing_protocol import CallOrder


def test_the_spacer_covers_the_hosts_recent_work_with_a_margin_and_a_stalled_host_does_not_size_it():
    assert spacer.spacer_ms([]) == spacer.SPACER_FIRST_MS
    steady = [0.020, 0.022, 0.018, 0.021]
    assert spacer.spacer_ms(steady) == pytest.approx(spacer.SPACER_MARGIN * statistics.median(steady)
                                                     + spacer.SPACER_EXTRA_MS)
    assert spacer.spacer_ms(steady) > max(steady)
    # One stalled boundary (the host descheduled for 5 ms) is noise: the median ignores it.
    assert spacer.spacer_ms([*steady, 5.0]) == pytest.approx(spacer.spacer_ms([*steady, 0.022]))
    # A host that stays slow gets a longer spacer, up to the cap.
    assert spacer.spacer_ms([2.0] * 8) == spacer.SPACER_MAX_MS


def test_a_windows_shared_spacer_covers_its_slower_side_and_a_request_is_kept_within_the_cap():
    assert spacer.shared_spacer_ms([0.06, 0.10]) == spacer.spacer_ms([0.10]) > 0.10
    assert spacer.shared_spacer_ms([None, 0.06]) == spacer.spacer_ms([0.06])
    assert spacer.shared_spacer_ms([None, None]) == spacer.SPACER_FIRST_MS
    assert spacer.clamp_ms(-1.0) == 0.0 and spacer.clamp_ms(9.0) == spacer.SPACER_MAX_MS


def _pool_with_variants(device: torch.device, elements: int) -> tuple[list, timer.InputVariants, CallOrder]:
    """Four input sets with variants made as the judge makes them (so every call writes its variant)."""
    generator = torch.Generator().manual_seed(3)
    sets = [[torch.randn(elements, generator=generator)] for _ in range(4)]
    fresh = [[torch.randn(elements, generator=generator)] for _ in range(4)]
    changes = [timing_variants.make_tables(base, new, 3, generator) for base, new in zip(sets, fresh, strict=True)]
    pool = [[tensor.to(device) for tensor in args] for args in sets]
    variants = timer.InputVariants(pool, changes)
    return pool, variants, CallOrder(variants.counts, random.Random(5))


def _outside_ms(model, pool, variants, order, device, runs: int,
                spacer_ms: float) -> tuple[float, float, float, float]:
    """(ms per call outside the samples on the host's clock, median sample ms, host ms per call to queue, the
    host's median cover)."""
    warmup = timer.WARMUP_RUNS
    codes = order.next(warmup + runs)
    torch.cuda.synchronize(device)
    started = time.perf_counter()
    samples = timer.time_model(model, pool, device, runs=runs, warmup=warmup, order=codes, variants=variants,
                               spacer_ms=spacer_ms)
    wall_ms = (time.perf_counter() - started) * 1e3
    median = statistics.median(samples.device_ms)
    assert samples.queue_ms_per_call is not None and samples.cover_ms is not None
    outside = (wall_ms - sum(samples.device_ms) - warmup * median) / (warmup + runs)
    return outside, median, samples.queue_ms_per_call, samples.cover_ms


@pytest.mark.gpu
def test_a_launch_bound_call_and_a_device_bound_one_leave_the_same_time_outside_their_samples():
    device = torch.device("cuda")
    pool, variants, order = _pool_with_variants(device, 1 << 25)

    def device_bound(x):  # a few passes over 128 MiB: the device is behind the host all the time
        return x * torch.sigmoid(x)

    def launch_bound(x):  # the same output after a long host path: the device waits for the host every call
        sum(range(20_000))
        return x * torch.sigmoid(x)

    shared = spacer.SPACER_FIRST_MS

    def neighbours() -> tuple[tuple[float, ...], tuple[float, ...]]:
        # As the supervisor times a pair (worker/engine/timing/timing_protocol.py): one spacer for both sides,
        # sized from both sides' covers in the pair before.
        nonlocal shared
        pair = (_outside_ms(device_bound, pool, variants, order, device, runs=200, spacer_ms=shared),
                _outside_ms(launch_bound, pool, variants, order, device, runs=200, spacer_ms=shared))
        shared = spacer.shared_spacer_ms(side[3] for side in pair)
        return pair

    # One round untimed first, as the supervisor's calibration pair: on an H200 the first round paid first-use
    # costs (a fresh timer's flush buffer and events, the variant writes' first runs), and the device-bound side
    # queued 0.30 ms a call for 0.165 ms of device time.
    neighbours()
    rounds = [neighbours() for _ in range(5)]  # neighbours, as the supervisor times them
    for (_, fast_ms, fast_queue, _), (_, _, slow_queue, _) in rounds:
        # The premise: one side queued its calls faster than the device ran them, the other slower.
        assert fast_queue < fast_ms < slow_queue, rounds
    differences = [slow[0] - fast[0] for fast, slow in rounds]
    print(f"outside-time differences, ms per call: {differences}")  # for the GPU run's record (pytest -rA)
    # Without the spacer the launch-bound side showed its host's work between calls here: 50-100 us per call.
    # With a spacer sized per side, 11-48 us on an H100: its host took longer to queue the next call's writes and
    # flush (covers of 87-111 us against 56-72 us), so its own spacer was longer.
    assert abs(statistics.median(differences)) < FLOOR_MS["cuda"], (differences, rounds)


class _Log(list):
    def op(self, name: str):
        return lambda *args, **kwargs: self.append(name)


@pytest.mark.parametrize("given_ms", [None, 0.12, 9.0])
def test_the_gpu_loop_queues_the_spacer_first_then_the_kept_copy_the_writes_and_the_flush(monkeypatch, given_ms):
    # The GPU loop's order of operations, with the device's calls replaced by a log (no GPU here; the
    # GPU tests above measure what the order achieves): after each call's end event the spacer comes
    # first, then the kept call's copy, the next call's variant writes, its flush and its start event.
    log = _Log()

    class Event:
        def __init__(self, enable_timing: bool = False) -> None:
            self.name = ""

    class EventBase:
        @staticmethod
        def record(event, stream) -> None:
            log.append(event.name)

        @staticmethod
        def elapsed_time(start, end) -> float:
            return 1.0

    class Flush:
        zero_ = log.op("flush")

    gpu = object.__new__(timer._GpuTimer)
    gpu.flush, gpu.events, gpu.covers, gpu.spacer_cycles = Flush(), [], deque(maxlen=spacer.SPACER_HISTORY), 7
    monkeypatch.setattr(timer, "_Event", Event)
    monkeypatch.setattr(timer, "_EventBase", EventBase)
    monkeypatch.setattr(timer, "_gpu_timer", lambda device: gpu)
    monkeypatch.setattr(timer, "_current_stream", lambda: None)
    monkeypatch.setattr(timer, "_cuda_sync", log.op("sync"))
    monkeypatch.setattr(timer, "_device_sleep", lambda cycles: log.append(f"spacer {cycles}"))
    monkeypatch.setattr(timer, "_index_copy", log.op("writes"))
    monkeypatch.setattr(timer, "_snapshot", lambda out: log.append(f"copy {out}") or out)
    for start, end in gpu.pairs(4):
        start.name, end.name = "start", "end"
    pool = [[torch.zeros(8)], [torch.ones(8)]]
    changes = [[(0, torch.tensor([1, 5]), torch.tensor([[0.0, 0.0], [2.0, 3.0]]))],
               [(0, torch.tensor([2]), torch.tensor([[1.0], [4.0]]))]]
    variants = timer.InputVariants(pool, changes)
    calls = iter(range(4))

    def model(x):
        call = next(calls)
        log.append(f"model {call}")
        return call

    samples = timer.time_model(model, pool, torch.device("cuda"), runs=3, warmup=1, keep={1},
                               order=[0, 3, 0, 3], variants=variants, spacer_ms=given_ms)
    first = ["writes", "flush", "start", "model 0", "end"]
    assert log[:len(first)] == first, log
    sizes = [int(entry.split()[1]) for entry in log if entry.startswith("spacer")]
    assert len(sizes) == 3
    if given_ms is None:
        assert sizes[0] == 7  # before any host time was measured: the timer's own first size
    else:  # the supervisor's size for every call, within the cap
        assert sizes == [int(spacer.clamp_ms(given_ms) * timer.SLEEP_CYCLES_PER_MS)] * 3
    assert log[len(first):] == [
        f"spacer {sizes[0]}", "writes", "flush", "start", "model 1", "end",
        f"spacer {sizes[1]}", "writes", "flush", "start", "model 2", "end",
        f"spacer {sizes[2]}", "copy 2", "writes", "flush", "start", "model 3", "end",
        "sync"], log
    assert samples.kept == [2] and samples.device_ms == [1.0] * 3
    # The timer's own size after the first is from the host's times measured at the boundaries before it.
    assert len(gpu.covers) == 3
    assert gpu.spacer_cycles == int(spacer.spacer_ms(gpu.covers) * timer.SLEEP_CYCLES_PER_MS)
    assert samples.cover_ms == statistics.median(gpu.covers)
