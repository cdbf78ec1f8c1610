"""On the GPU: a fast-built candidate runs, is judged like its full build, and is not rebuilt at run time."""

from __future__ import annotations

import pytest

from contract.requests import EvalOptions, EvalRequest
from tests.build import candidates
from worker.engine import evaluate

pytestmark = pytest.mark.gpu


def test_fast_build_gets_the_full_builds_verdict_without_rebuilding(monkeypatch):
    results = {}
    for build_path in ("auto", "full"):
        monkeypatch.setenv("KERNELJUDGE_BUILD_PATH", build_path)
        request = EvalRequest(reference=candidates.PLAIN_REFERENCE, candidate=candidates.PLAIN,
                              options=EvalOptions(device="cuda", trials=2, timing_budget_s=0.5))
        results[build_path] = evaluate(request)
    fast, full = results["auto"], results["full"]
    assert fast.extra.build.path == "fast", fast.extra
    assert full.extra.build.path == "full"
    assert fast.correct and full.correct
    assert fast.status == full.status
    # Importing the candidate (overlapping the reference stage) runs its load_inline: ninja must find the
    # fast build up to date, as it finds the full one; a rebuild would cost the ~1 minute saved.
    assert run_seconds(fast) < run_seconds(full) + 20, (fast.stages, full.stages)


def run_seconds(result) -> float:
    return sum(result.stages.get(stage, 0.0) for stage in ("reference", "inputs", "load", "candidate"))
