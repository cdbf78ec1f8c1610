"""The judge, sandboxed on CPU: it compares what a candidate sends against the reference outputs
it keeps, checks shapes and dtypes before it reads anything, and never hands those outputs out."""

from __future__ import annotations

import textwrap
import time

import pytest
import torch

from contract.requests import EvalOptions
from sandbox_side.judging.probe_inputs import PROBE_KINDS
from sandbox_side.runtime import wire
from sandbox_side.runtime.messages import InputsDone, Payload, RunDone
from sandbox_side.runtime.sealed_payload import SealedBuffer
from tests.engine.conftest import SILU_REFERENCE
from worker.engine.launch import UserFailure
from worker.engine.reference.judge import JudgeSession
from worker.engine.reference.reference_cache import new_seeds


@pytest.fixture
def judge(settings):
    options = EvalOptions(trials=2, seed=11)
    session = JudgeSession(SILU_REFERENCE, options, settings)
    seeds = new_seeds(options.seed, options.trials, settings.timing_pool_size)
    session.start(seeds, time.monotonic() + 120, shape_max_bytes=settings.shape_trial_max_bytes)
    yield session
    session.close()


def _decoded(reply: InputsDone) -> object:
    assert reply.payload is not None and reply.payload.description is not None and reply.payload.buffer is not None
    specs = wire.parse_specs(reply.payload.description)
    tree = wire.unpack_tree(reply.payload.description, specs)
    wire.want_all(tree)
    tensors = wire.read_tensors(reply.payload.buffer, specs, {i for i in range(len(specs))})
    return wire.resolve(tree, tensors)


def _as_reply(value: object) -> RunDone:
    """A candidate's reply as the supervisor would forward it."""
    sealed = wire.seal(value)
    return RunDone(payload=Payload(wire.payload_bytes(sealed.description), sealed.description, sealed.buffer))


def _run_reply(trials: list[list], transform, probe_transform=None) -> RunDone:
    """SiLU of every trial, `transform`ed; the probe trials (after the problem's two) by `probe_transform`."""
    entries = []
    for index, args in enumerate(trials):
        x = args[0]
        change = transform if index < 2 or probe_transform is None else probe_transform
        entries.append({"kind": "tensor", "tensors": [change(x * torch.sigmoid(x))], "aliases": [],
                        "inputs_after": [x.clone()]})
    return _as_reply({"trials": entries, "shape_trials": []})


def test_the_inputs_the_judge_sends_hold_no_reference_output(judge):
    inputs = _decoded(judge.inputs(time.monotonic() + 60))
    assert set(inputs) == {"init_inputs", "trials", "pool", "shape_trials"}
    # The problem's two trials, then the probe trials the reference keeps, indistinguishable in the protocol.
    assert len(inputs["trials"]) > 2 and all(args[0].shape == (1000,) for args in inputs["trials"])


def test_every_candidate_gets_the_same_sealed_input_sets_written_once(judge):
    """The judge seals its input sets when it generates them: each candidate's inputs are the same memory file
    (no copy per candidate, in the judge or the supervisor), and the judge's host memory counts them."""
    import os

    first, second = (judge.inputs(time.monotonic() + 60).payload for _ in range(2))
    assert first is not None and second is not None and first.buffer is not None and second.buffer is not None
    same = os.fstat(first.buffer.fd), os.fstat(second.buffer.fd)
    assert (same[0].st_dev, same[0].st_ino) == (same[1].st_dev, same[1].st_ino)
    assert first.nbytes == judge.generated.input_bytes
    assert torch.equal(_decoded(InputsDone(payload=second))["trials"][0][0],
                       _decoded(InputsDone(payload=first))["trials"][0][0])


def _probe(report, kind: str):
    return next(p for p in report.probes if p.kind == kind)


