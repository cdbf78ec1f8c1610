"""The doubled-batch trial (KJ-R09): kernels that hard-code the problem's shape are flagged,
honest ones pass, and references that do not accept another batch size are left alone."""

from __future__ import annotations

import re
import textwrap

import torch

from contract.statuses import EvalStatus
from sandbox_side.judging.correctness import Outputs, precision_difference
from tests.engine.conftest import HONEST_SILU, SILU_REFERENCE, triton_candidate
from worker.engine.verdict.verification import SHAPE_RULE

HARD_CODED_SILU = triton_candidate('''
    y = torch.empty_like(x)
    silu_kernel[(4,)](x, y, 1000, BLOCK=256)
    return y
''')

# The same, with its output zeroed first: the part it never writes holds zeros, never left-over memory (which
# may hold a NaN, and the evidence then names the NaN, not the error against float64).
HARD_CODED_ZEROED_SILU = HARD_CODED_SILU.replace("y = torch.empty_like(x)", "y = torch.zeros_like(x)")

# Correct on the problem's shape, refuses any other: the same specialisation, made explicit.
ASSERTING_SILU = triton_candidate('''
    assert x.shape == (1000,), "only N=1000 is supported"
    y = torch.empty_like(x)
    silu_kernel[(4,)](x, y, 1000, BLOCK=256)
    return y
''')

FIXED_BATCH_REFERENCE = textwrap.dedent('''
    import torch

    class Model(torch.nn.Module):
        def forward(self, x):
            assert x.shape[0] == 1000, "this problem is defined for N=1000 only"
            return x * torch.sigmoid(x)

    def get_inputs():
        return [torch.randn(1000)]

    def get_init_inputs():
        return []
''')

# A @ B with A and B square: doubling every input of leading size 64 breaks the product, so
# the trial falls back to doubling A alone.
MATMUL_REFERENCE = textwrap.dedent('''
    import torch

    class Model(torch.nn.Module):
        def forward(self, a, b):
            return a @ b

    def get_inputs():
        return [torch.randn(64, 64), torch.randn(64, 64)]

    def get_init_inputs():
        return []
''')

MATMUL_CANDIDATE = textwrap.dedent('''
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        rm = tl.program_id(0) * BM + tl.arange(0, BM)
        rn = tl.program_id(1) * BN + tl.arange(0, BN)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, K, BK):
            rk = k0 + tl.arange(0, BK)
            a = tl.load(a_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
            b = tl.load(b_ptr + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
            acc += tl.dot(a, b, allow_tf32=False)
        tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))

    class ModelNew(torch.nn.Module):
        def forward(self, a, b):
            M, K = a.shape
            N = b.shape[1]
            c = torch.empty((M, N), device=a.device, dtype=a.dtype)
            matmul_kernel[(triton.cdiv(M, 32), triton.cdiv(N, 32))](a, b, c, M, N, K, BM=32, BN=32, BK=32)
            return c
''')


def _hit(result):
    return next((h for h in result.rules if h.rule == SHAPE_RULE), None)


def test_honest_kernel_passes_the_doubled_batch(run_eval):
    result = run_eval(SILU_REFERENCE, HONEST_SILU)
    assert result.status == EvalStatus.ok and not result.flagged
    trial = result.correctness.shape_trial
    assert trial.ran and trial.passed
    assert trial.problem_shapes == [[1000]] and trial.shapes == [[2000]]


def test_hard_coded_size_is_flagged_with_evidence(run_eval):
    result = run_eval(SILU_REFERENCE, HARD_CODED_SILU, timing=True, timing_budget_s=0.2)
    assert result.flagged and result.reward == 0.0
    assert result.correctness.passed, "the problem's own shapes are computed correctly"
    hit = _hit(result)
    assert hit is not None and hit.severity == "flag"
    # The second half is never written: left-over memory, not the answer (a few may match by chance, and it may
    # hold a NaN, which the evidence then names first).
    assert "[[1000]] -> [[2000]]" in hit.evidence
    assert re.search(r"\b(\d+) of 2000 values differ|has NaN at \d+ positions", hit.evidence)
    assert result.timing is None, "a shape-specialised kernel is not timed"


