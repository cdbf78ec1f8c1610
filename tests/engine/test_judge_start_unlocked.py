"""A judge's process start, CUDA set-up and reference import hold no device lock; only generating the
reference's outputs holds the device (shared). On an H100 those 5-6 s of host work, held shared, kept
every other job's timing waiting."""

from __future__ import annotations

import uuid

from contract.requests import EvalOptions, EvalRequest
from contract.statuses import EvalStatus
from tests.engine.conftest import HONEST_SILU, SILU_REFERENCE
from worker.engine import evaluate
from worker.engine.gpu_schedule import GpuSchedule
from worker.engine.reference.judge import JudgeSession


def test_a_judge_starts_without_the_device_and_generates_holding_it_shared(settings, monkeypatch):
    schedule = settings.gpu_schedule = GpuSchedule("dev0", sharers=2)
    seen: dict[str, int] = {}
    launch, generate = JudgeSession.launch, JudgeSession.generate

    def observed_launch(self, deadline):
        seen["launch"] = schedule.state().shared
        return launch(self, deadline)

    def observed_generate(self, seeds, deadline, **kwargs):
        seen["generate"] = schedule.state().shared
        return generate(self, seeds, deadline, **kwargs)

    monkeypatch.setattr(JudgeSession, "launch", observed_launch)
    monkeypatch.setattr(JudgeSession, "generate", observed_generate)
    lease = schedule.lease()
    # A reference of its own: no judge of an earlier test is cached for it (this test needs a miss).
    reference = f"{SILU_REFERENCE}\n# judge-start-unlocked {uuid.uuid4().hex}\n"
    request = EvalRequest(reference=reference, candidate=HONEST_SILU, options=EvalOptions(timing=False))
    try:
        result = evaluate(request, settings=settings, on_stage=lease.enter)
    finally:
        lease.release()
    assert result.status == EvalStatus.ok, result.error
    assert result.extra.reference_cache == "miss"
    assert seen == {"launch": 0, "generate": 1}
    start = result.extra.judge_start  # the job that started its judge says where that start went
    assert start is not None and start.launch_s > 0 and start.generate_s > 0 and start.device_wait_s >= 0
