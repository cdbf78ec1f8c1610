"""The throughput benchmark counts what the server finished: its count is checked against the server's
own store (the GPU run counted 0 of 128 while the server had finished 41)."""

from __future__ import annotations

import time

from benchmarks import throughput


def test_the_benchmark_reads_every_job_the_server_finished(tmp_path):
    pairs = throughput.rl_pairs("cpu", None, problems=2, per_problem=2, library_share=1.0,
                                names=["elementwise", "silu"])
    phase = throughput.Phase("rl", "service, embedded")
    throughput.run_batch(phase, pairs, "cpu", dict(throughput.CPU_OPTIONS), tmp_path / "data",
                         deadline=time.monotonic() + 300, broker=None, seed=1, progress=lambda: None)
    assert phase.jobs == 4
    assert phase.server_finished == 4, phase.note
    assert len(phase.outcomes) == 4 and phase.count_error is None
    assert {o.verdict for o in phase.outcomes.values()} <= {"ok", "incorrect"}


def test_a_budget_cut_batch_still_counts_at_least_what_the_server_finished(tmp_path):
    pairs = throughput.rl_pairs("cpu", None, problems=2, per_problem=3, library_share=1.0,
                                names=["elementwise", "silu"])
    phase = throughput.Phase("rl", "service, embedded")
    # A deadline that passes while jobs still run: the wait windows end in states, never in an exception.
    throughput.run_batch(phase, pairs, "cpu", dict(throughput.CPU_OPTIONS), tmp_path / "data",
                         deadline=time.monotonic() + 5, broker=None, seed=1, progress=lambda: None)
    assert phase.server_finished is not None
    assert len(phase.outcomes) >= phase.server_finished and phase.count_error is None
