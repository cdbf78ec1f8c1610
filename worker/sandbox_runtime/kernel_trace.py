"""Record what one forward call ran: every GPU kernel (name, stream, GPU time) with the ATen
operator that launched it, or on CPU every Triton launch and ATen operator (host time).

Runs inside the candidate's sandbox; the supervisor labels the records (worker/attribution.py).
The profiler and the Triton interpreter hook are bound at import, before user code loads.
The events sent back are raw and compact: labelling them is the supervisor's job.
"""

from __future__ import annotations

import secrets
import time

import torch
from torch.profiler import ProfilerActivity, profile, record_function

_profile = profile
_record_function = record_function
_perf_counter_ns = time.perf_counter_ns

# Labels carry a nonce drawn at import, so user code cannot open a range that passes for ours.
_NONCE = secrets.token_hex(6)
FORWARD_LABEL = f"kj_forward_{_NONCE}"
TRITON_LAUNCH_PREFIX = f"kj_triton_launch_{_NONCE}::"
MAX_EVENTS = 20000


def install_triton_interpreter_hook() -> None:
    """Under TRITON_INTERPRET, wrap each kernel launch in a named profiler range.

    On CPU nothing else marks where a Triton kernel ran; the range carries its name."""
    try:
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:
        return
    original = InterpretedFunction.run

    def run(self, *args, **kwargs):
        with _record_function(TRITON_LAUNCH_PREFIX + getattr(self.fn, "__name__", "kernel")):
            return original(self, *args, **kwargs)

    InterpretedFunction.run = run


def trace_forward(model, args: list, device: torch.device) -> dict:
    """Run `model(*args)` once under the profiler and return its raw events.

    On GPU a one-element marker kernel runs on the current stream just before and after the
    call (outside the forward's range): its stream is the timed stream, and the end marker's
    start tells which kernels were still running when forward returned."""
    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    marker = torch.zeros(1, device=device) if cuda else None
    with torch.no_grad(), _profile(activities=activities) as prof:
        if marker is not None:
            marker.add_(1)
        with _record_function(FORWARD_LABEL):
            model(*args)
        if marker is not None:
            marker.add_(1)
            torch.cuda.synchronize(device)
    return _raw_events(prof)


def _raw_events(prof) -> dict:
    """CPU-side frontend events (ATen operators and labelled ranges, each with its correlation id)
    and device activities (each linked to the frontend event that was open when it launched)."""
    cpu, kernels = [], []
    for event in prof.profiler.kineto_results.events():
        name = event.name()
        span = [event.start_ns(), event.start_ns() + event.duration_ns()]
        if event.device_type() == torch.autograd.DeviceType.CUDA:
            kind = "memory" if name.startswith(("Memcpy", "Memset")) else "kernel"
            kernels.append({"name": name[:300], "kind": kind, "stream": int(event.device_resource_id()),
                            "span": span, "linked": int(event.linked_correlation_id())})
        elif event.linked_correlation_id() == 0 and (
                name.startswith("aten::") or name == FORWARD_LABEL or name.startswith(TRITON_LAUNCH_PREFIX)):
            cpu.append({"name": name[:300], "corr": int(event.correlation_id()), "span": span,
                        "tid": int(event.start_thread_id())})
    truncated = len(cpu) + len(kernels) > MAX_EVENTS
    return {"forward_label": FORWARD_LABEL, "launch_prefix": TRITON_LAUNCH_PREFIX,
            "cpu": cpu[:MAX_EVENTS], "kernels": kernels[:MAX_EVENTS], "truncated": truncated}
