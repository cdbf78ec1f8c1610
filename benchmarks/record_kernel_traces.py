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

from worker.engine.sandbox_runtime.kernel_trace import trace_forward


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


CASES = {
    "own_only": (OwnOnly, lambda: [torch.randn(1 << 20, device="cuda")]),
    "conv_plus_epilogue": (ConvPlusEpilogue, lambda: [torch.randn(8, 16, 64, 64, device="cuda")]),
    "matmul_token_kernel": (MatmulTokenKernel, lambda: [torch.randn(1 << 24, device="cuda")]),
    "unjoined_side_stream": (UnjoinedSideStream, lambda: [torch.randn(1 << 24, device="cuda")]),
    "joined_side_stream": (JoinedSideStream, lambda: [torch.randn(1 << 22, device="cuda")]),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    device = torch.device("cuda", 0)
    traces = {"gpu": torch.cuda.get_device_name(device), "torch": torch.__version__, "triton": triton.__version__,
              "python": platform.python_version(), "cases": {}}
    for name, (model_cls, inputs) in CASES.items():
        model = model_cls().to(device)
        call_args = inputs()
        with torch.no_grad():
            model(*call_args)  # compile and warm up outside the trace
        torch.cuda.synchronize()
        traces["cases"][name] = trace_forward(model, call_args, device)
        print(name, len(traces["cases"][name]["kernels"]), "device activities")
    with open(args.out, "w") as handle:
        json.dump(traces, handle)


if __name__ == "__main__":
    main()