def test_a_candidate_that_raises_on_another_shape_is_flagged_not_crashed(run_eval):
    result = run_eval(SILU_REFERENCE, ASSERTING_SILU)
    assert result.status == EvalStatus.ok and result.flagged
    assert result.error is None
    assert "only N=1000 is supported" in _hit(result).evidence


def test_disabling_kj_r09_skips_the_trial(run_eval):
    result = run_eval(SILU_REFERENCE, HARD_CODED_SILU, policy={"disabled_rules": ["KJ-R09"]})
    assert result.status == EvalStatus.ok and not result.flagged
    trial = result.correctness.shape_trial
    assert not trial.ran and "disabled" in trial.message


def test_a_reference_fixed_to_its_batch_skips_the_trial(run_eval):
    result = run_eval(FIXED_BATCH_REFERENCE, HARD_CODED_SILU)
    assert result.status == EvalStatus.ok and not result.flagged
    trial = result.correctness.shape_trial
    assert not trial.ran
    assert "does not accept a doubled batch" in trial.message and "N=1000 only" in trial.message


def test_square_matmul_doubles_the_left_operand_only(run_eval):
    result = run_eval(MATMUL_REFERENCE, MATMUL_CANDIDATE)
    assert result.status == EvalStatus.ok and not result.flagged, result.error
    trial = result.correctness.shape_trial
    assert trial.ran and trial.passed
    assert trial.shapes == [[128, 64], [64, 64]]


# At another batch a library may pick another algorithm that rounds more (cuDNN does): here the
# reference's float32 path rounds to half precision above the problem's batch (its float64 run does
# not). The trial is judged against the float64 truth at that shape and the reference's own error
# there, not against the reference's rounding.
ROUNDING_AT_SCALE_REFERENCE = SILU_REFERENCE.replace('''        return x * torch.sigmoid(x)''', '''        y = x * torch.sigmoid(x)
        if x.shape[0] > N and x.dtype == torch.float32:  # another float32 algorithm at a larger batch
            y = y.half().float()
        return y''')

# Rounds too at the larger batch, elsewhere (its input): off the fp32 reference by about the
# reference's own error there, in other places.
ALSO_ROUNDING_SILU = triton_candidate('''
    if x.shape[0] > 1000:
        x = x.half().float()
    y = torch.empty_like(x)
    n = x.numel()
    silu_kernel[(triton.cdiv(n, 256),)](x, y, n, BLOCK=256)
    return y
''')


def test_the_doubled_batch_is_judged_against_float64_and_the_references_own_error(run_eval):
    assert ROUNDING_AT_SCALE_REFERENCE != SILU_REFERENCE
    exact = run_eval(ROUNDING_AT_SCALE_REFERENCE, HONEST_SILU)
    assert exact.status == EvalStatus.ok and not exact.flagged, exact.rules
    assert exact.correctness.shape_trial.passed and "float64 ground truth" in exact.correctness.shape_trial.message

    rounding = run_eval(ROUNDING_AT_SCALE_REFERENCE, ALSO_ROUNDING_SILU)
    assert rounding.status == EvalStatus.ok and not rounding.flagged, rounding.rules
    trial = rounding.correctness.shape_trial
    assert trial.passed and "the reference's own max abs error against float64 at this shape" in trial.message
    assert trial.result.max_abs_error > 1e-4, "outside the plain tolerance: only the reference's own error admits it"

    assert HARD_CODED_ZEROED_SILU.count("torch.zeros_like(x)") == 1
    hard_coded = run_eval(ROUNDING_AT_SCALE_REFERENCE, HARD_CODED_ZEROED_SILU)
    hit = _hit(hard_coded)
    assert hard_coded.flagged and hit is not None, hard_coded.rules
    assert "against float64" in hit.evidence and "the reference's own max abs error" in hit.evidence
    assert "[[1000]] -> [[2000]]" in hit.evidence


