"""A sandbox that does not start is the harness's failure, never a verdict: `sandbox_error` (judged: false),
so a trainer can tell it from a candidate's or a reference's failure. On two H100s every judge of the second
lane failed to see its GPU, and every job of that lane was called the reference's fault (`invalid_input`)."""

from __future__ import annotations

import uuid

from contract.requests import EvalOptions, EvalRequest
from contract.statuses import EvalStatus
from tests.engine.conftest import HONEST_SILU, SILU_REFERENCE
from worker.engine import evaluate, sandbox_pool
from worker.engine.launch import RunnerSession, UserFailure

NO_GPU = "RuntimeError: No CUDA GPUs are available"


def _request() -> EvalRequest:
    # A reference of its own, so that no judge cached by an earlier test serves it.
    reference = f"{SILU_REFERENCE}\n# harness-failure {uuid.uuid4().hex}\n"
    return EvalRequest(reference=reference, candidate=HONEST_SILU, options=EvalOptions(timing=False))


def test_a_judge_whose_runtime_does_not_start_is_no_verdict(settings, monkeypatch):
    wait_ready = RunnerSession.wait_ready

    def judge_without_gpu(self, deadline):
        if self.config.role == "reference":
            raise UserFailure("runtime_error", NO_GPU)
        return wait_ready(self, deadline)

    monkeypatch.setattr(RunnerSession, "wait_ready", judge_without_gpu)
    result = evaluate(_request(), settings=settings)
    assert result.status == EvalStatus.sandbox_error and not result.judged
    assert result.error.kind == "judge_start_failed" and NO_GPU in result.error.message
    assert result.reward == 0.0 and result.reward_components == {}


def test_a_candidate_sandbox_that_does_not_start_is_no_verdict(settings, monkeypatch):
    def no_runner(key, settings):
        raise UserFailure("crashed", "the process was killed by SIGKILL (killed: limit or out of memory)")

    monkeypatch.setattr(sandbox_pool, "start_candidate_runner", no_runner)
    settings.warm_sandboxes = 0  # each take starts its runner: the failure reaches the job at once
    result = evaluate(_request(), settings=settings)
    assert result.status == EvalStatus.sandbox_error and not result.judged
    assert result.error.kind == "no_sandbox" and "did not start" in result.error.message
