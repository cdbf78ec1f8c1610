"""The spacer's size: device time between two timed calls that covers the host's work between them.

The timer (timer.py) holds the stream with a device spin after each call's end event, for about as long as the
host takes to queue the next call's variant writes and L2 flush (its "cover"). The supervisor's clock check
compares the time outside the samples of the reference and the candidate, and the spacer is part of that time
on both sides, so a window's two sides get one size, chosen by the supervisor from both sides' reported covers
(worker/engine/timing/timing_protocol.py). Sized per process instead, the two differed by 11-48 us a call on
an H100 (30 us in the timer's GPU test): a call that leaves the device caught up with the host (launch-bound)
takes longer to queue the next writes and flush (cover median 87-111 us against 56-72 us for a device-bound
call, same loop, same process), and 1.25 times the difference showed as time outside its samples. A size from
untrusted reports gains a candidate nothing: it is device time on both sides alike, capped at SPACER_MAX_MS.
No torch here: the supervisor imports it.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence

# The median of the host's last SPACER_HISTORY covers, times SPACER_MARGIN plus SPACER_EXTRA_MS, at most
# SPACER_MAX_MS (a stalled host is noise, not a size); SPACER_FIRST_MS before any cover was measured.
SPACER_HISTORY = 16
SPACER_MARGIN = 1.25
SPACER_EXTRA_MS = 0.002
SPACER_MAX_MS = 0.3
SPACER_FIRST_MS = 0.05


def spacer_ms(covers: Sequence[float]) -> float:
    """The spacer's device time for the host's recent covers (ms from a spacer's launch to the next flush's)."""
    if not covers:
        return SPACER_FIRST_MS
    return min(SPACER_MAX_MS, SPACER_MARGIN * statistics.median(covers) + SPACER_EXTRA_MS)


def shared_spacer_ms(side_covers: Iterable[float | None]) -> float:
    """One spacer for every side of a window, from each side's median cover in its last block (None: not
    reported): the slowest side's, so that no side's device waits for its host between calls."""
    known = [cover for cover in side_covers if cover is not None]
    return spacer_ms([max(known)]) if known else SPACER_FIRST_MS


def clamp_ms(requested: float) -> float:
    """A requested spacer within [0, SPACER_MAX_MS]."""
    return min(max(float(requested), 0.0), SPACER_MAX_MS)
