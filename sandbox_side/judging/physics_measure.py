"""What reading a problem's inputs costs on this device, measured by the judge (trusted code, in its sandbox).

The physics rule (KJ-R06, worker/engine/verdict/physics.py) rejects a candidate whose forward took less time than
reading its inputs once allows. Everything it needs about the device and the problem is measured here:

- **Copy bandwidth**, on the device itself: a device-to-device copy of a buffer larger than the L2 (the
  timer's flush size) on a GPU, a host-memory copy on CPU (the faster of a copy larger than the caches
  and one that stays in them, each on the wall clock or the process's CPU time, whichever is shorter, so
  that other processes' load does not lower it); bytes read plus bytes written over the fastest of a few
  copies.
- **Which input bytes must be read**: the bytes of the inputs the reference's output depends on. An
  input is not counted when it is not a tensor or is 0-d (a hyperparameter), smaller than
  MIN_INPUT_BYTES (weights, biases, small index tensors), holds the same values in another draw of
  get_inputs() (a constant the candidate may know), or when replacing it with another draw's values
  leaves the reference's output unchanged beyond its own run-to-run noise (unused, shape-only, or an
  early exit such as `any`). Of the others only the parts whose replacement changes the output count:
  a 4 x 4 grid of blocks over the last two dimensions and 4 slabs along each leading dimension, each
  replaced with another draw's values in turn (a slice `x[:, :10]`, a triangular mask, structural
  zeros: the blocks the output does not depend on are not counted).
- **The reference's own time** on one call (cold L2 on a GPU, as the timer measures it): the rule does
  not apply where the reference itself is faster than reading the counted bytes (it reads less than
  the grid could tell; the rule must never reject the reference).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from sandbox_side.timing import timer

MIB = 1024 * 1024
# Host copies: one larger than a CPU's last-level cache, one that stays in its caches (small inputs are
# read from there, faster than from memory): the faster of the two counts.
CPU_COPY_BYTES = (64 * MIB, MIB)
COPY_REPEATS = 5
# Inputs smaller than this are not counted (nor tested).
MIN_INPUT_BYTES = 64 * 1024
# Below this many bytes of inputs in all the rule does not apply, and nothing is measured for it.
MIN_TOTAL_BYTES = MIB
GRID = 4
# Reference calls spent on the replacement test, in all and in time.
MAX_INFLUENCE_CALLS = 48
INFLUENCE_BUDGET_S = 2.0
# A replacement changes the output when it moves it by more than this many times the reference's own
# run-to-run difference on the same inputs (0 for a deterministic reference: any bit counts).
NOISE_FACTOR = 2.0
COMPARE_CHUNK = 1 << 24

Call = Callable[[list], list[torch.Tensor]]


# -- bandwidth ------------------------------------------------------------------------------
def copy_bandwidth_gbps(device: torch.device) -> float:
    """GB/s moved (read + written) by the fastest of a few copies on the device (see the module docstring)."""
    if device.type == "cuda":
        return _device_copy_gbps(device)
    return max(_host_copy_gbps(size) for size in CPU_COPY_BYTES)


def _device_copy_gbps(device: torch.device) -> float:
    """A device-to-device copy of a buffer the size of the timer's L2 flush (4x the L2, at least 256 MiB)."""
    props = torch.cuda.get_device_properties(device)
    size = max(4 * int(getattr(props, "L2_cache_size", 0) or 0), timer.L2_FLUSH_MIN_BYTES)
    src = torch.ones(size, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    dst.copy_(src)
    best = float("inf")
    for _ in range(COPY_REPEATS):
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3)
    del src, dst
    torch.cuda.empty_cache()
    return 2 * size / max(best, 1e-9) / 1e9


def _host_copy_gbps(size: int) -> float:
    src = torch.ones(size, dtype=torch.uint8)
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = float("inf")
    for _ in range(COPY_REPEATS):
        wall, cpu = time.perf_counter(), time.process_time()
        dst.copy_(src)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        # The CPU time is what an unloaded host takes for one thread's copy, the wall time what several
        # threads take: the faster of the two, so that other processes' load never lowers it.
        best = min(best, wall, cpu if cpu > 0 else wall)
    return 2 * size / max(best, 1e-9) / 1e9


