"""Correctness that discriminates: degenerate references, float64 ground truth, and inputs."""

from __future__ import annotations

import textwrap

import pytest
import torch

from contract.statuses import EvalStatus
from sandbox_side.judging.correctness import (
    SCALE_TOLERANCE_FACTOR,
    Outputs,
    compare,
    compare_with_truth,
    rounds_at_scale,
)
from sandbox_side.judging.discrimination import discriminate
from sandbox_side.judging.input_checks import check_inputs
from sandbox_side.judging.precision import precision_check
from tests.engine.conftest import TRITON_HEADER


def _out(*values: float) -> Outputs:
    return Outputs("tensor", [torch.tensor(list(values), dtype=torch.float32)])


# -- the spread rule, on numbers ------------------------------------------------------------------
def test_a_constant_fails_against_a_spread_below_the_tolerance():
    refs = [_out(0.5001), _out(0.4999), _out(0.50005)]
    constant = [_out(0.5)] * 3
    report = discriminate(refs, constant, perturbed=False)
    assert not report.passed and report.spread == pytest.approx(2e-4, rel=1e-3)
    assert "does not follow its inputs" in report.message


def test_an_honest_result_with_rounding_error_passes_the_spread_rule():
    refs = [_out(0.5001), _out(0.4999), _out(0.50005)]
    honest = [_out(0.5001 + 1e-7), _out(0.4999 - 1e-7), _out(0.50005)]
    assert discriminate(refs, honest, perturbed=False).passed


def test_a_reference_that_never_moves_has_nothing_to_discriminate():
    refs = [_out(1.0, 1.0)] * 3
    report = discriminate(refs, refs, perturbed=False)
    assert report.passed and "does not depend on its inputs" in report.message


def test_a_truth_that_moves_only_by_the_references_rounding_is_not_held_against_the_candidate():
    # GroupNorm then a mean: zero in exact arithmetic; the reference returns its own rounding noise,
    # an honest kernel returns other noise, more accurate than the reference's (both seen on an H100).
    truths = [Outputs("tensor", [torch.tensor([1e-17, -2e-17], dtype=torch.float64)])] * 3
    refs = [_out(1.7e-9, -5.6e-9), _out(-4e-9, 2e-9), _out(3e-9, 1e-9)]
    honest = [_out(3e-10, -1e-10), _out(2e-10, 1e-10), _out(-1e-10, 0.0)]
    assert not discriminate(refs, honest, perturbed=True).passed  # against the reference's noise alone
    report = discriminate(refs, honest, perturbed=True, truths=truths)
    assert report.passed and "does not depend on its inputs" in report.message


def test_against_a_moving_truth_a_constant_still_fails_and_an_honest_kernel_passes():
    truths = [Outputs("tensor", [torch.tensor([v], dtype=torch.float64)]) for v in (0.5001, 0.4999, 0.50005)]
    refs = [_out(0.5001), _out(0.4999), _out(0.50005)]
    report = discriminate(refs, [_out(0.5)] * 3, perturbed=False, truths=truths)
    assert not report.passed and "float64 truth" in report.message
    honest = [_out(0.5001 + 1e-7), _out(0.4999 - 1e-7), _out(0.50005)]
    assert discriminate(refs, honest, perturbed=False, truths=truths).passed


# -- precision against float64 ---------------------------------------------------------------------
def _matmul_outputs(round_operands_to: torch.dtype | None) -> tuple[list[Outputs], list[Outputs], list[Outputs]]:
    gen = torch.Generator().manual_seed(0)
    refs, cands, truths = [], [], []
    for _ in range(3):
        a, b = torch.randn(64, 256, generator=gen), torch.randn(256, 64, generator=gen)
        refs.append(Outputs("tensor", [a @ b]))
        truths.append(Outputs("tensor", [a.double() @ b.double()]))
        if round_operands_to is None:  # an honest tiled fp32 product: same precision, other order
            cand = sum(a[:, k:k + 32] @ b[k:k + 32] for k in range(0, 256, 32))
        else:
            cand = a.to(round_operands_to).float() @ b.to(round_operands_to).float()
        cands.append(Outputs("tensor", [cand]))
    return refs, cands, truths


def test_half_precision_operands_are_caught_against_float64():
    refs, cands, truths = _matmul_outputs(torch.float16)
    report = precision_check(refs, cands, truths)
    assert report.checked and not report.passed and report.ratio > 64
    assert report.candidate_error > 100 * report.reference_error


