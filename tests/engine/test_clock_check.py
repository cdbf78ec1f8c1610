"""Claimed times against the supervisor's clock: forged samples are rejected, honest noise is not."""

from __future__ import annotations

import random

from worker.engine.timing.clock_check import RULE, check, measure_checked, outside_ms, rule_hits
from worker.engine.timing.timing_protocol import PairedWindow, TimedBlock

LOOP_MS = 0.12  # per call outside the samples: flush, sync, the loop


def _block(true_ms: float, reported_ms: float, runs: int, rng: random.Random, *, jitter_ms: float = 0.0,
           request_ms: float = 1.0) -> TimedBlock:
    wall_ms = request_ms + (runs + 1) * (true_ms + LOOP_MS) + rng.uniform(0, jitter_ms)
    return TimedBlock([reported_ms * rng.uniform(0.99, 1.01) for _ in range(runs)], 1, wall_ms / 1e3)


def _window(ref_ms: float, cand_true_ms: float, cand_reported_ms: float, *, pairs: int = 8, runs: int = 50,
            jitter_ms: float = 0.0, seed: int = 0) -> PairedWindow:
    rng = random.Random(seed)
    blocks = [(_block(ref_ms, ref_ms, runs, rng, jitter_ms=jitter_ms),
               _block(cand_true_ms, cand_reported_ms, runs, rng, jitter_ms=jitter_ms)) for _ in range(pairs)]
    return PairedWindow(blocks[0], blocks, runs)


def test_outside_time_is_what_the_samples_do_not_account_for():
    block = TimedBlock([1.0, 1.0, 1.0], 1, (1.0 + 4 * 1.5) / 1e3)
    assert abs(outside_ms(block) - (7.0 - 4.0) / 4) < 1e-9


def test_honest_candidates_pass_on_gpu_and_on_a_jittery_cpu():
    for seed in range(20):
        assert check(_window(0.5, 0.05, 0.05, seed=seed), "cuda").passed
        report = check(_window(2.0, 1.0, 1.0, pairs=2, runs=5, jitter_ms=5.0, seed=seed), "cpu")
        assert report.passed, report
        assert check(_window(100.0, 20.0, 20.0, pairs=8, runs=19, jitter_ms=10.0, seed=seed), "cuda").passed
    assert rule_hits(check(_window(0.5, 0.05, 0.05), "cuda")) == []


def test_a_candidate_reporting_a_tenth_of_its_time_is_rejected_with_both_figures():
    report = check(_window(0.5, 0.4, 0.04), "cuda")
    assert not report.passed
    assert report.claimed_ms < 0.05 and report.supervisor_ms > 0.35
    [hit] = rule_hits(report)
    assert hit.rule == RULE and hit.severity == "reject"
    assert "reported 0.0400 ms" in hit.evidence and "allows 0.3" in hit.evidence


def test_forgery_is_caught_even_among_noisy_pairs_on_cpu():
    # A Triton kernel under the interpreter takes ~100 ms; the forger reports a hundredth of it.
    report = check(_window(2.0, 100.0, 1.0, pairs=2, runs=5, jitter_ms=5.0), "cpu")
    assert not report.passed and report.supervisor_ms > 90.0


def _hidden_varying_window(seed: int, hidden_ms: float, cv: float, pairs: int = 8, runs: int = 50) -> PairedWindow:
    """A loaded host: the candidate's real time varies by `cv` from block to block; it reports none of it
    (hidden_ms = 0: an honest candidate with the same varying time, reported)."""
    rng = random.Random(seed)
    blocks = []
    for _ in range(pairs + 1):
        real = 2.0 * rng.uniform(1 - cv, 1 + cv)
        reported = real if hidden_ms == 0 else real - hidden_ms * real / 2.0
        blocks.append((_block(1.0, 1.0, runs, rng, jitter_ms=5.0), _block(real, reported, runs, rng, jitter_ms=5.0)))
    return PairedWindow(blocks[0], blocks[1:], runs)


def test_a_hidden_time_that_varies_with_load_is_still_caught_in_every_pair():
    # The forger reports a thousandth of a time that varies +-60% with the host's load: the differences'
    # spread is then most of the excess itself, and 4 sigmas of it exceed it.
    for seed in range(20):
        report = check(_hidden_varying_window(seed, hidden_ms=2.0 * 0.999, cv=0.6), "cpu")
        assert not report.passed and report.every_pair_over, report
        assert "in every pair" in rule_hits(report)[0].evidence
        honest = check(_hidden_varying_window(seed, hidden_ms=0.0, cv=0.6), "cpu")
        assert honest.passed and not honest.every_pair_over, honest


def test_each_pairs_difference_is_in_the_report_and_the_evidence():
    # 0.36 ms per call hidden over blocks of 51 calls (calibration: the same blocks here).
    report = check(_window(0.5, 0.4, 0.04, pairs=3, runs=50), "cuda")
    assert report.pair_calls == [51] * 4
    assert len(report.pair_differences_ms) == 4
    assert all(abs(difference - 0.36) < 0.02 for difference in report.pair_differences_ms)
    [hit] = rule_hits(report)
    assert "per pair (calls: ms per call beyond the reference's): 51: +0.3" in hit.evidence


def test_a_window_that_fails_is_measured_once_more_and_the_second_decides():
    honest, forged = _window(0.5, 0.05, 0.05), _window(0.5, 0.4, 0.04)
    windows, report, first = measure_checked(iter([forged, honest]).__next__, "cuda")
    assert windows == [forged, honest] and report.passed and first is not None and not first.passed
    windows, report, first = measure_checked(iter([forged, forged]).__next__, "cuda")
    assert len(windows) == 2 and not report.passed and not first.passed
    windows, report, first = measure_checked(iter([honest]).__next__, "cuda")
    assert windows == [honest] and report.passed and first is None
