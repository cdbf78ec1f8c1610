"""A problem's judge started ahead of its job (while the candidate is prepared) serves that job warm."""

from __future__ import annotations

from contract.requests import EvalOptions, EvalRequest
from contract.statuses import EvalStatus
from tests.engine.conftest import HONEST_SILU, SILU_REFERENCE
from worker.engine import evaluate
from worker.engine.reference.judge_start import key_of, warm_reference
from worker.engine.reference.reference_cache import cache_for


def test_a_judge_started_ahead_serves_the_job_warm(settings):
    request = EvalRequest(reference=SILU_REFERENCE, candidate=HONEST_SILU,
                          options=EvalOptions(seed=5150, trials=2, timing=False))
    assert warm_reference(request, settings)
    assert not warm_reference(request, settings), "one start per problem"
    cache = cache_for(settings)
    key = key_of(request, settings)
    started = cache.warming(key)
    if started is not None:  # still starting: the job would wait for it, as this does
        assert started.wait(120)
    (entry,) = cache.entries_of(key)
    assert entry.prestarted and entry.miss_cost_s > 0 and entry.held.host_bytes > 0
    result = evaluate(request, settings=settings)
    assert result.status == EvalStatus.ok, result.error
    assert result.extra.reference_cache == "hit"
    assert result.extra.reference_judge.startswith("started ahead")
    # Where the start went, for the first job it served: host work, then the device's hold and the generation.
    start = result.extra.judge_start
    assert start is not None and start.launch_s > 0 and start.generate_s > 0 and start.device_wait_s >= 0
    assert start.launch_s + start.device_wait_s + start.generate_s <= entry.miss_cost_s + 0.01
    # Its CPU: the part of its start before the reference's import, by part, within the launch's, within the whole.
    assert list(start.start_cpu_s) == ["imports", "device", "triton_import", "warm"]
    assert start.start_cpu_s["imports"] > 0  # torch's import alone takes a CPU second
    assert sum(start.start_cpu_s.values()) <= start.launch_cpu_s + 0.05 <= start.cpu_s + 0.1
    # The candidate's runner reports its own warm start the same way, before any candidate code ran.
    assert list(result.extra.runner_start_cpu_s) == ["imports", "device", "triton_import", "warm"]
    assert 0 < sum(result.extra.runner_start_cpu_s.values()) <= result.extra.candidate_cpu_s + 0.05
    again = evaluate(request, settings=settings)
    assert again.extra.reference_cache == "hit" and again.extra.judge_start is None  # said once, by the first
