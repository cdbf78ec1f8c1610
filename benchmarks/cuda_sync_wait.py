"""What a process's waits for the GPU cost the host: CUDA's default (spinning) against blocking sync.

    python -m benchmarks.cuda_sync_wait [--processes 4] [--seconds 8] [--size 2048] [--out FILE.md]

Contended: N fresh processes on one GPU, each a loop of a matmul then `.item()` (a judge's or a runner's step:
device work, then the host reads a result), started together; each says how many steps it made and the CPU time
it used. Alone: one process, the round trip of a tiny op and `.item()`, and a matmul timed with CUDA events (what
the timer measures; the wait mode must not move it). Each mode is set through sandbox_side/runtime/cuda_sync.py
before torch starts CUDA, and the table shows the flags the context reports afterwards.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

from benchmarks.report import finish_report, parser_for, report_head

ROOT = Path(__file__).resolve().parents[1]
MODES = ("default", "spin", "blocking")

CHILD = r"""
import json, statistics, sys, time
sys.path.insert(0, sys.argv[5])
from sandbox_side.runtime.cuda_sync import SyncWait, primary_wait, set_primary_wait
mode, seconds, size, phase = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
why_not = None if mode == "default" else set_primary_wait(SyncWait[mode])
import torch
x = torch.randn(size, size, device="cuda")
(x @ x).sum().item()
seen = primary_wait()
result = {"why_not": why_not, "flags": seen.name if seen is not None else None}
print("ready", flush=True)
sys.stdin.readline()
wall, cpu = time.monotonic(), time.process_time()
if phase == "contended":
    steps = 0
    while time.monotonic() - wall < seconds:
        (x @ x).sum().item()
        steps += 1
    result["steps"] = steps
else:
    tiny, trips = torch.zeros(1, device="cuda"), []
    for _ in range(2000):
        start = time.perf_counter()
        tiny.add_(1).item()
        trips.append(time.perf_counter() - start)
    result["round_trip_us"] = statistics.median(trips) * 1e6
    begin, end, timed = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True), []
    for _ in range(50):
        begin.record(); x @ x; end.record(); end.synchronize()
        timed.append(begin.elapsed_time(end))
    result["matmul_ms"] = statistics.median(timed)
result["wall_s"], result["cpu_s"] = time.monotonic() - wall, time.process_time() - cpu
print(json.dumps(result), flush=True)
"""


def run_phase(mode: str, processes: int, seconds: float, size: int, phase: str) -> list[dict]:
    """Start the processes, let each set CUDA up, then release them together; their reports."""
    children = [subprocess.Popen([sys.executable, "-c", CHILD, mode, str(seconds), str(size), phase, str(ROOT)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                for _ in range(processes)]
    for child in children:
        assert child.stdout is not None
        if child.stdout.readline().strip() != "ready":
            raise RuntimeError(f"a {mode} child did not start CUDA")
    for child in children:
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
    reports = []
    for child in children:
        out, _ = child.communicate(timeout=seconds + 300)
        reports.append(json.loads(out.strip().splitlines()[-1]))
    return reports


def main() -> int:
    parser = parser_for("benchmarks.cuda_sync_wait", __doc__)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--size", type=int, default=2048)
    args = parser.parse_args()
    lines = [*report_head("CUDA's wait for the device: spinning or blocking", "benchmarks.cuda_sync_wait"),
             f"- contended: {args.processes} processes on one GPU for {args.seconds:g} s, each a loop of "
             f"({args.size}x{args.size} matmul).sum().item()", "",
             "| mode | context flags | processes | steps | steps / s | CPU s per process-second | CPU ms per step |",
             "|---|---|---|---|---|---|---|"]
    alone = ["", "Alone (one process):", "",
             "| mode | context flags | round trip of a tiny op + .item(), us | matmul by CUDA events, ms |",
             "|---|---|---|---|"]
    for mode in MODES:
        reports = run_phase(mode, args.processes, args.seconds, args.size, "contended")
        steps, cpu_s = sum(r["steps"] for r in reports), sum(r["cpu_s"] for r in reports)
        wall_s = statistics.mean(r["wall_s"] for r in reports)
        flags = reports[0]["flags"] if reports[0]["why_not"] is None else f"not set: {reports[0]['why_not']}"
        lines.append(f"| {mode} | {flags} | {args.processes} | {steps} | {steps / wall_s:.0f} | "
                     f"{cpu_s / (wall_s * args.processes):.2f} | {cpu_s * 1000 / max(steps, 1):.2f} |")
        (solo,) = run_phase(mode, 1, args.seconds, args.size, "alone")
        alone.append(f"| {mode} | {solo['flags']} | {solo['round_trip_us']:.1f} | {solo['matmul_ms']:.4f} |")
    return finish_report(lines + alone, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
