"""The supervisor <-> runner protocol's classes (sandbox_side/runtime/messages.py): every command and
reply goes to its JSON line and back unchanged, the lines are the ones the runners always exchanged, and a
reply that is not the one expected (malformed, mistyped, another command's) is a protocol failure."""

from __future__ import annotations

import dataclasses
import inspect
import json

import pytest

from contract.results import ErrorKind
from contract.statuses import EvalStatus
from sandbox_side.runtime import messages
from sandbox_side.runtime.failure_kind import FailureKind
from sandbox_side.runtime.messages import (
    CheckTimed,
    Command,
    Compared,
    Compiled,
    Done,
    ErrorReply,
    Generate,
    Generated,
    Load,
    MessageError,
    Payload,
    Ready,
    Reply,
    Run,
    RunDone,
    Time,
    TimedChecked,
    Timing,
    Traced,
    TritonCacheDone,
    VariantsMade,
    decode_command,
)
from sandbox_side.runtime.sealed_payload import SealedBuffer
from tests.engine.conftest import SILU_REFERENCE, triton_candidate
from worker.engine.launch import (
    MAX_REPORTED_PART_NAME,
    MAX_REPORTED_PARTS,
    UserFailure,
    read_reply,
    reported_parts,
)
from worker.engine.sandbox.process import PAYLOAD_KEY

TENSORS = Payload(4, {"tree": {"t": 0}, "tensors": [{"dtype": "torch.float32", "shape": [1], "nbytes": 4}]},
                  SealedBuffer.from_bytes(b"\0\0\x80?"))
FOLDER = Payload(4, None, SealedBuffer.from_bytes(b"ELF!"))

# One message of each class, every field set (payloads with their sealed files, as the supervisor holds them).
EXAMPLES: list[messages.Message] = [
    messages.Exit(),
    messages.Ping(),
    Load(source="import torch\n", cpu_s=60),
    Time(runs=5, warmup=1, order=[3, 0, 1, 2, 4, 5], keep=[2], compiled=True, spacer_ms=0.12),
    Run(init_seed=7, poison_bytes=4096, payload=TENSORS),
    messages.Trace(),
    messages.TritonCache(max_bytes=1 << 20),
    messages.ApplyTimingVariants(payload=TENSORS),
    messages.TimedOutputs(),
    Generate(init_seed=1, trial_seeds=[2, 3], pool_seeds=[4], shape_seeds=[5, 6], shape_max_bytes=10,
             probe_max_bytes=11, atol=1e-3, rtol=None, physics_measures=["copy"], trial_bytes_budget=12,
             reply_max_bytes=13),
    messages.Proceed(),
    messages.Inputs(),
    messages.Compare(atol=None, rtol=0.5, shape_check=False, shape_rule="KJ-R09", probe_check=False, payload=TENSORS),
    messages.MakeTimingVariants(seed=9, count=4, max_bytes=1000, atol=0.1, rtol=0.2),
    CheckTimed(expected=[(0, 1), (2, 0)], atol=None, rtol=None, payload=TENSORS),
    messages.Compile(atol=0.25, rtol=None),
    messages.Ready(environment={"torch": "2.9", "gpu_name": None}, start_cpu_s={"imports": 1.25, "warm": 0.5}),
    messages.Loaded(),
    messages.Pong(),
    ErrorReply(kind=FailureKind.out_of_memory, message="out of device memory", detail="Traceback ..."),
    messages.StepReached(step="truths", device=True),
    Timing(device_ms=[1.5, 2.0], warmup_runs=1, tampered=["time.perf_counter"], cover_ms=0.09),
    RunDone(tampered=["torch.cuda.synchronize"], payload=TENSORS, parts_s={"read": 0.5, "first_call": 1.25}),
    Traced(events={"kernels": [{"name": "k"}]}, tampered=[]),
    TritonCacheDone(files=[{"path": "a/b.cubin", "size": 4, "mtime_ns": 1}], payload=FOLDER),
    messages.VariantsApplied(),
    messages.TimedOutputsDone(tampered=[], payload=TENSORS),
    Generated(shape_trial={"skipped": "not requested"}, perturbed_trials=[1], physics={"copy_gbps": 10.0},
              trials_sized={"kept": 2, "asked": 5}, truth_skipped="no float64", tampered=[], output_bytes=1,
              reply_bytes=2, input_bytes=3, device_bytes=4),
    messages.InputsDone(payload=TENSORS),
    Compared(report={"passed": True}, invalid=None, perturbed_trials=[2]),
    VariantsMade(counts=[1, 3], variant_bytes=64, skipped=None, made=True, payload=TENSORS),
    TimedChecked(ok=False, message=None, wrong=[(0, "differs")], replayed=1, checked=2),
    Compiled(ok=True, reason=None, compile_s=1.25, compiles=1),
    messages.Built(extensions=[{"name": "ext", "path": "fast", "reason": ""}], line_map={"cuda.cu": [[1, 4, 10]]},
                   files=[{"path": "ext/ext.so", "size": 4, "mtime_ns": 1}], payload=FOLDER),
]


