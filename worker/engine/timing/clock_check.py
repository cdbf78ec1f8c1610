"""The candidate's reported times against the supervisor's own clock.

The candidate's samples come from code in its own process, which it can reach and patch (the timer's
clock, the reply it sends). The supervisor's clock around each timing block cannot be reached from a
sandbox. Per block, the time the samples do not account for, per call, is

    outside = (wall - reported) / calls

where `reported` is the sum of the block's samples plus its warm-up calls at the block's median. For
an honest model, `outside` is the timing loop's own cost (the spacer between calls, the L2 flush, the
device synchronisation, the reply): the same for the reference and the candidate, since both run the
same loop on the same device, whether a side's calls keep the device busy or leave it waiting for the
host (the timer's spacer covers its own host work between calls, sandbox_side/timing/timer.py; without
it a launch-bound side showed that work here and a device-bound side did not). Blocks are timed as
neighbours with the same number of calls, so each pair gives a difference of `outside`; a candidate
that reports less than it ran shows it there, whatever its samples say. The limit is the largest of:
the noise of that difference over the pairs, a share of the reported time, and a floor for what one
request's delivery may vary by (pipes, thread scheduling: it does not grow with the calls in a block, so
it is spread over them). A candidate beyond it is rejected with both figures (KJ-R20). The calibration
blocks are a pair too: both sides ran the same number of calls.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

from contract.results import ClockCheckReport, RuleHit
from worker.engine.timing.timing_protocol import PairedWindow, TimedBlock

RULE = "KJ-R20-timing-disagrees-with-supervisor-clock"
NOISE_SIGMAS = 4.0
# Unexplained time accepted regardless of noise: a share of the reported time, a floor per call, and
# what one request's round trip may vary by, per device (a loaded CPU host varies far more). On a GPU the
# floor holds what still differs between a launch-bound side and a device-bound one: the host's few
# microseconds from a call's end event to the spacer's launch, when the device has caught up with it.
RELATIVE_SLACK = 0.10
FLOOR_MS = {"cuda": 0.005, "cpu": 0.02}
REQUEST_JITTER_MS = {"cuda": 0.25, "cpu": 10.0}
MAD_TO_SIGMA = 1.4826
CONSISTENT_PAIRS = 6  # with fewer, all-positive differences happen to honest candidates too often (1/2^n)


def outside_ms(block: TimedBlock) -> float:
    """Milliseconds per call of the block's wall time that its samples do not account for."""
    reported = sum(block.device_ms) + block.warmup * block.median_ms
    return (block.wall_s * 1e3 - reported) / block.calls


def _robust_sigma(values: list[float]) -> float:
    if len(values) < 2:
        return 0.0
    center = statistics.median(values)
    return MAD_TO_SIGMA * statistics.median(abs(v - center) for v in values)


def check(window: PairedWindow, device: str) -> ClockCheckReport:
    pairs = [window.calibration, *window.pairs]
    reference = [outside_ms(r) for r, _ in pairs]
    candidate = [outside_ms(c) for _, c in pairs]
    differences = [c - r for r, c in zip(reference, candidate, strict=True)]
    excess = statistics.median(differences)
    noise = max(_robust_sigma(differences), _robust_sigma(reference))
    claimed = statistics.fmean(window.candidate_ms)
    device = device if device in FLOOR_MS else "cpu"
    floor = FLOOR_MS[device] + REQUEST_JITTER_MS[device] / min(c.calls for _, c in pairs)
    base = max(RELATIVE_SLACK * claimed, floor)
    limit = max(NOISE_SIGMAS * noise, base)
    # The spread of the differences includes the candidate's own hidden time when it forges: on a loaded
    # host that time varies from block to block, and its spread alone lifted the limit over the forged
    # excess. A hidden time is still there in every pair; an honest candidate's differences straddle zero.
    # So: positive in every one of at least CONSISTENT_PAIRS pairs and beyond the reference's own noise
    # (what an honest candidate's loop varies by) also rejects.
    reference_limit = max(NOISE_SIGMAS * 2 ** 0.5 * _robust_sigma(reference), base)
    every_pair_over = len(differences) >= CONSISTENT_PAIRS and min(differences) > 0 and excess > reference_limit
    return ClockCheckReport(
        pairs=len(pairs), claimed_ms=claimed, supervisor_ms=claimed + max(excess, 0.0),
        reference_outside_ms=statistics.median(reference), candidate_outside_ms=statistics.median(candidate),
        noise_ms=noise, limit_ms=reference_limit if every_pair_over else limit, every_pair_over=every_pair_over,
        pair_calls=[c.calls for _, c in pairs], pair_differences_ms=differences,
        passed=excess <= limit and not every_pair_over,
    )


def measure_checked(measure: Callable[[], PairedWindow], device: str
                    ) -> tuple[list[PairedWindow], ClockCheckReport, ClockCheckReport | None]:
    """(the windows measured, the deciding check, the first check where it failed and a second window decided).

    A window whose candidate blocks took longer than it reported is a forger's every time it is measured, and
    an honest one's only when the host's noise lands on its side (an honest CUDA conv, once in 14 runs under a
    batch on an H100): a second window decides. `measure` keeps outputs in it as in the first, so a candidate
    that counts its blocks gains nothing there."""
    windows = [measure()]
    report = check(windows[0], device)
    if report.passed:
        return windows, report, None
    windows.append(measure())
    return windows, check(windows[1], device), report


def rule_hits(report: ClockCheckReport | None) -> list[RuleHit]:
    if report is None or report.passed:
        return []
    return [RuleHit(
        rule=RULE, severity="reject",
        message="the candidate reported less time than the supervisor's own clock saw it take: its timing "
                "samples were forged or its work escaped the timed window",
        evidence=f"reported {report.claimed_ms:.4f} ms per call; the supervisor's clock allows "
                 f"{report.supervisor_ms:.4f} ms (time outside the samples per call: candidate "
                 f"{report.candidate_outside_ms:.4f} ms, reference {report.reference_outside_ms:.4f} ms, limit "
                 f"{report.limit_ms:.4f} ms over {report.pairs} block pairs"
                 + (", and beyond the reference's noise in every pair)" if report.every_pair_over else ")")
                 + "; per pair (calls: ms per call beyond the reference's): "
                 + ", ".join(f"{calls}: {difference:+.4f}"
                             for calls, difference in zip(report.pair_calls, report.pair_differences_ms, strict=True)),
    )]