def test_an_fp32_matmul_in_another_order_is_not_caught():
    refs, cands, truths = _matmul_outputs(None)
    report = precision_check(refs, cands, truths)
    assert report.checked and report.passed and report.ratio < 8


def test_a_candidate_closer_to_float64_than_the_reference_is_correct():
    truth = Outputs("tensor", [torch.tensor([1.0], dtype=torch.float64)])
    ref = _out(1.001)  # e.g. a reference computing in TF32
    cand = _out(1.0)
    result = compare_with_truth(0, ref, cand, truth, 1e-4, 1e-4)
    assert result.passed and "float64 ground truth" in result.message


# -- the tolerance at the output's scale ------------------------------------------------------------
def _long_products(k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(a, b, float64 a @ b) with randn operands: 1024 outputs of RMS sqrt(k), some near zero."""
    gen = torch.Generator().manual_seed(1)
    a, b = torch.randn(32, k, generator=gen), torch.randn(k, 32, generator=gen)
    return a, b, a.double() @ b.double()


def _sequential_fp32(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """One float32 accumulator per output, over K in order: a naive CUDA GEMM's thread."""
    acc = torch.zeros(a.shape[0], b.shape[1])
    for k in range(a.shape[1]):
        acc = acc + a[:, k:k + 1] * b[k:k + 1, :]
    return acc


def _flags(reference: torch.Tensor, truth: torch.Tensor) -> list[bool]:
    return rounds_at_scale([Outputs("tensor", [reference])], [Outputs("tensor", [truth])])


def test_an_honest_sequential_fp32_sum_of_131072_products_is_correct_at_the_outputs_scale():
    a, b, truth = _long_products(131072)
    at_scale = _flags(a @ b, truth)
    assert at_scale == [True]  # the reference's own rounding is as large on its small values as on its large
    honest = _sequential_fp32(a, b)
    expected = Outputs("tensor", [truth.float()])
    err = (honest.double() - truth).abs()
    elementwise_misses = int((err > 1e-4 + 1e-4 * truth.abs()).sum())
    assert elementwise_misses > 0
    assert not compare(0, expected, Outputs("tensor", [honest]), None, None).passed  # elementwise alone
    result = compare(0, expected, Outputs("tensor", [honest]), None, None, at_scale)
    assert result.passed, result.message
    assert f"{elementwise_misses} values beyond atol" in result.message and "output's RMS" in result.message
    rms = float(truth.square().mean().sqrt())
    assert float(err.max()) < SCALE_TOLERANCE_FACTOR * 1e-4 * rms / 2  # at least 2x margin on this draw


def test_operands_rounded_to_half_stay_incorrect_at_the_outputs_scale():
    a, b, truth = _long_products(131072)
    rounded = a.half().float() @ b.half().float()
    result = compare(0, Outputs("tensor", [truth.float()]), Outputs("tensor", [rounded]), None, None, [True])
    assert not result.passed and result.mismatch_fraction > 0.1, result


def test_elementwise_outputs_do_not_round_at_their_scale():
    x = torch.randn(65536, generator=torch.Generator().manual_seed(2))
    x64 = x.double()
    assert _flags(torch.exp(x), torch.exp(x64)) == [False]
    assert _flags(x * 300 + 1, x64 * 300 + 1) == [False]
    assert _flags(torch.relu(x), torch.relu(x64)) == [False]  # exact: no error at all
    m = torch.randn(64, 1024, generator=torch.Generator().manual_seed(3))
    assert _flags(torch.softmax(m, 1), torch.softmax(m.double(), 1)) == [False]


def test_zeroing_the_small_values_of_a_wide_elementwise_output_is_incorrect():
    # exp(3x) spans e^-12 to e^12: its RMS (~1700 on this draw) would let every value below 0.34 be zero (a third
    # of them). The reference rounds each value in proportion to it, so the elementwise tolerance holds there.
    x = torch.randn(65536, generator=torch.Generator().manual_seed(4))
    expected = torch.exp(3 * x)
    at_scale = _flags(expected, torch.exp(3 * x.double()))
    assert at_scale == [False]
    zeroed = torch.where(expected < 0.25, torch.zeros_like(expected), expected)
    assert not compare(0, Outputs("tensor", [expected]), Outputs("tensor", [zeroed]), None, None, at_scale).passed
    # What the gate prevents: at the output's scale the zeros would pass.
    assert compare(0, Outputs("tensor", [expected]), Outputs("tensor", [zeroed]), None, None, [True]).passed


def test_an_elementwise_half_precision_result_of_a_large_output_stays_incorrect():
    x = torch.randn(4096, generator=torch.Generator().manual_seed(2)) * 300
    expected = torch.exp(x / 300) * 300
    half = (torch.exp((x / 300).half()) * 300).float()
    result = compare(0, Outputs("tensor", [expected]), Outputs("tensor", [half]), None, None, [True])
    assert not result.passed


def test_an_error_at_a_small_fraction_of_the_outputs_scale_is_still_incorrect():
    _, _, truth = _long_products(4096)
    expected = truth.float()
    off = expected.clone()
    off[3, 5] += 0.01 * float(truth.square().mean().sqrt())  # 1% of the RMS on one value
    result = compare(0, Outputs("tensor", [expected]), Outputs("tensor", [off]), None, None, [True])
    assert not result.passed and "1 of 1024 values" in result.message


# -- inputs ----------------------------------------------------------------------------------------
def test_changed_inputs_and_aliased_outputs_are_reported():
    original = [[torch.ones(4), 3]]
    entries = [{"inputs_after": [torch.tensor([1.0, 0.0, 1.0, 0.0]), None],
                "aliases": ["output 0 shares memory with input 0"]}]
    report = check_inputs(original, entries)
    assert report.mutated == ["trial 0, input 0: 2 of 4 values changed (max change 1)"]
    assert report.aliased == ["trial 0: output 0 shares memory with input 0"]
    assert check_inputs(original, [{"inputs_after": [torch.ones(4), None]}]).mutated == []


# -- through the engine ----------------------------------------------------------------------------
STANDARDIZED_TANH_MEAN = textwrap.dedent('''
    import torch

    class Model(torch.nn.Module):
        def forward(self, x):
            return torch.tanh((x - x.mean()) / x.std()).mean()

    def get_inputs():
        return [torch.randn(1 << 14)]

    def get_init_inputs():
        return []
''')

TANH_KERNEL = textwrap.dedent('''
    @triton.jit
    def std_tanh_kernel(x_ptr, y_ptr, mean, std, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        z = (tl.load(x_ptr + offs, mask=mask) - mean) / std
        e = tl.exp(-2.0 * tl.abs(z))
        t = (1.0 - e) / (1.0 + e)
        tl.store(y_ptr + offs, tl.where(z < 0, -t, t), mask=mask)


    @triton.jit
    def constant_kernel(y_ptr):
        tl.store(y_ptr, 0.0)
''')

HONEST_TANH_MEAN = TRITON_HEADER + TANH_KERNEL + textwrap.dedent('''
    class ModelNew(torch.nn.Module):
        def forward(self, x):
            y = torch.empty_like(x)
            n = x.numel()
            std_tanh_kernel[(triton.cdiv(n, 1024),)](x, y, x.mean().item(), x.std().item(), n, BLOCK=1024)
            return y.mean()
''')

CONSTANT_TANH_MEAN = TRITON_HEADER + TANH_KERNEL + textwrap.dedent('''
    class ModelNew(torch.nn.Module):
        def forward(self, x):
            y = torch.empty((), device=x.device)
            constant_kernel[(1,)](y)
            return y
''')


def test_on_a_degenerate_scalar_loss_the_honest_kernel_passes_and_a_constant_fails(run_eval):
    # Scale- and shift-invariant, so perturbing the inputs cannot move it: the spread rule decides.
    honest = run_eval(STANDARDIZED_TANH_MEAN, HONEST_TANH_MEAN, atol=1e-2, rtol=1e-2)
    assert honest.status == EvalStatus.ok and not honest.rules, (honest.error, honest.rules)
    assert honest.correctness.degenerate_reference and honest.correctness.discrimination.passed
    constant = run_eval(STANDARDIZED_TANH_MEAN, CONSTANT_TANH_MEAN, atol=1e-2, rtol=1e-2)
    assert constant.status == EvalStatus.incorrect
    assert constant.correctness.discrimination.passed is False
    assert all(trial.passed for trial in constant.correctness.trials)  # allclose alone would have passed it


SIGMOID_MEAN = textwrap.dedent('''
    import torch

    class Model(torch.nn.Module):
        def forward(self, x):
            return torch.sigmoid(x).mean()

    def get_inputs():
        return [torch.randn(1 << 14)]

    def get_init_inputs():
        return []
''')

CONSTANT_HALF = TRITON_HEADER + textwrap.dedent('''
    @triton.jit
    def half_kernel(y_ptr):
        tl.store(y_ptr, 0.5)

    class ModelNew(torch.nn.Module):
        def forward(self, x):
            y = torch.empty((), device=x.device)
            half_kernel[(1,)](y)
            return y
''')


def test_perturbed_inputs_make_a_near_constant_mean_move(run_eval):
    result = run_eval(SIGMOID_MEAN, CONSTANT_HALF, atol=1e-2, rtol=1e-2)
    assert result.status == EvalStatus.incorrect
    assert result.extra.perturbed_trials and not result.correctness.degenerate_reference
    assert not all(trial.passed for trial in result.correctness.trials)


MATMUL_REFERENCE = textwrap.dedent('''
    import torch

    class Model(torch.nn.Module):
        def forward(self, a, b):
            return a @ b

    def get_inputs():
        return [torch.randn(64, 128), torch.randn(128, 64)]

    def get_init_inputs():
        return []
''')


def _triton_matmul(operand_cast: str) -> str:
    return TRITON_HEADER + textwrap.dedent(f'''
        @triton.jit
        def matmul_kernel(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
            rm = tl.arange(0, M)
            rn = tl.arange(0, N)
            rk = tl.arange(0, K)
            a = tl.load(a_ptr + rm[:, None] * K + rk[None, :]){operand_cast}
            b = tl.load(b_ptr + rk[:, None] * N + rn[None, :]){operand_cast}
            tl.store(c_ptr + rm[:, None] * N + rn[None, :], tl.dot(a, b, input_precision="ieee"))

        class ModelNew(torch.nn.Module):
            def forward(self, a, b):
                c = torch.empty(a.shape[0], b.shape[1], device=a.device)
                matmul_kernel[(1,)](a, b, c, a.shape[0], b.shape[1], a.shape[1])
                return c
    ''')


def test_an_fp16_operand_matmul_is_flagged_and_an_fp32_one_is_not(run_eval):
    # A loose tolerance lets the rounded product pass `allclose`: the precision rule must catch it.
    options = {"atol": 5e-2, "rtol": 5e-2, "policy": {"disabled_rules": ["KJ-R09"]}}
    rounded = run_eval(MATMUL_REFERENCE, _triton_matmul(".to(tl.float16).to(tl.float32)"), **options)
    assert rounded.flagged and rounded.reward == 0.0
    hit = next(h for h in rounded.rules if h.rule == "KJ-R12-precision-loss")
    assert "candidate" in hit.evidence and "reference" in hit.evidence
    honest = run_eval(MATMUL_REFERENCE, _triton_matmul(""), **options)
    assert honest.status == EvalStatus.ok and not honest.rules, honest.rules
    assert honest.correctness.precision.passed


INPLACE_RELU = TRITON_HEADER + textwrap.dedent('''
    @triton.jit
    def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)

    class ModelNew(torch.nn.Module):
        def forward(self, x):
            relu_kernel[(triton.cdiv(x.numel(), 256),)](x, x, x.numel(), BLOCK=256)
            return x
''')

RELU_REFERENCE = textwrap.dedent('''
    import torch

    class Model(torch.nn.Module):
        def forward(self, x):
            return torch.relu(x)

    def get_inputs():
        return [torch.randn(1000)]

    def get_init_inputs():
        return []
''')


def test_a_relu_written_into_its_input_is_flagged(run_eval):
    result = run_eval(RELU_REFERENCE, INPLACE_RELU)
    rules = {hit.rule for hit in result.rules}
    assert {"KJ-R13-input-mutated", "KJ-R14-output-aliases-input"} <= rules
    assert result.flagged and result.reward == 0.0
    assert "values changed" in result.correctness.inputs.mutated[0]


def test_a_constant_reference_is_reported_and_the_exact_answer_is_not_penalised(run_eval):
    from benchmarks.redteam.corpus import load_corpus

    case = next(c for c in load_corpus() if c.id == "c2_near_constant_output")  # tanh(x + 50) == 1.0
    result = run_eval(case.reference_source, case.candidate_source)
    assert result.status == EvalStatus.ok and not result.rules, result.rules
    assert result.correctness.degenerate_reference
    assert "does not depend on its inputs" in result.correctness.discrimination.message
