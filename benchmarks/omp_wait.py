"""What OpenMP's idle threads cost between host steps: a loop of medium torch ops on the host, each followed by
a little host work (as a judge makes input sets, copies and compares), in a child process per wait policy.

    python -m benchmarks.omp_wait [--threads 4] [--ops 300] [--out FILE.md]

libgomp's default keeps a parallel region's threads spinning for a while after it ends; OMP_WAIT_POLICY=PASSIVE
puts them to sleep at once. The sandboxes of a GPU lane run with PASSIVE (worker/engine/launch.py): their timed
work is the device's, and the host was the two-GPU batch's bottleneck.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from benchmarks.report import finish_report, parser_for, report_head

CHILD = r"""
import json, sys, time, torch
ops, gap_s = int(sys.argv[1]), float(sys.argv[2])
torch.manual_seed(0)
wall, cpu = time.monotonic(), time.process_time()
for _ in range(ops):
    values = torch.randn(512, 1024)
    (values * 2 + 1).sum()
    time.sleep(gap_s)  # the host step between two ops
print(json.dumps({"threads": torch.get_num_threads(), "wall_s": time.monotonic() - wall,
                  "cpu_s": time.process_time() - cpu}))
"""


def run(policy: str | None, threads: int, ops: int, gap_s: float) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    env["OMP_NUM_THREADS"] = str(threads)
    if policy is not None:
        env["OMP_WAIT_POLICY"] = policy
    out = subprocess.run([sys.executable, "-c", CHILD, str(ops), str(gap_s)], env=env, capture_output=True,
                         text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> int:
    parser = parser_for("benchmarks.omp_wait", __doc__)
    parser.add_argument("--threads", type=int, default=min(4, os.cpu_count() or 1))
    parser.add_argument("--ops", type=int, default=300)
    parser.add_argument("--gap-s", type=float, default=0.001)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    lines = [*report_head("OpenMP wait policy between host steps", "benchmarks.omp_wait"),
             f"- {args.ops} ops (randn 512x1024, x*2+1, sum), {args.gap_s * 1000:.1f} ms of host work after each, "
             f"{args.threads} threads", "",
             "| policy | run | wall s | CPU s | CPU s / wall s |", "|---|---|---|---|---|"]
    for policy in (None, "PASSIVE"):
        for repeat in range(args.repeats):
            row = run(policy, args.threads, args.ops, args.gap_s)
            lines.append(f"| {policy or 'default'} | {repeat + 1} | {row['wall_s']:.2f} | {row['cpu_s']:.2f} | "
                         f"{row['cpu_s'] / row['wall_s']:.2f} |")
    return finish_report(lines, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
