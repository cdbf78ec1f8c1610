"""One timing protocol: the reference and the candidate timed in alternating blocks, in one window.

Both sides are timed by the same loop (sandbox_side/timing/timer.py), each in its own process, while the
job holds the device exclusively. A calibration block of each side gives medians and spreads; from
them the supervisor fixes one count of timed calls for both sides: enough for the requested relative
standard error of the mean, at least `timing_min_runs`, at most `timing_max_runs` and at most what
the slower side fits in `timing_budget_s`. That count is split into a few blocks per side, timed as
neighbours in ABBA order (R C, C R, R C, ...), so that clocks, thermal state and other load on the
host move both sides of a pair alike: the speedup is the median of the pairs' ratios, and its
confidence interval comes from resampling within the pairs (timing_stats.paired_speedup). Both blocks of
a pair get one spacer between calls, sized from the covers both sides reported in the pair before
(sandbox_side/timing/spacer.py): the clock check below compares the time outside their samples.

The supervisor clocks every block itself (request sent to reply read): that evidence, which no code
in the sandboxes can edit, is what the candidate's reported samples are checked against
(worker/engine/timing/clock_check.py). A secret sample of the measured calls (`checks`, spread at random over the
pairs, the same number in both blocks of a pair so that both sides' loops do the same copies) keep their
outputs for the judge to re-check, and so does a last candidate block outside the measurement, one call
per input set (KJ-R02).
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

from contract.requests import EvalOptions
from contract.results import TimingStats
from sandbox_side.runtime.failure_kind import FailureKind
from sandbox_side.runtime.messages import Timing
from sandbox_side.timing.spacer import SPACER_FIRST_MS, shared_spacer_ms
from worker.engine.launch import UserFailure
from worker.engine.timing import timing_stats

CALIBRATION_RUNS = 5
CALIBRATION_WARMUP = 3
# Each block starts with one untimed call: the other side's block ran on the device just before.
BLOCK_WARMUP = 1
MIN_BLOCK_RUNS = 5
MAX_PAIRS = 8
# The speedup is the median of the pairs' ratios. How well it repeats from one evaluation to the next is set
# by how those ratios spread from pair to pair (drift, other jobs' load on the host), which only more pairs
# average out: with 8 pairs or fewer, three evaluations of one honest kernel in a batch gave 20.6, 18.1 and
# 11.3 on an H100. More pairs are timed while the median's relative standard error is over TARGET_PAIR_SE,
# up to MAX_PAIRS_TOTAL and EXTRA_BUDGET times the job's timing budget per side.
TARGET_PAIR_SE = 0.004
MAX_PAIRS_TOTAL = 32
EXTRA_BUDGET = 2.0


@dataclass
class TimedBlock:
    """One timing request's samples as the runner reported them, and the supervisor's clock around it."""

    device_ms: list[float]
    warmup: int
    wall_s: float
    tampered: list[str] = field(default_factory=list)
    # The runner's own time per call to queue the block (GPU): diagnostic only, never evidence for a verdict.
    queue_ms: float | None = None
    # The runner's median host time a spacer covered (GPU): sizes the next pair's spacer, nothing else.
    cover_ms: float | None = None

    @classmethod
    def from_reply(cls, reply: Timing, *, runs: int, warmup: int, wall_s: float) -> TimedBlock:
        samples = reply.device_ms
        if len(samples) != runs or not all(math.isfinite(x) and x > 0 for x in samples):
            # No call takes no time (a device event pair alone measures microseconds): zero is a forgery.
            raise UserFailure(FailureKind.protocol, f"timing reply does not hold {runs} finite, positive samples")
        return cls(list(samples), warmup, wall_s, list(reply.tampered), _reported_ms(reply.queue_ms_per_call),
                   _reported_ms(reply.cover_ms))

    @property
    def calls(self) -> int:
        return self.warmup + len(self.device_ms)

    @property
    def median_ms(self) -> float:
        return statistics.median(self.device_ms)


def _reported_ms(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) and value >= 0 else None


# (runs, warmup, keep, spacer_ms) -> the block, `keep` of its timed calls keeping their outputs for the judge
# (at positions the block's runner chooses), `spacer_ms` between its calls; raises UserFailure.
BlockRun = Callable[[int, int, int, float], TimedBlock]


@dataclass
class PairedWindow:
    """The interleaved measurement: calibration, then (reference, candidate) neighbours in timed order."""

    calibration: tuple[TimedBlock, TimedBlock]
    pairs: list[tuple[TimedBlock, TimedBlock]]
    runs_per_block: int

    @property
    def reference_ms(self) -> list[float]:
        return [x for reference, _ in self.pairs for x in reference.device_ms]

    @property
    def candidate_ms(self) -> list[float]:
        return [x for _, candidate in self.pairs for x in candidate.device_ms]

    @property
    def reference_stats(self) -> TimingStats:
        return timing_stats.summarize(self.reference_ms)

    @property
    def candidate_stats(self) -> TimingStats:
        return timing_stats.summarize(self.candidate_ms)

    def queue_ms(self, side: int) -> float | None:
        """Median over the timed pairs of one side's (0: reference, 1: candidate) host time per call to queue
        its block, as its runner reported it (None where none did)."""
        values = [queue for pair in self.pairs if (queue := pair[side].queue_ms) is not None]
        return statistics.median(values) if values else None

    def speedup(self) -> tuple[float, tuple[float, float]]:
        """Median of the pairs' ratios, and its 95% interval."""
        return timing_stats.paired_speedup([(r.device_ms, c.device_ms) for r, c in self.pairs])

    @property
    def candidate_tampered(self) -> list[str]:
        blocks = [self.calibration[1], *(candidate for _, candidate in self.pairs)]
        return [name for block in blocks for name in block.tampered]


