"""Record what one forward call ran: every GPU kernel (name, stream, GPU time) with the ATen
operator that launched it, or on CPU every Triton or Numba launch and ATen operator (host time).

Runs inside the candidate's sandbox; the supervisor labels the records (worker/engine/verdict/attribution.py).
The profiler and the CPU launch hooks (Triton's interpreter, Numba's CUDA simulator) are bound
before user code loads. The events sent back are raw and compact: labelling them is the
supervisor's job.
"""

from __future__ import annotations

import contextlib
import secrets
import time

import numpy
import torch
import torch.autograd.profiler
from torch.profiler import record_function

from sandbox_side.runtime import numba_simulator
from sandbox_side.runtime.harness_output import discarded
from sandbox_side.timing.timer import L2_FLUSH_MIN_BYTES, SLEEP_CYCLES_PER_MS, _device_sleep

# The profiler under torch.profiler.profile: that wrapper's start looks up torch._inductor, which
# imports Inductor (~2 s on CPU, per runner); this one records the same Kineto events without it.
_profile = torch.autograd.profiler.profile
_record_function = record_function
_perf_counter_ns = time.perf_counter_ns
_current_stream = torch.cuda.current_stream
_set_stream = torch.cuda.set_stream
# The frame's operations, bound before user code loads (the hold's device sleep by the timer): a candidate
# that rebinds them (a no-op marker, a hold that does not spin) changes nothing here.
_Event = torch.cuda.Event
_tensor_add_ = torch.Tensor.add_
_tensor_zero_ = torch.Tensor.zero_
_count_nonzero = numpy.count_nonzero

# Labels carry a nonce drawn at import, so user code cannot open a range that passes for ours.
_NONCE = secrets.token_hex(6)
FORWARD_LABEL = f"kj_forward_{_NONCE}"
# On CPU each launch of a candidate's kernel (Triton or Numba) runs inside a range named this + its name.
LAUNCH_PREFIX = f"kj_launch_{_NONCE}::"
MAX_EVENTS = 20000
# The hold on the timed stream ahead of the traced call (trace_forward): long enough that the host has
# launched all of forward's work before it ends. The first try holds HOLD_FIRST_MS; when forward had not
# returned by its end, one more try holds twice the host's time from the hold's launch to forward's return
# (under the profiler) plus a margin, up to HOLD_MAX_MS.
HOLD_FIRST_MS = 20.0
HOLD_MARGIN_MS = 5.0
HOLD_MAX_MS = 1000.0
# On CPU, during the traced call only: the bytes the Triton interpreter's loads read (the elements each
# load's mask lets through) and the host time of Triton launches. The interpreter's time says nothing
# about memory (its cost per element varies 3x with how a kernel indexes); its loads are counted
# instead, as a GPU's DRAM counters would count them (the physics rule KJ-R06, worker/engine/verdict/physics.py).
# A dict: the harness's module-level bindings never change (integrity.py).
_INTERPRETER = {"counting": False, "loaded_bytes": 0, "launch_ns": 0}


def launch_range(kernel_name: str):
    """The profiler range one CPU kernel launch runs in (read back by worker/engine/verdict/attribution.py)."""
    return _record_function(LAUNCH_PREFIX + kernel_name)


def install_cpu_launch_hooks() -> None:
    """On CPU nothing else marks where a kernel ran: wrap each launch of a Triton kernel (under
    TRITON_INTERPRET) and of a Numba kernel (under Numba's CUDA simulator) in a named range."""
    _install_triton_interpreter_hook()
    numba_simulator.install(launch_range)



def _install_triton_interpreter_hook() -> None:
    try:
        from triton.runtime.interpreter import InterpretedFunction, InterpreterBuilder
    except ImportError:
        return
    original = InterpretedFunction.run
    original_load = InterpreterBuilder.create_masked_load

    def run(self, *args, **kwargs):
        started = _perf_counter_ns()
        try:
            with launch_range(getattr(self.fn, "__name__", "kernel")):
                return original(self, *args, **kwargs)
        finally:
            if _INTERPRETER["counting"]:
                _INTERPRETER["launch_ns"] += _perf_counter_ns() - started

    def create_masked_load(self, ptrs, mask, *args, **kwargs):
        loaded = original_load(self, ptrs, mask, *args, **kwargs)
        if _INTERPRETER["counting"]:
            _INTERPRETER["loaded_bytes"] += int(_count_nonzero(mask.data)) * loaded.data.dtype.itemsize
        return loaded

    InterpretedFunction.run = run
    # Every load of the interpreter (plain, masked, block pointers, descriptors) comes through here.
    InterpreterBuilder.create_masked_load = create_masked_load


def _profiler(device: torch.device):
    """CPU operators always; the device's kernels (CUPTI) on a GPU."""
    return _profile(use_cpu=True, use_device="cuda" if device.type == "cuda" else None, use_kineto=True)


@contextlib.contextmanager
def _quiet_profiler(device: torch.device):
    """The profiler, started and stopped with fds 1/2 discarded: Kineto prints its own lines there
    (profiler_start, profiler_stop), which are not the candidate's output. The traced call between
    writes to the candidate's log as usual."""
    prof = _profiler(device)
    with discarded():
        prof.__enter__()
    try:
        yield prof
    finally:
        with discarded():
            prof.__exit__(None, None, None)


def warm_profiler(device: torch.device) -> None:
    """Start and stop the profiler once, before the runner says ready: the first start on a GPU
    sets up CUPTI, which the job's trace would otherwise pay."""
    with _profiler(device):
        pass


