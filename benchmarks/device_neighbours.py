"""Does another process's device work move a timed kernel's samples?

    python -m benchmarks.device_neighbours --seconds 6 --out FILE.md

This process times one fp32 GEMM (the library's matmul reference, 0.37 ms on an H100) by the timer's own loop
(sandbox_side/timing/timer.time_model) for `--seconds` under each neighbour, another process on the same GPU
doing what the service's background threads do outside a job's stages:
- `none`: nothing;
- `start`: processes started one after another, each initialising CUDA, running one kernel, starting and
  stopping the profiler once (a warm runner's start: kernel_trace.warm_profiler) and exiting (a teardown);
- `alloc`: one process allocating and freeing 2 GiB of device memory in a loop;
- `kernel`: one process running a 1 ms kernel every 20 ms (work of another context).

Two contexts on one GPU without MPS share it by time slices: a neighbour's work can stall the timed kernel for
a slice. The table gives each neighbour's sample median, 99th percentile and maximum, and the share of samples
over 1.5 times the undisturbed median.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from sandbox_side.timing import timer

NEIGHBOURS = {
    "start": r"""
import subprocess, sys
child = "import torch; x = torch.ones(1 << 20, device='cuda'); (x * 2).sum().item()\n" \
        "from torch.profiler import profile, ProfilerActivity\n" \
        "with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]): pass"
while True:
    subprocess.run([sys.executable, "-c", child])
""",
    "alloc": r"""
import torch
while True:
    block = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
    del block
    torch.cuda.empty_cache()
""",
    "kernel": r"""
import time, torch
while True:
    torch.cuda._sleep(1_500_000)
    torch.cuda.synchronize()
    time.sleep(0.02)
""",
}


def measure(seconds: float) -> list[float]:
    device = torch.device("cuda")
    torch.manual_seed(0)
    a, b = torch.randn(4096, 4096, device=device), torch.randn(4096, 4096, device=device)
    pool = [[a, b]]
    samples: list[float] = []
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        samples += timer.time_model(torch.matmul, pool, device, runs=200, warmup=1).device_ms
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    measure(1.0)  # cuBLAS and the flush buffer set up
    rows = []
    baseline = None
    for name in ("none", *NEIGHBOURS):
        neighbour = None
        if name != "none":
            neighbour = subprocess.Popen([sys.executable, "-c", NEIGHBOURS[name]], stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, start_new_session=True)
            time.sleep(3.0)  # its first CUDA set-up is done before the clock starts
        try:
            samples = sorted(measure(args.seconds))
        finally:
            if neighbour is not None:
                subprocess.run(["pkill", "-9", "-g", str(neighbour.pid)], check=False)
                neighbour.wait()
        median = statistics.median(samples)
        baseline = baseline or median
        slow = sum(1 for x in samples if x > 1.5 * baseline) / len(samples)
        rows.append(f"| {name} | {len(samples)} | {median:.4f} | {samples[int(0.99 * (len(samples) - 1))]:.4f} "
                    f"| {samples[-1]:.4f} | {slow:.2%} |")
        print(rows[-1], flush=True)
    args.out.write_text("\n".join([
        f"# A timed GEMM beside another process's device work ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})",
        "", f"- device: {torch.cuda.get_device_name()}",
        f"- command: `python -m benchmarks.device_neighbours {' '.join(sys.argv[1:])}`", "",
        "| neighbour | samples | median ms | p99 ms | max ms | over 1.5x the undisturbed median |",
        "|---|---|---|---|---|---|", *rows, ""]))


if __name__ == "__main__":
    main()