# -- the reference ---------------------------------------------------------------------------
def reference_ms(model: Callable[..., object], args: list, device: torch.device) -> float:
    """The fastest of three calls, timed as the timer times them (cold L2 on a GPU, host clock on CPU)."""
    samples = timer.time_model(model, [args], device, runs=3, warmup=1)
    return min(samples.device_ms)


def _distance(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    """The largest elementwise difference between two outputs (inf: shapes, dtypes or NaN/Inf differ)."""
    if len(a) != len(b):
        return float("inf")
    worst = 0.0
    for x, y in zip(a, b, strict=True):
        if x.shape != y.shape or x.dtype != y.dtype:
            return float("inf")
        flat_x, flat_y = x.reshape(-1), y.reshape(-1)
        for lo in range(0, flat_x.numel(), COMPARE_CHUNK):
            cx, cy = flat_x[lo:lo + COMPARE_CHUNK], flat_y[lo:lo + COMPARE_CHUNK]
            if not (cx.is_floating_point() or cx.is_complex()):
                if not torch.equal(cx, cy):
                    return float("inf")
                continue
            finite_x, finite_y = torch.isfinite(cx), torch.isfinite(cy)
            if not torch.equal(finite_x, finite_y) or not torch.equal(cx[~finite_x], cy[~finite_y]):
                return float("inf")
            if bool(finite_x.any()):
                worst = max(worst, float((cx[finite_x].double() - cy[finite_y].double()).abs().max()))
    return worst


def _bounds(size: int, parts: int) -> list[tuple[int, int]]:
    parts = max(1, min(parts, size))
    return [(size * k // parts, size * (k + 1) // parts) for k in range(parts)]


def _blocks(shape: torch.Size) -> list[tuple[str, list[tuple[tuple, int]]]]:
    """The replacement tests of one input: a grid over its last two dimensions (or 16 pieces of a 1-D
    input) and slabs along each leading dimension; each test is a list of (index, elements)."""
    ndim = len(shape)
    tests: list[tuple[str, list[tuple[tuple[slice, ...], int]]]] = []
    if ndim == 1:
        tests.append(("pieces", [((slice(lo, hi),), hi - lo) for lo, hi in _bounds(shape[0], GRID * GRID)]))
        return tests
    lead = [slice(None)] * (ndim - 2)
    rest = 1
    for size in shape[:-2]:
        rest *= size
    grid = [((*lead, slice(r0, r1), slice(c0, c1)), rest * (r1 - r0) * (c1 - c0))
            for r0, r1 in _bounds(shape[-2], GRID) for c0, c1 in _bounds(shape[-1], GRID)]
    tests.append(("grid", grid))
    for dim in range(ndim - 2):
        other = shape.numel() // max(shape[dim], 1)
        slabs = [((*[slice(None)] * dim, slice(lo, hi)), other * (hi - lo)) for lo, hi in _bounds(shape[dim], GRID)]
        tests.append((f"dim {dim}", slabs))
    return tests


def _describe(arg: torch.Tensor) -> str:
    return f"{str(arg.dtype).removeprefix('torch.')}{list(arg.shape)}"


class _Budget:
    def __init__(self, call_s: float) -> None:
        self.calls = min(MAX_INFLUENCE_CALLS, int(INFLUENCE_BUDGET_S / max(call_s, 1e-6)))

    def take(self, n: int) -> bool:
        if n > self.calls:
            return False
        self.calls -= n
        return True


def input_reads(call: Call, args: list, other: list | None, call_s: float) -> list[dict]:
    """Per input: its bytes, the bytes counted as read, and why the rest is not (see the module docstring).

    `call(args)` runs the reference on copies of `args` on the device and returns its outputs; `other` is
    another draw of get_inputs(), whose values replace the tested parts; `call_s` is one call's time (it
    sizes the test's budget)."""
    budget = _Budget(call_s)
    baseline: list = []  # [outputs, noise] once measured

    def changed(index: int, replaced: torch.Tensor) -> bool:
        trial = list(args)
        trial[index] = replaced
        try:
            out = call(trial)
        except torch.OutOfMemoryError:
            raise
        except Exception:  # noqa: BLE001 - the reference fails on these values: it reads them
            return True
        distance = _distance(baseline[0], out)
        return distance > 0 and distance > NOISE_FACTOR * baseline[1]

    records = []
    for index, arg in enumerate(args):
        record: dict = {"index": index, "bytes": 0, "counted": 0}
        records.append(record)
        record["note"] = _untested(arg, other[index] if other is not None and index < len(other) else None)
        if record["note"] is not None:
            if isinstance(arg, torch.Tensor):
                record["input"], record["bytes"] = _describe(arg), arg.numel() * arg.element_size()
            continue
        assert isinstance(arg, torch.Tensor) and other is not None
        nbytes = arg.numel() * arg.element_size()
        record["input"], record["bytes"] = _describe(arg), nbytes
        alt = other[index].to(arg.device)
        if not baseline:
            if not budget.take(2):
                record["note"] = "not tested: the reference is too slow for the test's budget"
                continue
            outputs = call(args)
            baseline.extend([outputs, _distance(outputs, call(args))])
        if baseline[1] == float("inf"):
            record["note"] = "not tested: the reference's outputs differ in shape or NaNs between two calls"
            continue
        if not budget.take(1):
            record["note"] = "not tested: the reference is too slow for the test's budget"
            continue
        if not changed(index, alt.clone()):
            record["note"] = "replacing its values does not change the reference's output"
            continue
        fraction, parts = 1.0, []
        for name, blocks in _blocks(arg.shape):
            if len(blocks) < 2:
                continue
            if not budget.take(len(blocks)):
                parts.append(f"{name}: not tested (budget)")
                continue
            read = []
            for where, elements in blocks:
                mixed = arg.clone()
                mixed[where] = alt[where]
                if changed(index, mixed):
                    read.append(elements)
            fraction *= sum(read) / max(arg.numel(), 1)
            if len(read) < len(blocks):
                parts.append(f"{name}: {len(read)} of {len(blocks)} blocks change the output")
        record["counted"] = int(round(nbytes * fraction))
        record["note"] = "; ".join(parts) or None
    return records


def _untested(arg: object, alt: object) -> str | None:
    """Why an input is not counted without running anything, or None."""
    if not isinstance(arg, torch.Tensor):
        return "not a tensor"
    if arg.dim() == 0:
        return "0-d: a hyperparameter"
    if arg.numel() * arg.element_size() < MIN_INPUT_BYTES:
        return f"under {MIN_INPUT_BYTES} bytes"
    if not isinstance(alt, torch.Tensor) or alt.shape != arg.shape or alt.dtype != arg.dtype:
        return "another draw of get_inputs() has another shape or dtype: not tested"
    if torch.equal(alt.to(arg.device), arg):
        return "the same values in another draw of get_inputs(): a constant"
    return None


def measure(model: Callable[..., object], prepare: Callable[[list], list], args: list, other: list | None,
            device: torch.device, measures: list[str]) -> dict:
    """Everything the physics rule needs about this problem and device (worker/engine/verdict/physics.py).

    `model` is the reference, `prepare(args)` a fresh copy of an input set on the device; `measures` the
    bandwidths to measure ("copy": the supervisor keeps the fastest per device)."""
    result: dict = {"bandwidth": {}}
    if device.type == "cuda":
        # Inputs that fit in L2 can be read from it faster than the copy bandwidth (HBM) allows: a traced call,
        # whose inputs may still be in L2, says nothing about reading them from memory (worker/engine/verdict/physics.py).
        result["l2_bytes"] = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 0)
    if "copy" in measures:
        try:
            result["bandwidth"]["copy_gbps"] = copy_bandwidth_gbps(device)
        except torch.OutOfMemoryError:  # the device is full: the supervisor may know the bandwidth already
            result["bandwidth_error"] = "out of device memory for the copy"
    total = sum(a.numel() * a.element_size() for a in args if isinstance(a, torch.Tensor))
    if total < MIN_TOTAL_BYTES:
        result["skipped"] = f"its inputs hold {total} bytes, under {MIN_TOTAL_BYTES}: launch-bound"
        return result

    def call(arg_set: list) -> list[torch.Tensor]:
        with torch.no_grad():
            out: Any = model(*prepare(arg_set))
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return list(out) if isinstance(out, (tuple, list)) else [out]

    started = time.perf_counter()
    call(args)
    call_s = time.perf_counter() - started
    result["reference_ms"] = reference_ms(model, prepare(args), device)
    result["inputs"] = input_reads(call, args, other, call_s)
    return result
