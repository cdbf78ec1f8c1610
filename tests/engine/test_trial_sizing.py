"""One huge problem does not hold its lane's device for minutes: its trials are sized to a byte budget (at least
two stay), and the result says so. (A problem with 20 GiB of outputs a trial held an H100 lane for 185 s.)"""

from __future__ import annotations

import uuid
import weakref
from types import SimpleNamespace

import torch

from contract.requests import EvalOptions, EvalRequest
from contract.statuses import EvalStatus
from sandbox_side.judging.correctness import Outputs
from sandbox_side.judging.judge_process import (
    MIN_SIZED_TRIALS,
    REPLY_MARGIN_BYTES,
    JudgeRunner,
    ProbeTrial,
    sized_trials,
)
from sandbox_side.runtime import wire
from tests.engine.conftest import HONEST_SILU, SILU_REFERENCE, triton_candidate
from worker.engine import evaluate

WRONG_SILU = triton_candidate('''
    y = torch.empty_like(x)
    n = x.numel()
    silu_kernel[(triton.cdiv(n, 256),)](x, y, n, BLOCK=256)
    return y * 1.01
''')


def test_the_trials_kept_fit_the_budget_and_never_fewer_than_two():
    assert sized_trials(5, 100, 0) == 5  # no budget
    assert sized_trials(5, 100, 500) == 5  # all fit
    assert sized_trials(5, 100, 350) == 3
    assert sized_trials(5, 10**12, 350) == MIN_SIZED_TRIALS == 2
    assert sized_trials(1, 10**12, 350) == 1  # never more than asked


def test_a_problem_too_large_for_its_trials_keeps_what_fits_and_still_judges(settings):
    # A reference of its own: a judge cached by another test would keep every trial.
    reference = f"{SILU_REFERENCE}\n# trial-sizing {uuid.uuid4().hex}\n"
    options = EvalOptions(timing=False, trials=5)
    probe = evaluate(EvalRequest(reference=reference, candidate=HONEST_SILU, options=options), settings=settings)
    assert probe.status == EvalStatus.ok and len(probe.correctness.trials) == 5 and probe.extra.trials_sized is None

    reference = f"{SILU_REFERENCE}\n# trial-sizing {uuid.uuid4().hex}\n"
    settings.trial_bytes_budget = 1  # smaller than any trial: the two-trial floor
    honest = evaluate(EvalRequest(reference=reference, candidate=HONEST_SILU, options=options), settings=settings)
    assert honest.status == EvalStatus.ok and len(honest.correctness.trials) == 2
    sized = honest.extra.trials_sized
    assert sized is not None
    assert (sized.kept, sized.asked, sized.budget) == (2, 5, 1) and sized.set_bytes > 0
    assert "2 of 5 trials" in sized.reason
    wrong = evaluate(EvalRequest(reference=reference, candidate=WRONG_SILU, options=options), settings=settings)
    assert wrong.status == EvalStatus.incorrect


def test_the_judge_keeps_one_host_copy_of_its_input_sets():
    """Sealing lets each input set's tensors go once written and keeps views of the sealed file in their place:
    a problem with 512 MiB inputs (7 GiB of input sets) went over the sandbox's 16 GiB cap holding both."""
    runner = JudgeRunner.__new__(JudgeRunner)  # the sealing alone: no channel, no sandbox
    trials, pool, shape = [[torch.randn(32, 8), 3]], [[torch.randn(32, 8), 3]], [[torch.randn(64, 8), 3]]
    probe_args = [torch.randn(32, 8), 3]
    runner.probes = [ProbeTrial("rounding", "", probe_args, Outputs("tensor", []), Outputs("tensor", []))]
    originals = [trials[0][0], pool[0][0], shape[0][0], probe_args[0]]
    expected = [t.clone() for t in originals]
    freed: list[int] = []
    for index, tensor in enumerate(originals):
        weakref.finalize(tensor, freed.append, index)
    packed = wire.pack({"init_inputs": [4], "trials": trials + [probe_args], "pool": pool, "shape_trials": shape})
    del trials, pool, shape, probe_args, originals, tensor
    runner.init_inputs, runner.trial_inputs, runner.pool_inputs, runner.shape_inputs = [4], [], [], []
    runner._seal_inputs(*packed)
    assert sorted(freed) == [0, 1, 2, 3]  # no host tensor of the generated sets is left
    kept = [runner.trial_inputs[0][0], runner.pool_inputs[0][0], runner.shape_inputs[0][0], runner.probes[0].args[0]]
    assert all(torch.equal(got, want) for got, want in zip(kept, expected, strict=True))
    assert runner.init_inputs == [4] and runner.trial_inputs[0][1] == 3 and len(runner.trial_inputs) == 1
    assert runner.sealed_inputs is not None and runner.sealed_inputs.buffer is not None


def test_the_judge_keeps_no_doubled_batch_a_candidates_reply_could_not_hold():
    """A candidate's sandbox cannot write a file over its RLIMIT_FSIZE: with 1 GiB outputs, five trials, the
    doubled batch and the probes made a reply over 8 GiB, and an honest candidate got `runtime_error` (EFBIG).
    The judge leaves out what would not fit, and says why."""
    runner = JudgeRunner.__new__(JudgeRunner)  # the judge's own logic, in this process
    runner.device, runner.model, runner._sync = torch.device("cpu"), torch.nn.Identity(), lambda: None
    runner.module = SimpleNamespace(get_inputs=lambda: [torch.randn(8, 1024)])
    trial_output_bytes = 2 * 8 * 1024 * 4  # two trials of the problem's batch
    runner.reply_max_bytes = 0  # no limit: the doubled batch is kept
    _, outputs, info = runner._shape_trial([1, 2], 1 << 30, trial_output_bytes)
    assert len(outputs) == 1 and info["widened"]
    runner.reply_max_bytes = REPLY_MARGIN_BYTES + trial_output_bytes  # room for the trials' outputs only
    _, outputs, info = runner._shape_trial([1, 2], 1 << 30, trial_output_bytes)
    assert outputs == []
    assert info["skipped"] == (f"a candidate's reply would take {trial_output_bytes + 16 * 1024 * 4} bytes with the "
                               f"doubled batch's output, over the {runner.reply_max_bytes}-byte limit on what a "
                               "sandbox may write")
