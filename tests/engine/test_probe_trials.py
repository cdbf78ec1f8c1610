"""Probe trials (worker/engine/probes.py, worker/engine/sandbox_runtime/probe_inputs.py): inputs that
expose reduced precision and skipped elements, judged against float64 with the reference's own error
as the yardstick. Through the engine on CPU (Triton under its interpreter), and on numbers."""

from __future__ import annotations

import pytest
import torch

from benchmarks.redteam.corpus import load_corpus
from worker.engine.correctness import Outputs
from worker.engine.probes import PROBE_RATIO, judge_probe, reference_unusable, scales_exactly
from worker.engine.sandbox_runtime.probe_inputs import PROBE_KINDS, probe_inputs
from worker.models import EvalStatus

CASES = {case.id: case for case in load_corpus()}
MEAN = CASES["honest_triton_mean_tree"]  # the mean of 204803 randn values (200 blocks of 1024 and 3)
# The honest tree sum with every element rounded to half precision inside the reduction.
HALF_CAST_MEAN = MEAN.candidate_source.replace("tl.load(x_ptr + offs, mask=offs < n, other=0.0)",
                                               "tl.load(x_ptr + offs, mask=offs < n, other=0.0).to(tl.float16)"
                                               ".to(tl.float32)")


def _probe(result, kind: str):
    return next(p for p in result.correctness.probes if p.kind == kind)


def test_a_mean_over_a_subset_fails_on_the_spikes_probe(run_eval):
    result = run_eval(MEAN.reference_source, CASES["c2_mean_over_subset"].candidate_source)
    assert result.status == EvalStatus.incorrect and not result.correct
    assert all(trial.passed for trial in result.correctness.trials), "inside the tolerance on the problem's inputs"
    spikes = _probe(result, "spikes")
    # How far off depends on the secret draw (a relative error of 0.007 to over 0.01 seen): the verdict and
    # its margin over the probe's own threshold are what is fixed.
    assert spikes.outcome == "fail" and spikes.ratio > 16 * PROBE_RATIO, spikes
    assert "skips input elements" in spikes.message
    assert "secret positions" in spikes.inputs  # what was done, never where


def test_a_half_precision_cast_inside_a_reduction_is_flagged_by_a_probe(run_eval):
    assert HALF_CAST_MEAN.count("tl.float16") == 1
    result = run_eval(MEAN.reference_source, HALF_CAST_MEAN)
    assert result.correctness.passed and all(trial.passed for trial in result.correctness.trials)
    assert result.flagged and result.reward == 0.0
    hit = next(h for h in result.rules if h.rule == "KJ-R12-precision-loss")
    assert "probe 'scaled'" in hit.evidence and "candidate" in hit.evidence and "reference" in hit.evidence
    scaled = _probe(result, "scaled")
    assert scaled.outcome == "flag" and scaled.ratio > 16 * PROBE_RATIO and "lower precision" in scaled.message
    # ~1000x the reference's error on the problem's inputs: at most borderline there (KJ-R12 also wants 1024
    # ulps); several thousand to 1e6x on the scaled probe, depending on the secret draw of the inputs.
    assert scaled.ratio > 4 * result.correctness.precision.ratio


@pytest.mark.parametrize("case", ["honest_triton_mean_tree", "honest_triton_mean_kahan"])
def test_honest_tree_and_kahan_sums_pass_every_probe(run_eval, case):
    result = run_eval(MEAN.reference_source, CASES[case].candidate_source)
    assert result.status == EvalStatus.ok and not result.rules, result.rules
    assert sorted(p.kind for p in result.correctness.probes) == sorted(PROBE_KINDS)
    assert all(p.ran and p.outcome == "ok" and p.ratio < 16 for p in result.correctness.probes), \
        result.correctness.probes


def test_probe_trials_are_switched_off_with_kj_r15(run_eval):
    honest = run_eval(MEAN.reference_source, MEAN.candidate_source, policy={"disabled_rules": ["KJ-R15"]})
    assert honest.status == EvalStatus.ok and honest.correctness.probes == []
    skipping = run_eval(MEAN.reference_source, CASES["c2_mean_over_subset"].candidate_source,
                        policy={"disabled_rules": ["KJ-R15"]})
    assert skipping.correctness.passed and skipping.correctness.probes == [], "only the spikes probe fails it"


