"""Which cores slow a timing core: SMT siblings the guest cannot see, and the host's load as a whole.

    python -m benchmarks.core_interference [--probe-cpu N ...] [--loops 300] [--out FILE.md]

A lane's timing window runs on reserved cores (worker/engine/cpu_plan.py). Nothing the service schedules runs on
them, nor on their SMT siblings as sysfs shows them. A virtual machine's sysfs may show one thread a core while two
of its vCPUs are the two hyperthreads of one host core. A build on such a hidden sibling would slow a timed launch
path, and nothing in the guest would show why. A launch-bound reference's time is its host's time: in a two-H200
soak, `giou_varlen`'s reference (about 30 launches) timed 0.33-0.65 ms across jobs on the same shared judge, each
job with a narrow interval.

Method, per probe core P:
- A probe process pinned to P runs a fixed pure-Python loop `loops` times (a launch path is Python and dispatcher
  code) and reports each loop's time. Its median is the figure.
- One spinner process on each other core k in turn, and the probe's median against P alone right before and right
  after it (its bracket). A spinner is pinned before it says it is ready, and the probe starts only then.
- Then spinners on every other core at once, against its own bracket: what a full host costs P (clock speed under
  a power limit, shared caches and memory).

A core whose spinner alone slows P by `--threshold` (1.15x) or more shares P's execution units. Outside P's sysfs
siblings, it is a hidden sibling: builds must stay off it while P times. The same slowdown from every core at
once, but from none alone, is the host's clock or memory under load, which no placement avoids.

Why a bracket per core, not one baseline: on an idle H100 VM (2026-11-27) the probe's pace flipped between 0.26 and
0.52 ms a loop over time, on every core, with no steal time recorded. Against a baseline from minutes before, a
core measured in a slow spell looked like a 2x sibling, and one in a fast spell "sped the probe up" 2x. A core
whose bracket moved by more than STABLE_LIMIT is reported as unsteady, and named neither way.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from benchmarks.report import finish_report, parser_for, report_head
from worker.engine.cpu_plan import available_cpus, thread_siblings

PROBE = r"""
import json, os, sys, time
os.sched_setaffinity(0, {int(sys.argv[1])})
loops, size = int(sys.argv[2]), int(sys.argv[3])
times = []
for _ in range(loops):
    started = time.perf_counter()
    sum(range(size))
    times.append(time.perf_counter() - started)
print(json.dumps({"cpu": os.sched_getaffinity(0).pop(), "loop_s": times}))
"""

SPINNER = r"""
import os, sys
os.sched_setaffinity(0, {int(sys.argv[1])})
print("ready", flush=True)
while True:
    pass
"""

DEFAULT_THRESHOLD = 1.15
STABLE_LIMIT = 0.10  # the most P alone may move across one bracket for the core inside it to be judged
LOOP_SIZE = 20_000  # about 0.3-1 ms a loop: the order of a launch-bound reference's call


@dataclass(frozen=True)
class ProbeResult:
    probe_cpu: int
    # The probe's medians alone, in order: before the first core's spinner, then after each core's (the last one
    # after every core's at once). Core i's bracket is baseline_ms[i] and baseline_ms[i + 1].
    baseline_ms: list[float]
    alone_ms: dict[int, float]  # core with a spinner -> the probe's median, in the order measured
    all_ms: float  # spinners on every other core, bracketed by the last two baselines

    @property
    def baseline(self) -> float:
        return statistics.median(self.baseline_ms)

    @property
    def drift(self) -> float:
        return max(self.baseline_ms) / min(self.baseline_ms) - 1

    def _bracket(self, index: int) -> tuple[float, float]:
        return self.baseline_ms[index], self.baseline_ms[index + 1]

    def _position(self, cpu: int) -> int:
        return list(self.alone_ms).index(cpu)

    def steady(self, cpu: int) -> bool:
        """Whether the probe alone held its pace across this core's bracket."""
        before, after = self._bracket(self._position(cpu))
        return max(before, after) / min(before, after) - 1 <= STABLE_LIMIT

    def slowdown(self, cpu: int) -> float:
        return self.alone_ms[cpu] / statistics.fmean(self._bracket(self._position(cpu)))

    @property
    def all_slowdown(self) -> float:
        return self.all_ms / statistics.fmean(self.baseline_ms[-2:])


def unsteady_cores(result: ProbeResult) -> list[int]:
    """The cores whose bracket moved too much to judge them."""
    return sorted(cpu for cpu in result.alone_ms if not result.steady(cpu))


def interfering_cores(result: ProbeResult, threshold: float = DEFAULT_THRESHOLD) -> list[int]:
    """The steady cores whose spinner alone slowed the probe by `threshold` or more."""
    return sorted(cpu for cpu in result.alone_ms if result.steady(cpu) and result.slowdown(cpu) >= threshold)


def hidden_siblings(result: ProbeResult, threshold: float = DEFAULT_THRESHOLD) -> list[int]:
    """Interfering cores that sysfs does not list as the probe core's siblings."""
    shown = set(thread_siblings(result.probe_cpu))
    return [cpu for cpu in interfering_cores(result, threshold) if cpu not in shown]


