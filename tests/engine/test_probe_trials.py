"""Probe trials (sandbox_side/judging/probes.py, sandbox_side/judging/probe_inputs.py): inputs that
expose reduced precision and skipped elements, judged against float64 with the reference's own error
as the yardstick. Through the engine on CPU (Triton under its interpreter), and on numbers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from benchmarks.redteam.corpus import load_corpus
from contract.statuses import EvalStatus
from sandbox_side.judging import probes
from sandbox_side.judging.correctness import Outputs
from sandbox_side.judging.precision import (
    HONEST_REDUCTION_FACTOR,
    NOISE_ULPS,
    honest_reduction_ulps,
    noise_ulps,
    precision_check,
    reduction_length,
)
from sandbox_side.judging.probe_inputs import PROBE_KINDS, STRUCTURE_AMPLITUDE, probe_inputs
from sandbox_side.judging.probes import GROWTH, PROBE_RATIO, judge_probe, reference_unusable, scales_exactly

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


# None: a secret draw; 7: a draw on which the spikes probe also fails the candidate (seen on CPU); 110: a draw on
# which the problem's own trials flag it and the scaled probe does not.
@pytest.mark.parametrize("seed", [None, 7, 110])
def test_a_half_precision_cast_inside_a_reduction_is_flagged_by_a_probe(run_eval, seed):
    assert HALF_CAST_MEAN.count("tl.float16") == 1
    result = run_eval(MEAN.reference_source, HALF_CAST_MEAN, seed=seed)
    # Inside the tolerance on the problem's own inputs. (On about 1 secret draw in 20 the spikes probe also
    # fails it outright, where a spike rounded to half precision moves the mean past the tolerance; the
    # reward and the rule below are the same either way, so only the trials are asserted here.)
    assert all(trial.passed for trial in result.correctness.trials)
    assert result.flagged and result.reward == 0.0
    hit = next(h for h in result.rules if h.rule == "KJ-R12-precision-loss")
    # Each source of KJ-R12 is judged on its own, and every draw flags it from one or both: the problem's own
    # trials (their error ratio against float64), the scaled probe (its error beyond an honest reduction's).
    # Over 40 seeds the trials flagged it 34 times and the probe 39 times. A secret draw in the full suite had
    # the trials alone (1291x), as seed 110 does (trials 1520x; the probe 2727x, within an honest reduction's
    # ulps at its scale).
    trials, scaled = result.correctness.precision, _probe(result, "scaled")
    assert trials.passed is False or scaled.outcome == "flag", (trials, scaled)
    assert "RMS error vs float64: candidate" in hit.evidence and "reference" in hit.evidence, hit.evidence
    assert hit.evidence.startswith("the problem's trials") == (trials.passed is False)
    if scaled.outcome == "flag":
        assert "probe 'scaled'" in hit.evidence and scaled.ratio > PROBE_RATIO and "lower precision" in scaled.message
    # ~1000x the reference's error on the problem's inputs: at most borderline there (KJ-R12 also wants 1024
    # ulps). On the scaled probe it is 6e4-3e5x on most secret draws, but one draw in the full suite gave 960x:
    # the flag, not its margin, is what every draw guarantees. The fixed draws keep what they showed.
    if seed == 7:
        assert scaled.outcome == "flag" and scaled.ratio > 16 * PROBE_RATIO
        assert scaled.ratio > 4 * result.correctness.precision.ratio
    if seed == 110:
        assert trials.passed is False and scaled.outcome == "ok"


@pytest.mark.parametrize("case", ["honest_triton_mean_tree", "honest_triton_mean_kahan"])
def test_honest_tree_and_kahan_sums_pass_every_probe(run_eval, case):
    result = run_eval(MEAN.reference_source, CASES[case].candidate_source)
    assert result.status == EvalStatus.ok and not result.rules, result.rules
    assert sorted(p.kind for p in result.correctness.probes) == sorted(PROBE_KINDS)
    # A reduced output is judged against an honest reduction's error bound, not against its ratio to the
    # reference's error, which can be tiny on a secret draw: an honest tree sum's ratio passed 16 once in the full
    # suite (2026-11-26), its verdict ok and unflagged.
    assert all(p.ran and p.outcome == "ok"
               and (p.ulps <= p.honest_ulps if p.honest_ulps is not None else p.ratio < 16)
               for p in result.correctness.probes), result.correctness.probes


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
    for dtype, least, smallest_normal in ((torch.bfloat16, 2 ** -10, 0.0), (torch.float16, 2 ** -13, 2 ** -14)):
        rounded = moved.to(dtype).double()
        # Toward zero, every one of them in the type's normal range. Below half's smallest normal (6.1e-5) its
        # grid is absolute (2^-24), no longer a refinement of bfloat16's: a draw of 4096 values from
        # randn * 3 holds one such value in about 1 of 15 draws, and it may round either way there.
        normal = moved.abs() >= smallest_normal
        assert bool((rounded.abs() < moved.abs())[normal].all()), dtype
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


# -- structured probes: strided sampling ----------------------------------------------------------
LEVEL_MEAN = CASES["honest_triton_row_tiles_mean"]  # the mean of (4096, 256) values within 2% of a level


def test_a_mean_over_every_4th_row_fails_on_the_structured_probe(run_eval):
    result = run_eval(LEVEL_MEAN.reference_source, CASES["c2_strided_row_mean"].candidate_source)
    assert result.status == EvalStatus.incorrect and not result.correct
    assert all(trial.passed for trial in result.correctness.trials), "inside the tolerance on the problem's inputs"
    assert result.correctness.precision.passed, "and no precision flag there: its error is a subsample's"
    # Spikes are subsampled as uniformly as the rest: they do not move it beyond its rounding.
    assert _probe(result, "spikes").outcome == "ok"
    structured = _probe(result, "structured")
    # Beyond the failure threshold (FAIL_RTOLS tolerances) with room: a stride of 4 moves the weighted mean by
    # at least 0.3% whatever the secret phases (0.95% in one draw of the full suite, over 2.5% in others).
    assert structured.outcome == "fail" and structured.relative_error > 1.5 * probes.FAIL_RTOLS * 1e-4, structured
    assert "with a stride" in structured.message and "secret phases" in structured.inputs


def test_the_same_tiles_reading_every_row_pass_the_structured_probe(run_eval):
    result = run_eval(LEVEL_MEAN.reference_source, LEVEL_MEAN.candidate_source)
    assert result.status == EvalStatus.ok and not result.rules, result.rules
    structured = _probe(result, "structured")
    assert structured.ran and structured.outcome == "ok" and structured.ratio < 16, structured


@pytest.mark.parametrize("shape", [(4096,), (96, 256), (97, 1000), (6, 48, 24)])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_a_strided_read_of_any_period_sees_other_weights_than_the_whole_structured_probe(shape, sign):
    """Whatever the secret phases and wherever a stride of 2, 3, 4 or 8 starts, along the rows, the columns
    or the flat index, the mean weight of what it reads differs from the whole tensor's by more than 16
    tolerances (constant inputs: the probe's values are its weights, or their complement where negative)."""
    for seed in range(8):
        values = next(p for p in probe_inputs([torch.full(shape, sign)], torch.Generator().manual_seed(seed))
                      if p.kind == "structured").args[0].double()
        whole = float(values.mean())
        views = {"flat": values.reshape(-1, 1), "rows": values.reshape(-1, shape[-1]),
                 "columns": values.reshape(-1, shape[-1]).T}
        for name, view in views.items():
            for stride in (2, 3, 4, 8):
                if view.shape[0] < 8 * stride:
                    continue
                for start in range(stride):
                    part = float(view[start::stride].mean())
                    assert abs(part / whole - 1) > 16 * 1e-4, (name, stride, start, seed)


def test_the_structured_probe_keeps_zeros_signs_and_symmetry_and_stays_within_its_weights():
    matrix = torch.randn(24, 24)
    symmetric = matrix + matrix.T
    lower = torch.tril(torch.randn(16, 16))
    found = {p.kind: p for p in probe_inputs([symmetric, lower], torch.Generator().manual_seed(3))}
    changed_symmetric, changed_lower = found["structured"].args
    assert torch.equal(changed_symmetric, changed_symmetric.T)
    assert torch.equal(changed_lower == 0, lower == 0) and torch.equal(changed_lower.sign(), lower.sign())
    weights = (changed_lower[lower != 0] / lower[lower != 0]).double()
    assert bool((weights >= 1 - 1e-6).all() and (weights <= 1 + STRUCTURE_AMPLITUDE + 1e-6).all())


# -- precision on reduced outputs ------------------------------------------------------------------
def _sequential(values: torch.Tensor) -> float:
    """A float32 sum with one accumulator, element after element."""
    return float(np.add.accumulate(values.reshape(-1).numpy().astype(np.float32))[-1])


def _kahan(values: torch.Tensor) -> float:
    total = compensation = np.float32(0.0)
    for value in values.reshape(-1, 1024).sum(1).numpy().astype(np.float32):  # Kahan over block sums
        step = np.float32(value - compensation)
        new = np.float32(total + step)
        compensation = np.float32(np.float32(new - total) - step)
        total = new
    return float(total)


def _blocked(values: torch.Tensor) -> float:
    """Block tree sums added to one float32 total in a shuffled order (atomics)."""
    parts = values.reshape(-1, 1024).sum(1).numpy().astype(np.float32)
    np.random.default_rng(0).shuffle(parts)
    return float(np.add.accumulate(parts)[-1])


def _bf16_terms(values: torch.Tensor) -> float:
    return float(values.to(torch.bfloat16).float().sum())


MEANS = {"tree": lambda v: float(v.sum()), "sequential": _sequential, "kahan": _kahan, "blocked": _blocked}


def _mean_outputs(values: torch.Tensor, mean_of) -> tuple[Outputs, Outputs, Outputs]:
    """The reference's (PyTorch's), a candidate's and the float64 truth's mean of `values`."""
    n = values.numel()
    return (_out(values.mean().reshape(1)), _out(torch.tensor([mean_of(values) / n], dtype=torch.float32)),
            _out(values.double().mean().reshape(1)))


def _ratio(ref: Outputs, cand: Outputs, truth: Outputs) -> float:
    return precision_check([ref], [cand], [truth]).ratio


@pytest.mark.parametrize("draw", ["rand", "randn"])
def test_bfloat16_inside_a_mean_is_flagged_on_a_probe_however_high_its_ratio_already_is(draw):
    """Centred values: bfloat16 terms are ~1e4 times a tree sum's error on the problem's inputs already, so
    their ratio hardly grows on a probe (the growth rule let them pass); beyond an honest sum's bound of
    that length they are flagged. On values of one sign the rounding probe alone shows them."""
    n = 65536
    generator = torch.Generator().manual_seed(5)
    base = torch.rand(n, generator=generator) if draw == "rand" else torch.randn(n, generator=generator)
    usual = _ratio(*_mean_outputs(base, _bf16_terms))
    rounding = next(p for p in probe_inputs([base], torch.Generator().manual_seed(5)) if p.kind == "rounding")
    ref, cand, truth = _mean_outputs(rounding.args[0], _bf16_terms)
    reduced = judge_probe("rounding", rounding.description, ref, cand, truth, None, usual, reduction_length(n, 1))
    assert reduced.outcome == "flag" and reduced.ulps > reduced.honest_ulps, reduced
    assert "honest float32 reduction of 65536 values" in reduced.message
    if draw == "randn":
        assert usual > 1000 and reduced.ratio < GROWTH * usual, "its ratio does not grow GROWTH times"
        assert judge_probe("rounding", rounding.description, ref, cand, truth, None, usual).outcome == "ok"


@pytest.mark.parametrize("draw", ["rand", "randn", "smooth_l1_terms"])
def test_tree_kahan_blocked_and_sequential_float32_sums_pass_every_probe(draw):
    n = 16384
    generator = torch.Generator().manual_seed(2)
    if draw == "rand":
        base = torch.rand(n, generator=generator)
    elif draw == "randn":
        base = torch.randn(n, generator=generator)
    else:
        d = (torch.randn(n, generator=generator) - torch.randn(n, generator=generator)).abs()
        base = torch.where(d < 1, 0.5 * d * d, d - 0.5)
    reduction = reduction_length(n, 1)
    for seed in range(3):
        sets = [("problem", base)] + [(p.kind, p.args[0]) for p in probe_inputs([base], torch.Generator()
                                                                                  .manual_seed(seed))]
        usual = {name: _ratio(*_mean_outputs(base, mean_of)) for name, mean_of in MEANS.items()}
        for name, mean_of in MEANS.items():
            for kind, values in sets:
                ref, cand, truth = _mean_outputs(values, mean_of)
                if kind == "problem":
                    assert precision_check([ref], [cand], [truth], reduction).passed, (name, draw)
                    continue
                report = judge_probe(kind, kind, ref, cand, truth, None, usual[name], reduction)
                assert report.outcome == "ok", (name, draw, seed, report)


def test_a_long_sequential_sum_is_no_longer_flagged_for_the_growth_of_its_ratio():
    """One float32 accumulator over 65536 values of [0, 1): on the rounding probe its total's ulp nears the
    values' bfloat16 cells and it rounds them alike, hundreds of times a tree sum's error where it was tens
    on the problem's inputs. Within an honest sequential sum's bound: not a flag (the growth rule flagged)."""
    n = 65536
    base = torch.rand(n, generator=torch.Generator().manual_seed(4))
    usual = _ratio(*_mean_outputs(base, _sequential))
    rounding = next(p for p in probe_inputs([base], torch.Generator().manual_seed(4)) if p.kind == "rounding")
    ref, cand, truth = _mean_outputs(rounding.args[0], _sequential)
    grown = judge_probe("rounding", rounding.description, ref, cand, truth, None, usual)
    assert grown.outcome == "flag" and grown.ratio > GROWTH * usual, "the growth rule calls it lower precision"
    reduced = judge_probe("rounding", rounding.description, ref, cand, truth, None, usual, reduction_length(n, 1))
    assert reduced.outcome == "ok" and reduced.ulps < reduced.honest_ulps / 2, reduced


def test_the_reduced_noise_floor_follows_the_reduction_length():
    assert reduction_length(64 * 100, 100) == 6400 and reduction_length(63 * 100, 100) is None
    assert reduction_length(10, 0) is None
    small, large = noise_ulps(reduction_length(4096, 1)), noise_ulps(reduction_length(1 << 24, 1))
    assert small == HONEST_REDUCTION_FACTOR * honest_reduction_ulps(4096) < NOISE_ULPS
    assert large == NOISE_ULPS and noise_ulps(None) == NOISE_ULPS