def trace_forward(model, args: list, device: torch.device) -> dict:
    """Run `model(*args)` under the profiler and return its raw events.

    On GPU the call is framed the way the timer frames it: a buffer the size of the timer's L2
    flush is zeroed on the current (timed) stream, then a one-element marker kernel runs there
    just before the call and another just after it (both outside the forward's range). The first
    marker's stream is the timed stream; work on another stream that starts before it ends did
    not wait for the timed stream (it overlaps the flush, before the timer's start event), and
    work still running when the second one starts was not joined back when forward returned.
    The second marker goes on the timed stream even if forward left another stream current
    (`current_stream_switched`, evidence too).

    Between the flush and the first marker the timed stream is held on the device (a spin) until
    the host has launched all of forward's work. Under the profiler the host is slower than the
    GPU: without the hold, a short kernel launched on an unwaited side stream starts after the
    first marker has long ended and reads as ordered, although under the timer it overlaps the
    flush. With it, such a kernel starts during the hold, before the first marker. If the host
    was still on its way through forward when the hold ended (a slow host path, a kernel module
    loaded on first launch, which waits for the device, or a synchronisation inside forward), the
    call is traced once more with a hold sized from that path's host time."""
    if device.type != "cuda":
        return _trace_once(model, args, device, hold_ms=0.0)[0]
    frame = _Frame(device)
    frame.warm()
    hold_ms = HOLD_FIRST_MS
    events, covered, host_ms = _trace_once(model, args, device, hold_ms, frame)
    retry_ms = min(HOLD_MAX_MS, 2 * host_ms + HOLD_MARGIN_MS)
    if not covered and retry_ms > hold_ms:
        events, covered, _ = _trace_once(model, args, device, retry_ms, frame)
    return events


class _Frame:
    """The harness's work on the timed stream around the traced call: the flush, the hold and the markers."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.timed = _current_stream(device)
        self.marker = torch.zeros(1, device=device)
        self.flush = torch.empty(L2_FLUSH_MIN_BYTES, dtype=torch.uint8, device=device)
        self.hold_done = _Event()

    def warm(self) -> None:
        """Launch each kernel of the frame once, outside the trace: a kernel's first launch loads its module,
        which waits for the device, and the host would wait out the hold there instead of launching forward."""
        self.open(hold_ms=0.0)
        self.close()
        torch.cuda.synchronize(self.device)

    def open(self, hold_ms: float) -> None:
        _tensor_zero_(self.flush)
        _device_sleep(int(hold_ms * SLEEP_CYCLES_PER_MS))
        self.hold_done.record(self.timed)
        _tensor_add_(self.marker, 1)

    def holding(self) -> bool:
        return not self.hold_done.query()

    def close(self) -> bool:
        """The end marker, on the timed stream; whether forward left another stream current."""
        switched = _current_stream(self.device) != self.timed
        if switched:
            _set_stream(self.timed)
        _tensor_add_(self.marker, 1)
        return switched


def _trace_once(model, args: list, device: torch.device, hold_ms: float,
                frame: _Frame | None = None) -> tuple[dict, bool, float]:
    """One traced call; with it (GPU) whether the hold still ran when forward returned, and the host's time
    from the hold's launch to forward's return in ms."""
    switched = covered = False
    with torch.no_grad(), _quiet_profiler(device) as prof:
        started = _perf_counter_ns()
        if frame is not None:
            frame.open(hold_ms)
        _INTERPRETER.update(counting=frame is None, loaded_bytes=0, launch_ns=0)
        with _record_function(FORWARD_LABEL):
            try:
                model(*args)
            finally:
                _INTERPRETER["counting"] = False
        host_ms = (_perf_counter_ns() - started) / 1e6
        if frame is not None:
            covered = frame.holding()
            switched = frame.close()
            torch.cuda.synchronize(device)
    events = _raw_events(prof)
    events["current_stream_switched"] = switched
    if frame is None:
        events["interpreter"] = {"loaded_bytes": _INTERPRETER["loaded_bytes"], "launch_ns": _INTERPRETER["launch_ns"]}
    return events, covered, host_ms


def _raw_events(prof) -> dict:
    """CPU-side frontend events (ATen operators and labelled ranges, each with its correlation id)
    and device activities (each linked to the frontend event that was open when it launched)."""
    cpu, kernels = [], []
    for event in prof.kineto_results.events():
        name = event.name()
        span = [event.start_ns(), event.start_ns() + event.duration_ns()]
        if event.device_type() == torch.autograd.DeviceType.CUDA:
            kind = "memory" if name.startswith(("Memcpy", "Memset")) else "kernel"
            kernels.append({"name": name[:300], "kind": kind, "stream": int(event.device_resource_id()),
                            "span": span, "linked": int(event.linked_correlation_id())})
        elif event.linked_correlation_id() == 0 and (
                name.startswith("aten::") or name == FORWARD_LABEL or name.startswith(LAUNCH_PREFIX)):
            cpu.append({"name": name[:300], "corr": int(event.correlation_id()), "span": span,
                        "tid": int(event.start_thread_id())})
    truncated = len(cpu) + len(kernels) > MAX_EVENTS
    return {"forward_label": FORWARD_LABEL, "launch_prefix": LAUNCH_PREFIX,
            "cpu": cpu[:MAX_EVENTS], "kernels": kernels[:MAX_EVENTS], "truncated": truncated}