def _concrete(base: type) -> set[type]:
    return {cls for _, cls in inspect.getmembers(messages, inspect.isclass)
            if issubclass(cls, base) and cls not in (Command, Reply, Done) and cls.__module__ == messages.__name__}


def _sent(message: messages.Message) -> tuple[dict, SealedBuffer | None]:
    """The message as the other side receives it: its JSON line, and its payload's sealed file."""
    line = json.dumps(message.to_message())
    return json.loads(line), (message.carried.buffer if message.carried is not None else None)


def test_every_command_and_reply_has_an_example_here():
    assert {type(m) for m in EXAMPLES} == _concrete(Command) | _concrete(Reply)


@pytest.mark.parametrize("message", EXAMPLES, ids=lambda m: type(m).__name__)
def test_every_message_goes_to_its_line_and_back_unchanged(message):
    line, data = _sent(message)
    if isinstance(message, ErrorReply):
        assert ErrorReply.read(line) == message
        return
    assert type(message).decode(line, data) == message
    if isinstance(message, Command):
        # A runner takes a command's payload from its channel itself: it has the description and the size.
        carried = message.carried
        expected = message if carried is None else dataclasses.replace(
            message, payload=Payload(carried.nbytes, carried.description))
        assert decode_command(line, [messages.Exit, type(message)]) == expected
    else:  # as the supervisor reads it: SandboxProcess keeps the sealed file beside the line
        assert read_reply({**line, **({PAYLOAD_KEY: data} if data else {})}, type(message)) == message


def test_the_lines_are_the_ones_the_runners_always_exchanged():
    assert Time(runs=5, warmup=1).to_message() == {"op": "time", "runs": 5, "warmup": 1, "order": None,
                                                    "keep": None, "compiled": False, "spacer_ms": None}
    assert Run(init_seed=7, poison_bytes=8, payload=TENSORS).to_message() == {
        "op": "run", "init_seed": 7, "poison_bytes": 8, "payload": TENSORS.description, "payload_bytes": 4}
    assert Compiled(ok=True, compile_s=1.0, compiles=1).to_message() == {
        "event": "done", "op": "compile", "ok": True, "reason": None, "compile_s": 1.0, "compiles": 1}
    assert ErrorReply(FailureKind.timeout, "late").to_message() == {"event": "error", "kind": "timeout",
                                                                    "message": "late", "detail": ""}
    # A line written before the classes (fields left out where the runner had a default) still reads.
    old_generate = {"op": "generate", "shape_max_bytes": 0, "probe_max_bytes": 0, "atol": None, "rtol": None,
                    "physics_measures": [], "trial_bytes_budget": 0, "trial_seeds": [1], "pool_seeds": [2],
                    "init_seed": 3, "shape_seeds": []}
    assert Generate.decode(old_generate) == Generate(init_seed=3, trial_seeds=[1], pool_seeds=[2])
    assert Time.decode({"op": "time", "runs": 3, "warmup": 0, "order": [0, 1, 2], "keep": [1]}).compiled is False


MALFORMED = [
    (Timing, {"event": "timing", "device_ms": "fast"}, "device_ms is str"),
    (Timing, {"event": "timing", "device_ms": [1.0, True]}, "device_ms[1] is bool"),
    (Timing, {"event": "timing", "warmup_runs": 1}, "without its field 'device_ms'"),
    (Timing, {"event": "done", "op": "time", "device_ms": [1.0]}, "event 'done', expected 'timing'"),
    (RunDone, {"event": "done", "op": "run", "tampered": "abc"}, "tampered is str"),
    (RunDone, {"event": "done", "op": "trace", "tampered": []}, "done for op 'trace', expected 'run'"),
    (RunDone, {"event": "done", "op": "run", "payload_bytes": -1}, "payload_bytes is -1"),
    (RunDone, {"event": "done", "op": "run", "payload": [1], "payload_bytes": 1}, "description is not an object"),
    (Generated, {"event": "done", "op": "generate", "output_bytes": 1.5}, "output_bytes is float"),
    (VariantsMade, {"event": "done", "op": "timing_variants", "counts": [1, "2"]}, "counts[1] is str"),
    (TimedChecked, {"event": "done", "op": "check_timed", "wrong": [[0]]}, "wrong[0] is list"),
    (Compared, {"event": "done", "op": "compare", "report": "passed"}, "report is str"),
    (Traced, {"event": "done", "op": "trace", "events": {1: 2}}, "events key is int"),
    (Ready, {"event": "ready", "start_cpu_s": {"imports": "slow"}}, "start_cpu_s['imports'] is str"),
]


