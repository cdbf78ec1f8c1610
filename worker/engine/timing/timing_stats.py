"""Summary statistics of timing samples and a confidence interval for the speedup."""

from __future__ import annotations

import math
import statistics

import numpy as np

from contract.results import TimingStats

BOOTSTRAP_ROUNDS = 1000


def summarize(samples_ms: list[float]) -> TimingStats:
    n = len(samples_ms)
    mean = statistics.fmean(samples_ms)
    std = statistics.stdev(samples_ms) if n > 1 else 0.0
    return TimingStats(
        n=n, mean_ms=mean, median_ms=statistics.median(samples_ms), std_ms=std,
        min_ms=min(samples_ms), max_ms=max(samples_ms),
        rse=(std / math.sqrt(n) / mean) if (n > 1 and mean > 0) else math.inf,
    )


def paired_speedup(pairs: list[tuple[list[float], list[float]]], *, seed: int = 0,
                   level: float = 0.95) -> tuple[float, tuple[float, float]]:
    """Speedup from (reference, candidate) blocks timed as neighbours: the median of the pairs' ratios
    median(reference) / median(candidate), and a percentile-bootstrap interval that resamples the
    samples within each block (the pairing already cancels what moved between blocks)."""
    ratios = [statistics.median(ref) / max(statistics.median(cand), 1e-12) for ref, cand in pairs]
    rng = np.random.default_rng(seed)
    resampled = np.empty((BOOTSTRAP_ROUNDS, len(pairs)))
    for column, (ref, cand) in enumerate(pairs):
        ref_arr, cand_arr = np.asarray(ref, dtype=np.float64), np.asarray(cand, dtype=np.float64)
        ref_medians = np.median(rng.choice(ref_arr, size=(BOOTSTRAP_ROUNDS, ref_arr.size)), axis=1)
        cand_medians = np.median(rng.choice(cand_arr, size=(BOOTSTRAP_ROUNDS, cand_arr.size)), axis=1)
        resampled[:, column] = ref_medians / np.maximum(cand_medians, 1e-12)
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(np.median(resampled, axis=1), [tail, 100 - tail])
    return float(statistics.median(ratios)), (float(low), float(high))
