"""One timing protocol: the count is fixed by the supervisor from a calibration run."""

from __future__ import annotations

from worker.engine.timing_protocol import CALIBRATION_RUNS, TimedRun, fixed_count, measure
from worker.models import EvalOptions


def test_the_count_fits_the_budget_and_the_bounds():
    options = EvalOptions(timing_budget_s=1.0, timing_min_runs=10, timing_max_runs=2000, timing_target_rse=0.005)
    assert fixed_count([1.0] * 5, options) == 10  # steady: the minimum is enough
    assert fixed_count([0.001] * 5, options) == 10
    noisy = [1.0, 2.0, 1.0, 2.0, 1.0]  # cv ~0.35: ~5000 runs wanted, 1 s budget fits ~1000
    assert fixed_count(noisy, options) == 1000
    assert fixed_count([500.0] * 5, options) == 2  # a slow model: what fits the budget, at least one
    assert fixed_count(noisy, options.model_copy(update={"timing_max_runs": 50})) == 50


def test_measure_calibrates_then_times_the_fixed_count_once_keeping_that_run():
    calls = []

    def run(runs: int, final: bool) -> TimedRun:
        calls.append((runs, final))
        return TimedRun([2.0] * runs, [], 0.0, ["time.perf_counter"] if final else [])

    measured = measure(run, EvalOptions(timing_min_runs=12))
    assert calls == [(CALIBRATION_RUNS, False), (12, True)]
    assert measured.runs == 12 and measured.stats.n == 12 and measured.tampered == ["time.perf_counter"]