@pytest.mark.parametrize(("reply", "message", "why"), MALFORMED, ids=[why for _, _, why in MALFORMED])
def test_a_malformed_reply_is_a_protocol_failure(reply, message, why):
    with pytest.raises(MessageError, match=why.replace("[", r"\[").replace("]", r"\]")):
        reply.decode(message)
    with pytest.raises(UserFailure) as failure:
        read_reply(message, reply)
    assert failure.value.kind is FailureKind.protocol and "unexpected reply" in failure.value.message


def test_an_error_reply_is_raised_as_its_failure_whatever_it_holds():
    with pytest.raises(UserFailure) as failure:
        read_reply({"event": "error", "kind": "compile_error", "message": "nvcc", "detail": "log"}, RunDone)
    assert (failure.value.kind, failure.value.message, failure.value.detail) == (FailureKind.compile_error, "nvcc",
                                                                                 "log")
    with pytest.raises(UserFailure) as failure:
        read_reply({"event": "error", "kind": 7, "message": ["x"]}, RunDone)
    assert failure.value.kind is FailureKind.protocol and "['x']" in failure.value.message


def test_a_runner_reads_only_its_roles_commands():
    assert isinstance(decode_command({"op": "time", "runs": 1, "warmup": 0}, [Load, Time]), Time)
    with pytest.raises(MessageError, match="unknown op 'generate'"):
        decode_command(Generate(init_seed=1, trial_seeds=[], pool_seeds=[]).to_message(), [Load, Time])
    with pytest.raises(MessageError, match="runs is str"):
        decode_command({"op": "time", "runs": "5", "warmup": 0}, [Time])


def test_the_runners_tables_hold_each_roles_commands():
    from sandbox_side.judging.judge_process import JudgeRunner
    from sandbox_side.runtime.runner import CandidateRunner

    def table(runner_class) -> set[str]:
        runner = object.__new__(runner_class)  # its table only: no device, no channel
        return {command.NAME for command in runner_class.handlers(runner)}

    assert table(CandidateRunner) == {"load", "time", "run", "trace", "triton_cache", "timing_variants",
                                      "timed_outputs"}
    assert table(JudgeRunner) == {"load", "time", "generate", "inputs", "compare", "timing_variants",
                                  "check_timed", "compile"}


# A candidate that answers `run` itself, before its runner does, with a reply of the wrong shape.
FORGED_REPLY = triton_candidate('''
    import json, os
    os.write(int(os.environ["KJ_MSG_FD"]), (json.dumps({"event": "done", "op": "run", "tampered": "nothing"})
                                            + "\\n").encode())
    return x * torch.sigmoid(x)
''')


def test_a_candidates_forged_reply_is_a_protocol_failure(run_eval):
    from worker.engine.policy.registry import RULES

    result = run_eval(SILU_REFERENCE, FORGED_REPLY, policy={"disabled_rules": [rule.id for rule in RULES]})
    assert result.status == EvalStatus.runtime_error and result.error.kind == ErrorKind.protocol, result.error
    assert "unexpected reply" in result.error.message and "tampered is str" in result.error.message


def test_a_runners_start_parts_are_kept_bounded_and_an_older_ready_line_still_reads():
    assert Ready.decode({"event": "ready", "environment": {}}) == Ready(environment={}, start_cpu_s={})
    reported = {"imports": 1.23456, "device": float("nan"), "warm": -1.0, "x" * 100: 2.0,
                **{f"part{i}": 0.1 for i in range(20)}}
    kept = reported_parts(reported)
    assert kept["imports"] == 1.235 and "device" not in kept and "warm" not in kept
    assert "x" * MAX_REPORTED_PART_NAME in kept and len(kept) == MAX_REPORTED_PARTS
