"""One timing protocol for reference and candidate: calibrate, fix a count, time it once.

A short calibration run (a few calls) gives a median and a spread. From it the supervisor fixes
the number of timed calls: enough for the requested relative standard error of the mean, at
least `timing_min_runs`, at most `timing_max_runs` and at most what fits in `timing_budget_s`.
The side is then timed once for exactly that many calls (the runner cannot stop early or late),
and for the candidate one snapshot of its last output per input set is taken after the timed
window and re-checked by the judge (KJ-R02). The speedup is the ratio of the medians of those
timed runs; see sandbox_runtime/timer.py for what one sample measures.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from ..models import EvalOptions, TimingStats
from . import timing_stats
from .launch import UserFailure

CALIBRATION_RUNS = 5


@dataclass
class TimedRun:
    """One timing request's samples, as the runner reported them."""

    device_ms: list[float]
    host_ms: list[float]
    wall_s: float
    tampered: list[str] = field(default_factory=list)

    @classmethod
    def from_reply(cls, reply: dict, wall_s: float) -> TimedRun:
        device_ms = reply.get("device_ms")
        if not isinstance(device_ms, list) or not device_ms or not all(isinstance(x, (int, float)) for x in device_ms):
            raise UserFailure("protocol", "timing reply holds no samples")
        host_ms = [float(x) for x in reply.get("host_ms") or [] if isinstance(x, (int, float))]
        return cls([float(x) for x in device_ms], host_ms, wall_s, [str(t) for t in reply.get("tampered") or []])


@dataclass
class Measurement:
    calibration: TimedRun
    timed: TimedRun
    runs: int

    @property
    def stats(self) -> TimingStats:
        return timing_stats.summarize(self.timed.device_ms)

    @property
    def tampered(self) -> list[str]:
        return [*self.calibration.tampered, *self.timed.tampered]


def fixed_count(calibration_ms: list[float], options: EvalOptions) -> int:
    """The number of timed calls, from the calibration's median and spread (see the module docstring)."""
    stats = timing_stats.summarize(calibration_ms)
    median = max(stats.median_ms, 1e-4)
    mean = max(stats.mean_ms, 1e-4)
    for_rse = math.ceil((stats.std_ms / mean / options.timing_target_rse) ** 2)
    fits_budget = max(int(options.timing_budget_s * 1e3 / median), 1)
    wanted = max(for_rse, options.timing_min_runs)
    return max(1, min(wanted, fits_budget, options.timing_max_runs))


def measure(run: Callable[[int, bool], TimedRun], options: EvalOptions) -> Measurement:
    """`run(count, final)` times `count` calls; `final` marks the run whose outputs are kept."""
    calibration = run(CALIBRATION_RUNS, False)
    runs = fixed_count(calibration.device_ms, options)
    return Measurement(calibration, run(runs, True), runs)
