"""Running out of device memory while other jobs share the device is not held against a candidate
until it has run alone: the engine runs it once more holding the device exclusively."""

from __future__ import annotations

from contract.requests import EvalOptions, EvalRequest
from contract.statuses import EvalStatus
from tests.engine.conftest import HONEST_SILU, SILU_REFERENCE, triton_candidate
from worker.engine import evaluate
from worker.engine.gpu_schedule import GpuSchedule
from worker.engine.launch import UserFailure
from worker.engine.reference.judge import JudgeSession

# torch raises this class for a failed device allocation (torch.cuda.OutOfMemoryError is the same class).
OUT_OF_MEMORY = triton_candidate('''
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
''')


def _evaluate(settings, candidate: str, sharers: int, holds: list[tuple[str, str | None]] | None = None):
    settings.gpu_schedule = GpuSchedule("dev0", sharers=sharers)
    lease = settings.gpu_schedule.lease()
    stages: list[str] = []

    def on_stage(stage: str) -> None:
        stages.append(stage)
        lease.enter(stage)
        if holds is not None:
            holds.append((stage, lease.held))

    request = EvalRequest(reference=SILU_REFERENCE, candidate=candidate, options=EvalOptions(timing=False))
    try:
        return evaluate(request, settings=settings, on_stage=on_stage), stages
    finally:
        lease.release()


def test_out_of_memory_beside_other_jobs_is_run_again_alone_before_it_counts(settings):
    holds: list[tuple[str, str | None]] = []
    result, stages = _evaluate(settings, OUT_OF_MEMORY, sharers=2, holds=holds)
    assert "alone" in stages and stages.index("alone") < len(stages) - 1
    # Each pass waits for its warm runner holding nothing: a runner's start is paused while a job holds the device
    # alone, and the alone pass waited for one that way until the pool gave up.
    assert [held for stage, held in holds if stage == "runner_take"] == [None, None]
    assert [held for stage, held in holds if stage == "candidate"] == ["shared", "exclusive"]
    second_pass = stages[stages.index("alone"):]
    assert {"reference", "candidate"} <= set(second_pass)  # the second pass went through every device stage again
    # Alone it still runs out of memory: now that is the candidate's, with the first pass as evidence.
    assert result.status == EvalStatus.runtime_error and result.error.kind == "out_of_memory"
    assert "Tried to allocate 20.00 GiB" in result.error.message
    assert "no other job's stage running beside it" in result.error.message
    assert "beside other jobs" in result.extra.retried_alone


def test_out_of_memory_on_an_unshared_device_is_the_candidates_at_once(settings):
    result, stages = _evaluate(settings, OUT_OF_MEMORY, sharers=1)
    assert "alone" not in stages and stages.count("candidate") == 1
    assert result.status == EvalStatus.runtime_error and result.error.kind == "out_of_memory"
    assert result.extra.retried_alone is None


# -- the judge's own memory -------------------------------------------------------------------------
JUDGE_OUT_OF_MEMORY = "out of device memory while comparing the candidate's outputs: CUDA out of memory. " \
                      "Tried to allocate 20.00 GiB"


def _judge_runs_out_of_memory(monkeypatch, times: int) -> list[int]:
    """The judge reports out_of_memory on its first `times` comparisons (what judge_process sends when
    its comparison raises torch.OutOfMemoryError: see test_judge.py)."""
    calls: list[int] = []
    compare = JudgeSession.compare

    def failing_compare(self, run_reply, deadline, **kwargs):
        calls.append(1)
        if len(calls) <= times:
            raise UserFailure("out_of_memory", JUDGE_OUT_OF_MEMORY)
        return compare(self, run_reply, deadline, **kwargs)

    monkeypatch.setattr(JudgeSession, "compare", failing_compare)
    return calls


def test_a_judge_out_of_memory_beside_other_jobs_is_retried_alone_and_then_judged(settings, monkeypatch):
    calls = _judge_runs_out_of_memory(monkeypatch, times=1)
    result, stages = _evaluate(settings, HONEST_SILU, sharers=2)
    assert len(calls) == 2 and "alone" in stages
    assert result.status == EvalStatus.ok and result.judged, result.error
    assert "Tried to allocate 20.00 GiB" in result.extra.retried_alone


def test_a_judge_out_of_memory_alone_is_no_verdict(settings, monkeypatch):
    calls = _judge_runs_out_of_memory(monkeypatch, times=2)
    result, stages = _evaluate(settings, HONEST_SILU, sharers=2)
    assert len(calls) == 2 and "alone" in stages
    # The harness failed, not the candidate: a status trainers tell apart, never a silent score.
    assert result.status == EvalStatus.sandbox_error and not result.judged
    assert result.error.kind == "judge_out_of_memory"
    assert "even alone on the device" in result.error.message and "not a verdict" in result.error.message
    assert result.reward == 0.0 and result.reward_components == {}
    assert result.model_dump()["judged"] is False  # in the JSON every client reads


def test_a_judge_out_of_memory_on_an_unshared_device_is_no_verdict_at_once(settings, monkeypatch):
    calls = _judge_runs_out_of_memory(monkeypatch, times=1)
    result, stages = _evaluate(settings, HONEST_SILU, sharers=1)
    assert len(calls) == 1 and "alone" not in stages
    assert result.status == EvalStatus.sandbox_error and not result.judged
    assert result.error.kind == "judge_out_of_memory" and "even alone" not in result.error.message
