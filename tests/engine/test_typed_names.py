"""The names the engine hands around are enum members (worker/engine/stage.py, failure_kind.py), and their
values are the strings the store, the API's JSON and the dashboard have always shown."""

from __future__ import annotations

import json

import pytest

from contract.requests import EvalOptions, EvalRequest
from contract.results import ErrorKind
from contract.statuses import EvalStatus
from sandbox_side.runtime.failure_kind import FailureKind
from tests.engine.conftest import HONEST_SILU, SILU_REFERENCE, triton_candidate
from worker.engine import evaluate
from worker.engine.gpu_schedule import EXCLUSIVE_STAGES, HOST_ONLY_STAGES, GpuSchedule
from worker.engine.launch import UserFailure, reported_failure
from worker.engine.policy.registry import RULES
from worker.engine.stage import Stage
from worker.engine.verdict.result_builder import (
    CANDIDATE_STATUS,
    HINTS,
    candidate_error_kind,
    reference_error_kind,
)

ALL_STATIC_OFF = [rule.id for rule in RULES]


def test_a_stage_reads_as_its_name():
    assert Stage.timing == "timing" and f"{Stage.timing}" == str(Stage.timing) == "timing"
    assert json.dumps({"stage": Stage.reference_wait}) == '{"stage": "reference_wait"}'
    assert Stage("compile_baseline_wait") is Stage.compile_baseline_wait
    assert EXCLUSIVE_STAGES == {Stage.timing} and "timing" in EXCLUSIVE_STAGES
    assert HOST_ONLY_STAGES == {Stage.reward, Stage.reference_wait, Stage.compile_baseline_wait, Stage.runner_take}


def test_every_stage_a_cpu_evaluation_notifies_and_times_is_a_stage(settings):
    schedule = settings.gpu_schedule = GpuSchedule("dev0", sharers=2)
    lease = schedule.lease()
    seen: list[object] = []

    holds: dict[Stage, tuple[int, bool]] = {}  # what the job held on the device while in each stage

    def on_stage(stage: Stage) -> None:
        seen.append(stage)
        lease.enter(stage)
        state = schedule.state()
        holds[stage] = (state.shared, state.exclusive)

    options = EvalOptions(timing=True, timing_budget_s=0.3, timing_min_runs=3, timing_max_runs=12)
    request = EvalRequest(reference=f"{SILU_REFERENCE}\n# stage names\n", candidate=HONEST_SILU, options=options)
    try:
        result = evaluate(request, settings=settings, on_stage=on_stage)
    finally:
        lease.release()
    assert result.status == EvalStatus.ok, result.error
    assert seen and all(type(stage) is Stage for stage in seen), seen
    assert {Stage.validate, Stage.reference, Stage.candidate, Stage.compare, Stage.timing, Stage.reward} <= set(seen)
    # Only the measured window holds the device alone: the timing's set-up (variants) and its check (kept
    # outputs re-checked) share it with other jobs, in that order around the window.
    timing_stages = [stage for stage in seen if stage.value.startswith("timing")]
    assert timing_stages == [Stage.timing_setup, Stage.timing, Stage.timing_check], seen
    assert holds[Stage.timing_setup] == holds[Stage.timing_check] == (1, False)
    assert holds[Stage.timing] == (0, True)
    assert {"timing_setup", "timing", "timing_check"} <= set(result.stages)
    # Where the device time went, step by step: the judge's inputs handed over, the module loaded, its call, the
    # runner taken from the warm pool and stopped afterwards, and the kernel trace of the passed outputs.
    assert {"inputs", "load", "candidate", "runner_take", "cleanup", "trace"} <= set(result.stages), result.stages
    # The result's stages: plain strings, each a stage's name.
    assert result.stages and all(type(name) is str and Stage(name) for name in result.stages), result.stages
    assert set(json.loads(result.model_dump_json())["stages"]) == set(result.stages)


# -- failure kinds ---------------------------------------------------------------------------------------------
def test_every_failure_kind_reads_back_as_itself_and_anything_else_as_protocol():
    for kind in FailureKind:
        sent = json.loads(json.dumps({"event": "error", "kind": kind, "message": "m", "detail": "d"}))
        failure = reported_failure(sent)
        assert failure.kind is kind and failure.message == "m" and failure.detail == "d"
    for forged in ("ok", "Timeout", "", None, 3, ["timeout"]):
        failure = reported_failure({"event": "error", "kind": forged, "message": "forged"})
        assert failure.kind is FailureKind.protocol and "no known kind" in failure.message, forged
    assert reported_failure({"event": "error", "message": "no kind"}).kind is FailureKind.protocol


def test_every_failure_kind_is_an_error_kind_for_the_candidate_and_for_the_reference():
    for kind in FailureKind:
        assert candidate_error_kind(kind).value == kind.value
        assert reference_error_kind(kind).value == f"reference_{kind.value}"
        assert kind in CANDIDATE_STATUS and kind in HINTS
    assert UserFailure("timeout", "m").kind is FailureKind.timeout  # the supervisor's own names, checked
    with pytest.raises(ValueError):
        UserFailure("time_out", "m")


# The candidate shares its runner's process: it can write to the reply channel. What it writes there is read as
# the runner's reply, and a failure of a kind that is none is the protocol's.
FORGED_KIND = triton_candidate('''
    import json, os
    os.write(int(os.environ["KJ_MSG_FD"]), (json.dumps({"event": "error", "kind": "all_good",
                                                        "message": "nothing to see"}) + "\\n").encode())
    return x * torch.sigmoid(x)
''')


def test_a_forged_failure_kind_is_a_protocol_failure(run_eval):
    result = run_eval(SILU_REFERENCE, FORGED_KIND, policy={"disabled_rules": ALL_STATIC_OFF})
    assert result.status == EvalStatus.runtime_error and result.error.kind == ErrorKind.protocol, result.error
    assert "'all_good'" in result.error.message and "nothing to see" in result.error.message