def probe_median_ms(cpu: int, loops: int, size: int = LOOP_SIZE) -> float:
    """The median loop time, in ms, of a fresh probe process pinned to `cpu`."""
    out = subprocess.run([sys.executable, "-c", PROBE, str(cpu), str(loops), str(size)], capture_output=True,
                         text=True, check=True).stdout
    row = json.loads(out.strip().splitlines()[-1])
    if row["cpu"] != cpu:
        raise RuntimeError(f"the probe ran on core {row['cpu']}, not {cpu}")
    return statistics.median(row["loop_s"]) * 1e3


@contextmanager
def spinners(cpus: list[int]) -> Iterator[list[subprocess.Popen]]:
    """A busy process pinned to each of `cpus`, each pinned and running before this yields them; all killed and
    reaped after."""
    processes: list[subprocess.Popen] = []
    try:
        for cpu in cpus:  # started inside the try: a start that fails still ends the ones before it
            processes.append(subprocess.Popen([sys.executable, "-c", SPINNER, str(cpu)], stdout=subprocess.PIPE,
                                              text=True))
        for process in processes:
            assert process.stdout is not None
            if process.stdout.readline().strip() != "ready":
                raise RuntimeError(f"a spinner exited before it was pinned (status {process.wait()})")
        yield processes
    finally:
        for process in processes:
            process.kill()
        for process in processes:
            process.wait()
            if process.stdout is not None:
                process.stdout.close()


def measure(probe_cpu: int, cpus: list[int], loops: int, size: int = LOOP_SIZE) -> ProbeResult:
    others = [cpu for cpu in cpus if cpu != probe_cpu]
    baseline = [probe_median_ms(probe_cpu, loops, size)]
    alone: dict[int, float] = {}
    for cpu in others:
        with spinners([cpu]):
            alone[cpu] = probe_median_ms(probe_cpu, loops, size)
        baseline.append(probe_median_ms(probe_cpu, loops, size))
    with spinners(others):
        all_ms = probe_median_ms(probe_cpu, loops, size)
    baseline.append(probe_median_ms(probe_cpu, loops, size))
    return ProbeResult(probe_cpu, baseline, alone, all_ms)


def report_lines(result: ProbeResult, threshold: float) -> list[str]:
    hidden = hidden_siblings(result, threshold)
    unsteady = unsteady_cores(result)
    lines = [f"## Probe core {result.probe_cpu}", "",
             f"- sysfs siblings: {', '.join(map(str, thread_siblings(result.probe_cpu)))}",
             f"- alone: median {result.baseline:.4f} ms a loop over {len(result.baseline_ms)} measurements, from "
             f"{min(result.baseline_ms):.4f} to {max(result.baseline_ms):.4f} (drift {result.drift:.1%})",
             f"- every other core busy: {result.all_ms:.4f} ms, {result.all_slowdown:.2f}x its bracket",
             f"- cores that slow it by {threshold:.2f}x or more alone: "
             f"{', '.join(map(str, interfering_cores(result, threshold))) or 'none'}",
             f"- **hidden siblings** (not in sysfs): {', '.join(map(str, hidden)) or 'none'}",
             f"- unsteady (the probe alone moved by over {STABLE_LIMIT:.0%} across the core's bracket, so it is not "
             f"judged): {', '.join(map(str, unsteady)) or 'none'}", "",
             "| busy core | probe ms | bracket ms (before, after) | slowdown |", "|---|---|---|---|"]
    for position, cpu in enumerate(result.alone_ms):
        before, after = result.baseline_ms[position], result.baseline_ms[position + 1]
        mark = "" if result.steady(cpu) else " (unsteady)"
        lines.append(f"| {cpu} | {result.alone_ms[cpu]:.4f} | {before:.4f}, {after:.4f} | "
                     f"{result.slowdown(cpu):.2f}x{mark} |")
    return [*lines, ""]


def main() -> int:
    parser = parser_for("benchmarks.core_interference", __doc__)
    parser.add_argument("--probe-cpu", type=int, action="append",
                        help="a core to probe (repeatable; default: the first core this process may use)")
    parser.add_argument("--loops", type=int, default=300)
    parser.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD)
    args = parser.parse_args()
    cpus = list(available_cpus())
    probes = args.probe_cpu or cpus[:1]
    lines = [*report_head("Which cores slow a timing core", "benchmarks.core_interference"),
             f"- cores: {len(cpus)}; a loop is `sum(range({LOOP_SIZE}))`, {args.loops} loops a measurement", ""]
    results = []
    for probe_cpu in probes:
        result = measure(probe_cpu, cpus, args.loops)
        results.append(result)
        lines += report_lines(result, args.threshold)
    print(json.dumps([{"probe_cpu": r.probe_cpu, "baseline_ms": r.baseline_ms, "all_ms": r.all_ms,
                       "alone_ms": r.alone_ms} for r in results]), file=sys.stderr)
    return finish_report(lines, args.out)


if __name__ == "__main__":
    sys.exit(main())
