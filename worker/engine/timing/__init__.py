"""Timing as the supervisor runs it: the paired protocol (timing_protocol.py), its statistics (timing_stats.py),
the forged-clock check (clock_check.py), and the per-problem baselines (baselines.py, compile_baseline.py,
baseline_worker.py). The timed loop itself runs in the sandbox (sandbox_side/timing/timer.py)."""