# -- the inputs ------------------------------------------------------------------------------------
def test_probes_change_only_floating_tensors_and_keep_zeros_signs_and_symmetry():
    matrix = torch.randn(6, 6)
    symmetric = matrix + matrix.T
    lower = torch.tril(torch.randn(8, 8))
    labels = torch.randint(0, 5, (8,))
    args = [lower, labels, symmetric, 3, torch.tensor(0.5)]
    found = {p.kind: p for p in probe_inputs(args, torch.Generator().manual_seed(1))}
    assert sorted(found) == sorted(PROBE_KINDS)
    for probe in found.values():
        changed_lower, same_labels, changed_symmetric, scalar, hyper = probe.args
        assert torch.equal(same_labels, labels) and scalar == 3 and torch.equal(hyper, torch.tensor(0.5))
        assert torch.equal(changed_lower == 0, lower == 0), probe.kind  # zeros stay zero
        assert torch.equal(torch.sign(changed_lower), torch.sign(lower)), probe.kind
        assert torch.equal(changed_symmetric, changed_symmetric.T), probe.kind
    spiked = found["spikes"].args[0]
    spikes = spiked != lower
    assert spikes[-1, -1], "the last non-zero element always carries a spike"
    height = min(16 * float(lower.square().mean().sqrt()), 2 * float(lower.abs().max()))
    assert int(spikes.sum()) >= 2 and bool((spiked[spikes].abs() >= height).all())
    assert torch.unique(spiked[spikes]).numel() == int(spikes.sum()), "all different: no ties for an arg-max"


def test_the_rounding_probe_makes_half_and_bfloat16_round_every_value_toward_zero():
    x = torch.randn(4096) * 3
    moved = next(p for p in probe_inputs([x], torch.Generator().manual_seed(1)) if p.kind == "rounding").args[0]
    assert bool(((moved - x).abs() <= x.abs() * 2 ** -7).all()), "within one bfloat16 cell of where it was"
    for dtype, least in ((torch.bfloat16, 2 ** -10), (torch.float16, 2 ** -13)):
        rounded = moved.to(dtype).double()
        assert bool((rounded.abs() < moved.abs()).all()), dtype  # toward zero, every one of them
        # Every error has the value's sign, so a sum of magnitudes (a loss, a norm) keeps all of them.
        assert float(((rounded - moved) * moved.sign()).sum() / moved.abs().sum()) < -least, dtype


def test_spike_positions_follow_the_secret_seed():
    x = torch.randn(64, 64)

    def positions(seed: int) -> torch.Tensor:
        spiked = next(p for p in probe_inputs([x], torch.Generator().manual_seed(seed)) if p.kind == "spikes")
        return spiked.args[0] != x

    assert torch.equal(positions(7), positions(7))
    assert not torch.equal(positions(7), positions(8))


# -- the judging, on numbers -----------------------------------------------------------------------
def _out(values) -> Outputs:
    return Outputs("tensor", [torch.as_tensor(values)])


def test_values_nan_where_the_truth_is_finite_are_counted_and_left_out():
    truth = _out(torch.linspace(1, 2, 100, dtype=torch.float64))
    ref = _out(truth.tensors[0].float())
    fragile = ref.tensors[0].clone()
    fragile[:10] = float("nan")  # e.g. a hand-written tanh overflowing on large inputs
    report = judge_probe("spikes", "inputs with spikes", ref, _out(fragile), truth, None)
    assert report.outcome == "ok" and report.non_finite == 10 and "left out" in report.message


def test_the_scaled_probe_is_kept_only_where_the_reference_scales_bit_for_bit():
    x = torch.randn(64, 32)
    w = torch.randn(32, 16)
    times = 2.0 ** -20
    assert scales_exactly(_out(((x * times) @ w).sum(0)), _out((x @ w).sum(0)))
    # A bias (or an eps, or a nonlinearity) makes the scaled inputs round differently: no yardstick.
    assert not scales_exactly(_out((x * times) @ w + 1.0), _out(x @ w + 1.0))
    assert not scales_exactly(_out(torch.sigmoid(x * times)), _out(torch.sigmoid(x)))


def test_integer_outputs_must_match_on_the_spikes_probe_only():
    truth = _out(torch.tensor([1.0, 2.0], dtype=torch.float64))
    ref = Outputs("tuple", [truth.tensors[0].float(), torch.tensor([3, 4])])
    cand = Outputs("tuple", [truth.tensors[0].float(), torch.tensor([3, 5])])
    truth_pair = Outputs("tuple", [truth.tensors[0], torch.tensor([3, 4])])
    spikes = judge_probe("spikes", "spikes", ref, cand, truth_pair, None)
    assert spikes.outcome == "fail" and spikes.index_mismatches == 1
    assert judge_probe("rounding", "rounding", ref, cand, truth_pair, None).outcome == "ok"


def test_a_reference_that_loses_its_precision_on_a_probe_is_no_yardstick():
    truth = _out(torch.linspace(1, 2, 100, dtype=torch.float64))
    exact = _out(truth.tensors[0].float())
    rounded = _out(truth.tensors[0].half().float())  # the reference itself in half precision here
    assert reference_unusable("scaled", exact, truth, [exact], [truth]) is None
    assert "grows to" in reference_unusable("scaled", rounded, truth, [exact], [truth])
    indices = _out(torch.tensor([1, 2]))
    assert reference_unusable("spikes", indices, indices, [indices], [indices]) is None
    assert "no floating-point value" in reference_unusable("rounding", indices, indices, [indices], [indices])
