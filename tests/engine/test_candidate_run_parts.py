"""Where a job's `candidate` stage went: its runner's wall seconds by part (result.extra.candidate_run_s)."""

from __future__ import annotations

from contract.requests import EvalOptions, EvalRequest
from contract.statuses import EvalStatus
from sandbox_side.runtime.runner import RUN_PARTS
from tests.engine.conftest import HONEST_SILU, SILU_REFERENCE
from worker.engine import evaluate


def test_a_jobs_candidate_stage_is_told_by_part_within_the_stages_own_time(settings):
    request = EvalRequest(reference=SILU_REFERENCE, candidate=HONEST_SILU,
                          options=EvalOptions(seed=77, trials=3, timing=False))
    result = evaluate(request, settings=settings)
    assert result.status == EvalStatus.ok, result.error
    parts = result.extra.candidate_run_s
    assert parts is not None and list(parts) == list(RUN_PARTS)
    assert all(seconds >= 0 for seconds in parts.values())
    assert parts["first_call"] > 0  # milliseconds at least; the small SiLU's copies may round to 0
    # The runner's parts lie inside the stage the supervisor clocked around the request (the rest is the pipe
    # and the outputs' sealed file on their way back).
    assert sum(parts.values()) <= result.stages["candidate"] + 0.01, (parts, result.stages)
