"""Record the raw kernel-trace events of a few known forward calls on a GPU, as JSON.

The attribution tests (tests/engine/test_attribution.py) label these recorded events on CPU, so
the logic is tested against what CUPTI really reports (names, streams, correlation ids).
Run on a GPU host:  python -m benchmarks.record_kernel_traces --out tests/engine/data/kernel_traces.json
"""

from __future__ import annotations

import argparse
import json
import platform

import torch
import triton
import triton.language as tl

from sandbox_side.runtime.kernel_trace import trace_forward


@triton.jit
def silu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, x * tl.sigmoid(x), mask=mask)


def _silu(x: torch.Tensor) -> torch.Tensor:
    y = torch.empty_like(x)
    silu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
    return y


class OwnOnly(torch.nn.Module):
    def forward(self, x):
        return _silu(x)


class ConvPlusEpilogue(torch.nn.Module):
    """nn.Conv2d kept in PyTorch, the activation in an own kernel (a KernelBench level-2 shape)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(16, 32, 3)

    def forward(self, x):
        return _silu(self.conv(x).contiguous())


class MatmulTokenKernel(torch.nn.Module):
    def forward(self, x):
        a = x.view(4096, -1)
        return _silu(torch.matmul(a, a.t()).view(-1)[: x.numel()].contiguous())


class UnjoinedSideStream(torch.nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(20):
                silu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y


class JoinedSideStream(torch.nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        current = torch.cuda.current_stream()
        side = torch.cuda.Stream()
        side.wait_stream(current)
        with torch.cuda.stream(side):
            silu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        current.wait_stream(side)
        return y


class JoinedTwoSideStreams(torch.nn.Module):
    """Two side streams kept on the module, each waiting for the current stream, joined with events."""

    def __init__(self):
        super().__init__()
        self.streams = [torch.cuda.Stream() for _ in range(2)]
        self.done = [torch.cuda.Event() for _ in range(2)]

    def forward(self, x):
        y = torch.empty_like(x)
        half = x.numel() // 2
        current = torch.cuda.current_stream()
        for part, (stream, event) in enumerate(zip(self.streams, self.done, strict=True)):
            stream.wait_stream(current)
            with torch.cuda.stream(stream):
                xs, ys = x[part * half:(part + 1) * half], y[part * half:(part + 1) * half]
                silu_kernel[(triton.cdiv(half, 1024),)](xs, ys, half, BLOCK=1024)
                event.record(stream)
            current.wait_event(event)
        return y


class SecondSideStreamUnjoined(JoinedTwoSideStreams):
    """The same, but the second stream is never joined and runs long (twenty kernels). Before the trace held
    the timed stream, the host took longer to launch the end marker than the GPU took to run them, and this
    case needed a device-side wait ahead of them; now the end marker is queued before any of them runs."""

    def forward(self, x):
        y = torch.empty_like(x)
        half = x.numel() // 2
        current = torch.cuda.current_stream()
        for stream in self.streams:
            stream.wait_stream(current)
        with torch.cuda.stream(self.streams[0]):
            silu_kernel[(triton.cdiv(half, 1024),)](x, y, half, BLOCK=1024)
        with torch.cuda.stream(self.streams[1]):
            for _ in range(20):
                silu_kernel[(triton.cdiv(half, 1024),)](x[half:], y[half:], half, BLOCK=1024)
        current.wait_stream(self.streams[0])
        return y


class SideStreamWithoutWait(torch.nn.Module):
    """Joined back at the end, but the side stream never waits for the current stream. It shows because
    the trace holds the timed stream until forward has launched its work: the side kernel runs during
    the hold, before the start marker."""

    def __init__(self):
        super().__init__()
        self.side = torch.cuda.Stream()

    def forward(self, x):
        y = torch.empty_like(x)
        with torch.cuda.stream(self.side):
            silu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        torch.cuda.current_stream().wait_stream(self.side)
        return y


class SmallSideStreamNeverWaitedNorJoined(torch.nn.Module):
    """The red-team's c3_side_stream_python at its size: one kernel of a few microseconds on a fresh side
    stream that neither waits for the current stream nor is joined back. Without the trace's hold it
    started long after the start marker (the host launches slower under the profiler) and ended long
    before the end marker: nothing showed."""

    def forward(self, x):
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            return _silu(x)


class StreamLeftSwitched(torch.nn.Module):
    """Leaves another stream current; its kernel ran there (off the timed stream) without waiting for the
    timed stream (so it shows as unordered too), and finished before forward returned (the stream is
    synchronised, so that it never shows as escaped)."""

    def forward(self, x):
        stream = torch.cuda.Stream()
        torch.cuda.set_stream(stream)
        y = _silu(x)
        stream.synchronize()
        return y


CASES = {
    "own_only": (OwnOnly, lambda: [torch.randn(1 << 20, device="cuda")]),
    "conv_plus_epilogue": (ConvPlusEpilogue, lambda: [torch.randn(8, 16, 64, 64, device="cuda")]),
    "matmul_token_kernel": (MatmulTokenKernel, lambda: [torch.randn(1 << 24, device="cuda")]),
    "unjoined_side_stream": (UnjoinedSideStream, lambda: [torch.randn(1 << 24, device="cuda")]),
    "joined_side_stream": (JoinedSideStream, lambda: [torch.randn(1 << 22, device="cuda")]),
    "joined_two_side_streams": (JoinedTwoSideStreams, lambda: [torch.randn(1 << 22, device="cuda")]),
    "second_side_stream_unjoined": (SecondSideStreamUnjoined, lambda: [torch.randn(1 << 24, device="cuda")]),
    "side_stream_without_wait": (SideStreamWithoutWait, lambda: [torch.randn(1 << 22, device="cuda")]),
    "small_side_stream_without_wait": (SideStreamWithoutWait, lambda: [torch.randn(4096, device="cuda")]),
    "small_side_stream_never_waited_nor_joined": (SmallSideStreamNeverWaitedNorJoined,
                                                  lambda: [torch.randn(4096, device="cuda")]),
    "stream_left_switched": (StreamLeftSwitched, lambda: [torch.randn(1 << 22, device="cuda")]),
}
# What each case must show (tests/engine/test_attribution.py checks it on a live GPU, and on the
# recorded file for the cases it holds): the stream evidence KJ-R03 reads.
EXPECTED_STREAMS = {
    "own_only": {},
    "joined_side_stream": {"off_stream": True},
    "joined_two_side_streams": {"off_stream": True},
    "unjoined_side_stream": {"off_stream": True, "escaped": True},
    "second_side_stream_unjoined": {"off_stream": True, "escaped": True},
    "side_stream_without_wait": {"off_stream": True, "unordered": True},
    "small_side_stream_without_wait": {"off_stream": True, "unordered": True},
    "small_side_stream_never_waited_nor_joined": {"off_stream": True, "unordered": True},
    "stream_left_switched": {"off_stream": True, "unordered": True, "switched": True},
}


def record(name: str, device: torch.device) -> dict:
    """Warm the case's model up outside the trace, then trace one forward call."""
    model_cls, inputs = CASES[name]
    model = model_cls().to(device)
    call_args = inputs()
    with torch.no_grad():
        model(*call_args)  # compile and warm up outside the trace
    torch.cuda.set_stream(torch.cuda.default_stream(device))  # a case may leave another stream current
    torch.cuda.synchronize()
    traced = trace_forward(model, call_args, device)
    torch.cuda.set_stream(torch.cuda.default_stream(device))
    return traced


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    device = torch.device("cuda", 0)
    traces = {"gpu": torch.cuda.get_device_name(device), "torch": torch.__version__, "triton": triton.__version__,
              "python": platform.python_version(), "cases": {}}
    for name in CASES:
        traces["cases"][name] = record(name, device)
        print(name, len(traces["cases"][name]["kernels"]), "device activities")
    with open(args.out, "w") as handle:
        json.dump(traces, handle)


if __name__ == "__main__":
    main()