def test_probe_trials_flag_half_precision_and_fail_a_skipped_element(judge):
    trials = _decoded(judge.inputs(time.monotonic() + 60))["trials"]
    honest = judge.compare(_run_reply(trials, lambda y: y), time.monotonic() + 60).report
    assert honest.passed and sorted(p.kind for p in honest.probes) == sorted(PROBE_KINDS)
    kept = [p for p in honest.probes if p.ran]
    assert len(kept) == len(trials) - 2 and all(p.outcome == "ok" for p in kept), honest.probes
    # SiLU adds a nonlinearity to its inputs: it does not round on scaled inputs as on the others.
    assert not _probe(honest, "scaled").ran and "would say nothing" in _probe(honest, "scaled").message

    half = judge.compare(_run_reply(trials, lambda y: y, lambda y: y.half().float()), time.monotonic() + 60).report
    rounding = _probe(half, "rounding")
    assert half.passed and rounding.outcome == "flag" and rounding.ratio > 1000, half.probes
    assert "lower precision" in rounding.message and "round toward zero" in rounding.message

    def skip_largest(y):  # leaves out the element that carries the most (on the spikes probe: a spike)
        y = y.clone()
        y[y.abs().argmax()] = 0.0
        return y

    skipped = judge.compare(_run_reply(trials, lambda y: y, skip_largest), time.monotonic() + 60).report
    spikes = _probe(skipped, "spikes")
    assert not skipped.passed and spikes.outcome == "fail", skipped.probes
    assert "skips input elements" in spikes.message and spikes.relative_error > 1e-3


def test_honest_outputs_pass_and_wrong_ones_fail_with_the_reason(judge):
    trials = _decoded(judge.inputs(time.monotonic() + 60))["trials"]
    honest = judge.compare(_run_reply(trials, lambda y: y), time.monotonic() + 60)
    assert honest.report.passed and all(t.mismatch_fraction == 0.0 for t in honest.report.trials)
    assert honest.report.precision is not None and honest.report.inputs.mutated == []

    off = judge.compare(_run_reply(trials, lambda y: y + 1e-2), time.monotonic() + 60)
    assert not off.report.passed and "differ beyond tolerance" in off.report.trials[0].message


def test_shape_and_dtype_are_checked_before_the_judge_reads_the_tensor(judge):
    trials = _decoded(judge.inputs(time.monotonic() + 60))["trials"]
    wrong_dtype = judge.compare(_run_reply(trials, lambda y: y.double()), time.monotonic() + 60)
    assert wrong_dtype.report.trials[0].message == "output dtype torch.float64 != expected torch.float32"
    wrong_shape = judge.compare(_run_reply(trials, lambda y: y[:999]), time.monotonic() + 60)
    assert wrong_shape.report.trials[0].message == "output shape (999,) != expected (1000,)"
    # The judge is still in step after skipping those bytes: an honest reply passes again.
    assert judge.compare(_run_reply(trials, lambda y: y), time.monotonic() + 60).report.passed


def test_a_reply_that_is_not_a_run_reply_is_invalid_output(judge):
    result = judge.compare(_as_reply({"trials": [torch.zeros(3)]}), time.monotonic() + 60)
    assert result.report is None and "could not be read" in result.invalid
    garbage = RunDone(payload=Payload(1, {"tree": {"t": 5}, "tensors": []}, SealedBuffer.from_bytes(b"\0")))
    assert judge.compare(garbage, time.monotonic() + 60).invalid
    assert judge.alive


# The reference runs beside the comparison code in the judge: here it makes that code run out of memory,
# the way comparing a 20 GiB output beside other jobs did on a GPU.
COMPARISON_OUT_OF_MEMORY_REFERENCE = SILU_REFERENCE + textwrap.dedent('''
    import sandbox_side.judging.correctness as comparison

    def _out_of_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")

    comparison.compare_with_truth = _out_of_memory
''')


def test_a_judge_out_of_memory_while_comparing_is_reported_as_such(settings):
    options = EvalOptions(trials=2, seed=11)
    session = JudgeSession(COMPARISON_OUT_OF_MEMORY_REFERENCE, options, settings)
    try:
        session.start(new_seeds(options.seed, options.trials, settings.timing_pool_size), time.monotonic() + 120,
                      shape_max_bytes=settings.shape_trial_max_bytes)
        trials = _decoded(session.inputs(time.monotonic() + 60))["trials"]
        with pytest.raises(UserFailure) as failure:
            session.compare(_run_reply(trials, lambda y: y), time.monotonic() + 60)
        # out_of_memory, not runtime_error: the device stage retries it alone, then reports no verdict.
        assert failure.value.kind == "out_of_memory"
        assert "while comparing" in failure.value.message and "20.00 GiB" in failure.value.message
    finally:
        session.close()