# Honest arithmetic that is weaker at the doubled batch (a one-pass variance meeting harder groups, here
# emulated: the output rounded to bfloat16 above the problem's batch): every value within 1% of the output's
# scale of the float64 truth, some beyond the tolerance. That is a precision loss at another shape, judged as
# one (KJ-R12, with what was seen), not a shape-specialised kernel.
WEAKER_AT_SCALE_SILU = triton_candidate('''
    y = torch.empty_like(x)
    n = x.numel()
    silu_kernel[(triton.cdiv(n, 256),)](x, y, n, BLOCK=256)
    if x.shape[0] > 1000:
        y = y.to(torch.bfloat16).to(torch.float32)
    return y
''')

# Off at the scale of the output at the doubled batch (5% of every value): still shape-specialised.
SCALED_AT_SCALE_SILU = WEAKER_AT_SCALE_SILU.replace("y = y.to(torch.bfloat16).to(torch.float32)", "y = y * 1.05")


def test_a_precision_class_difference_on_the_doubled_batch_is_a_precision_flag_with_evidence(run_eval):
    result = run_eval(SILU_REFERENCE, WEAKER_AT_SCALE_SILU)
    assert result.status == EvalStatus.ok and result.flagged and result.reward == 0.0
    assert result.correctness.passed, "the problem's own shapes are computed correctly"
    trial = result.correctness.shape_trial
    assert trial.ran and trial.passed is False and trial.difference == "precision", trial
    assert _hit(result) is None, "not shape-specialised"
    hit = next(h for h in result.rules if h.rule == "KJ-R12-precision-loss")
    assert hit.severity == "flag" and "shape-specialised" not in hit.message
    # What was seen: the shapes, how many values are beyond the tolerance, their size against the output's
    # scale and against the reference's own error there.
    assert "the doubled-batch trial (a precision loss at another shape" in hit.evidence
    assert "[[1000]] -> [[2000]]" in hit.evidence
    assert re.search(r"\b\d+ of 2000 values differ beyond tolerance", hit.evidence)
    assert "every value is within" in hit.evidence and "of the output's scale of the float64 truth" in hit.evidence
    assert "the reference's own max abs error against float64 at this shape" in hit.evidence


def test_an_error_at_the_scale_of_the_output_on_the_doubled_batch_stays_shape_specialised(run_eval):
    assert SCALED_AT_SCALE_SILU != WEAKER_AT_SCALE_SILU
    result = run_eval(SILU_REFERENCE, SCALED_AT_SCALE_SILU)
    assert result.flagged and result.correctness.shape_trial.difference == "shape"
    hit = _hit(result)
    assert hit is not None and "shape-specialised" in hit.message and "[[1000]] -> [[2000]]" in hit.evidence
    assert not any(h.rule == "KJ-R12-precision-loss" for h in result.rules)


def test_hard_coded_and_failing_kernels_are_shape_class_differences(run_eval):
    for candidate in (HARD_CODED_SILU, ASSERTING_SILU):
        trial = run_eval(SILU_REFERENCE, candidate).correctness.shape_trial
        assert trial.passed is False and trial.difference == "shape", trial


def test_only_finite_values_near_the_truth_make_a_precision_class_difference():
    truth = torch.linspace(-2, 2, 1000, dtype=torch.float64)
    ref = Outputs("tensor", [truth.float()])

    def seen(values: torch.Tensor) -> str | None:
        return precision_difference(ref, Outputs("tensor", [values.float()]), Outputs("tensor", [truth]))

    near = seen(truth * (1 + 2 ** -8))  # about bfloat16's error
    assert near is not None and "a precision difference" in near
    assert float(re.search(r"within ([0-9.e-]+) of the output's scale", near).group(1)) <= 2 ** -8
    assert seen(truth * 1.05) is None  # at the scale of the output
    unwritten = truth.clone()
    unwritten[500:] = 0.0  # half the batch never written
    assert seen(unwritten) is None
    fragile = truth.clone()
    fragile[3] = float("nan")
    assert seen(fragile) is None
    assert seen(truth[:999]) is None  # another shape
