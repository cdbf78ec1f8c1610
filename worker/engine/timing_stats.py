"""Summary statistics of timing samples and a confidence interval for the speedup."""

from __future__ import annotations

import math
import statistics

import numpy as np

from ..models import TimingStats

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


def speedup_ci(reference_ms: list[float], candidate_ms: list[float], *, seed: int = 0,
               level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap of median(reference) / median(candidate)."""
    rng = np.random.default_rng(seed)
    ref = np.asarray(reference_ms, dtype=np.float64)
    cand = np.asarray(candidate_ms, dtype=np.float64)
    ref_medians = np.median(rng.choice(ref, size=(BOOTSTRAP_ROUNDS, ref.size)), axis=1)
    cand_medians = np.median(rng.choice(cand, size=(BOOTSTRAP_ROUNDS, cand.size)), axis=1)
    ratios = ref_medians / np.maximum(cand_medians, 1e-12)
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(ratios, [tail, 100 - tail])
    return (float(low), float(high))