def _runs_for_rse(calibration_ms: list[float], options: EvalOptions) -> int:
    stats = timing_stats.summarize(calibration_ms)
    mean = max(stats.mean_ms, 1e-4)
    return math.ceil((stats.std_ms / mean / options.timing_target_rse) ** 2)


def _runs_in_budget(calibration_ms: list[float], options: EvalOptions) -> int:
    median = max(statistics.median(calibration_ms), 1e-4)
    return max(int(options.timing_budget_s * 1e3 / median), 1)


def paired_count(calibrations_ms: list[list[float]], options: EvalOptions) -> int:
    """One count of timed calls for every side: what the noisiest side needs, what the slowest fits."""
    wanted = max(max(_runs_for_rse(ms, options) for ms in calibrations_ms), options.timing_min_runs)
    fits = min(_runs_in_budget(ms, options) for ms in calibrations_ms)
    return max(1, min(wanted, fits, options.timing_max_runs))


def block_plan(total_runs: int) -> tuple[int, int]:
    """(pairs, runs per block) for `total_runs` timed calls per side: at least two pairs, so that the
    pairs' spread is measured, and blocks of at least MIN_BLOCK_RUNS calls where the count allows."""
    pairs = max(2, min(MAX_PAIRS, total_runs // MIN_BLOCK_RUNS))
    return pairs, max(1, math.ceil(total_runs / pairs))


class CallOrder:
    """One side's calls over the timing pool, drawn by the supervisor: input set after input set in turn,
    each call on a variant of its set other than the one that set's buffers held last (variant 0 is the
    set itself); codes as the timer reads them (sandbox_side/timing/timer.time_model): set + sets * variant."""

    def __init__(self, counts: list[int], rng: random.Random) -> None:
        self.counts = counts
        self.rng = rng
        self.current = [0] * len(counts)
        self.position = 0

    def next(self, calls: int) -> list[int]:
        codes = []
        sets = len(self.counts)
        for _ in range(calls):
            slot = self.position % sets
            self.position += 1
            if self.counts[slot] > 1:
                variant = self.rng.randrange(self.counts[slot] - 1)
                self.current[slot] = variant + (variant >= self.current[slot])
            codes.append(slot + sets * self.current[slot])
        return codes

    def decode(self, code: int) -> tuple[int, int]:
        """(input set, variant) of a code."""
        return code % len(self.counts), code // len(self.counts)


def pair_ratio_se(pairs: list[tuple[TimedBlock, TimedBlock]]) -> float:
    """The relative standard error of the median of the pairs' ratios (inf under three pairs)."""
    ratios = [reference.median_ms / max(candidate.median_ms, 1e-12) for reference, candidate in pairs]
    if len(ratios) < 3:
        return math.inf
    mean = statistics.fmean(ratios)
    # The median's standard error is about 1.25 times the mean's for a roughly normal spread.
    return 1.2533 * statistics.stdev(ratios) / max(abs(mean), 1e-12) / math.sqrt(len(ratios))


def _side_seconds(pairs: list[tuple[TimedBlock, TimedBlock]]) -> float:
    """The slower side's device time spent in the timed pairs so far."""
    sides = list(zip(*pairs, strict=True))
    return max(sum(block.calls * block.median_ms for block in side) for side in sides) / 1e3


def spread_checks(checks: int, blocks: int, runs: int, rng: random.Random) -> list[int]:
    """`checks` kept calls spread at random over `blocks` blocks of `runs` timed calls each."""
    counts = [0] * blocks
    for _ in range(min(max(checks, 0), blocks * runs)):
        counts[rng.choice([i for i in range(blocks) if counts[i] < runs])] += 1
    return counts


def measure_paired(reference: BlockRun, candidate: BlockRun, options: EvalOptions, *, checks: int = 0,
                   rng: random.Random | None = None) -> PairedWindow:
    """Calibrate both sides, fix one count, then time them as neighbours in ABBA order; `checks` measured
    calls (in secret: `rng` is the supervisor's) keep their outputs for the judge."""
    rng = rng or random.SystemRandom()
    first = 1 if checks > 0 and rng.random() < 0.5 else 0
    calibration = (reference(CALIBRATION_RUNS, CALIBRATION_WARMUP, first, SPACER_FIRST_MS),
                   candidate(CALIBRATION_RUNS, CALIBRATION_WARMUP, first, SPACER_FIRST_MS))
    spacer = shared_spacer_ms(block.cover_ms for block in calibration)
    total = paired_count([block.device_ms for block in calibration], options)
    pairs, runs = block_plan(total)
    kept = spread_checks(checks - first, pairs, runs, rng)
    timed: list[tuple[TimedBlock, TimedBlock]] = []

    def time_pair(index: int, keep: int) -> None:
        nonlocal spacer
        if index % 2 == 0:
            ref_block = reference(runs, BLOCK_WARMUP, keep, spacer)
            cand_block = candidate(runs, BLOCK_WARMUP, keep, spacer)
        else:
            cand_block = candidate(runs, BLOCK_WARMUP, keep, spacer)
            ref_block = reference(runs, BLOCK_WARMUP, keep, spacer)
        timed.append((ref_block, cand_block))
        spacer = shared_spacer_ms((ref_block.cover_ms, cand_block.cover_ms))

    for index in range(pairs):
        time_pair(index, kept[index])
    # More pairs while their ratios spread too much for the median to repeat (see TARGET_PAIR_SE).
    while (len(timed) < MAX_PAIRS_TOTAL and pair_ratio_se(timed) > TARGET_PAIR_SE
           and _side_seconds(timed) < EXTRA_BUDGET * options.timing_budget_s):
        time_pair(len(timed), 0)
    return PairedWindow(calibration, timed, runs)
