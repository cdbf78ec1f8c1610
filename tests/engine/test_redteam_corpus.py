"""Every red-team and honest case that runs without a GPU goes through the whole engine here.

Attacks must be caught (rejected, flagged, or failed with a non-ok verdict); honest kernels must
be accepted (a flag only where the manifest expects one). The GPU cases run on the device:
benchmarks/results/redteam_gpu_*.md.
"""

from __future__ import annotations

import pytest

from benchmarks.redteam.corpus import load_corpus
from benchmarks.redteam.runner import CAUGHT, HONEST_FLAGGED, MISSED, PASSED, run_engine
from contract.statuses import Device
from worker.engine import evaluate

CPU_CASES = [case for case in load_corpus() if not case.needs_gpu]

# Attacks no layer catches yet, kept here so that the gap stays visible: if one of these starts
# being caught, this test fails and the entry must go.
KNOWN_GAPS: set[str] = set()


@pytest.mark.parametrize("case", CPU_CASES, ids=[case.id for case in CPU_CASES])
def test_case_through_the_engine(case, settings):
    outcome = run_engine(case, [], Device.cpu, lambda request: evaluate(request, settings=settings), 60.0)
    detail = f"{case.id}: expected {case.expected}, got {outcome.got} ({outcome.note})"
    if case.honest:
        assert outcome.outcome in (PASSED, HONEST_FLAGGED), detail
        if outcome.outcome == HONEST_FLAGGED:
            assert case.expected == "flagged", detail
    elif case.id in KNOWN_GAPS:
        assert outcome.outcome == MISSED, f"{detail}: now caught, remove it from KNOWN_GAPS"
    else:
        assert outcome.outcome == CAUGHT, detail
